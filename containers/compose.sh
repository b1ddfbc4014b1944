#!/usr/bin/env bash
# docker-compose (v1) or `docker compose` (v2) on containers/docker-compose.yml, with its COSIM_*
# settings filled in; every argument goes to compose:
#
#   containers/compose.sh up -d
#   COSIM_PROJECT=mine COSIM_HUB_PORT=50150 containers/compose.sh up -d   # a second stack beside it
#   containers/compose.sh down
#
#   COSIM_PROJECT    compose project name                       (default cosim)
#   COSIM_HUB_PORT   the hub's port on 127.0.0.1                (default 50050)
#   COSIM_RUNS_DIR   where the hub's run folders go on the host (default runs/compose)
#   COSIM_UID, COSIM_GID  the user the hub runs as, who owns its run folders (default: you; when you
#                         are root, the image's user cosim, 10001: no container runs as root)
#   COSIM_HUB_TOKEN  a bearer token the hub requires (cosim submit reads the same variable; default none)
#   COSIM_IMAGE      the image                                  (default cosim:local)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
if [[ "$(id -u)" == 0 ]]; then
  export COSIM_UID=${COSIM_UID:-10001} COSIM_GID=${COSIM_GID:-10001}
else
  export COSIM_UID=${COSIM_UID:-$(id -u)} COSIM_GID=${COSIM_GID:-$(id -g)}
fi
export COSIM_RUNS_DIR=${COSIM_RUNS_DIR:-$ROOT/runs/compose}

# The runs folder exists before compose mounts it (else the engine creates it, owned by root), and a
# new one belongs to the hub's user.
if [[ ! -d "$COSIM_RUNS_DIR" ]]; then
  mkdir -p "$COSIM_RUNS_DIR"
  if [[ "$(id -u)" == 0 && "$COSIM_UID" != 0 ]]; then chown "$COSIM_UID:$COSIM_GID" "$COSIM_RUNS_DIR"; fi
fi

if command -v docker-compose >/dev/null; then
  COMPOSE=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  COMPOSE=(docker compose)
else
  echo "containers/compose.sh: neither docker-compose nor \`docker compose\` is installed" >&2
  exit 1
fi
exec "${COMPOSE[@]}" -p "${COSIM_PROJECT:-cosim}" -f "$HERE/docker-compose.yml" "$@"
