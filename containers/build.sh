#!/usr/bin/env bash
# Builds the cosim image (default cosim:local) with no container registry:
#   1. the base image (containers/build-base.sh, unless BASE names another image),
#   2. wheels of cosim and its dependencies, built on this host with pip,
#   3. `docker build` from those wheels alone.
#
#   containers/build.sh                          # local base image
#   BASE=python:3.11-slim containers/build.sh    # where a registry exists
#
# Reruns are fast: the base image and the dependency wheels are kept (refreshed when
# pyproject.toml changes) and Docker caches the dependency layer.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
HERE="$ROOT/containers"
BASE=${BASE:-cosim/base:local}
IMAGE=${COSIM_IMAGE:-cosim:local}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
[[ -x "$PYTHON" ]] || PYTHON=python3
WHEELS="$HERE/.build/wheels"

if [[ "$BASE" == "cosim/base:local" ]]; then
  "$HERE/build-base.sh"
fi

# Optional dependency groups the adapters need (those pyproject.toml declares).
WANTED=${COSIM_EXTRAS:-genz,scalesim,astrasim}
EXTRAS=$("$PYTHON" - "$ROOT/pyproject.toml" "$WANTED" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    groups = tomllib.load(f)["project"].get("optional-dependencies", {})
print(",".join(g for g in sys.argv[2].split(",") if g in groups))
PY
)
STAMP="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)-$EXTRAS"
if [[ "$(cat "$WHEELS/deps/.stamp" 2>/dev/null)" != "$STAMP" ]]; then
  echo "building dependency wheels (extras: ${EXTRAS:-none})"
  rm -rf "$WHEELS/deps"
  "$PYTHON" -m pip wheel --quiet --wheel-dir "$WHEELS/deps" "$ROOT${EXTRAS:+[$EXTRAS]}"
  rm -f "$WHEELS"/deps/cosim-*.whl
  echo "$STAMP" > "$WHEELS/deps/.stamp"
fi
# cosim from a clean copy of the working tree (tracked and new files, nothing ignored),
# so stale build/ output never reaches the image.
SRC=$(mktemp -d /tmp/cosim-src.XXXXXX)
trap 'rm -rf "$SRC"' EXIT
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} sh -c '[ -e "{}" ] && echo "{}"' \
   | tar -c -T - -f -) | tar -x -C "$SRC"
rm -rf "$WHEELS/app"
"$PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$WHEELS/app" "$SRC" 2>"$SRC/wheel.log" \
  || { cat "$SRC/wheel.log" >&2; exit 1; }

OLD=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
docker build --build-arg BASE="$BASE" -t "$IMAGE" -f "$HERE/Dockerfile" "$HERE"
# Drop what the rebuild replaced: the previous image and stale dependency stages
# (the newest deps stage is the build cache; keep it).
NEW=$(docker image inspect -f '{{.Id}}' "$IMAGE")
if [[ -n "$OLD" && "$OLD" != "$NEW" ]]; then docker rmi "$OLD" >/dev/null 2>&1 || true; fi
docker images -q --filter label=cosim.stage=deps | tail -n +2 | xargs -r docker rmi >/dev/null 2>&1 || true
