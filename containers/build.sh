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

# The dependencies of cosim plus the optional groups the adapters need (those declared).
WANTED=${COSIM_EXTRAS:-genz,scalesim,astrasim}
REQUIREMENTS=$("$PYTHON" - "$ROOT/pyproject.toml" "$WANTED" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
groups = project.get("optional-dependencies", {})
wanted = [g for g in sys.argv[2].split(",") if g in groups]
print("\n".join(project["dependencies"] + [r for g in wanted for r in groups[g]]))
PY
)
# Wheels already built are reused (same bytes, so Docker's dependency layer stays cached);
# the image installs exactly requirements.txt from them.
mkdir -p "$WHEELS/deps"
if [[ "$(cat "$WHEELS/deps/requirements.txt" 2>/dev/null)" != "$REQUIREMENTS" ]]; then
  echo "building dependency wheels"
  echo "$REQUIREMENTS" > "$WHEELS/requirements.new"
  "$PYTHON" -m pip wheel --quiet --find-links "$WHEELS/deps" --wheel-dir "$WHEELS/deps" \
    -r "$WHEELS/requirements.new" 2>"$WHEELS/pip.log" || { cat "$WHEELS/pip.log" >&2; exit 1; }
  mv "$WHEELS/requirements.new" "$WHEELS/deps/requirements.txt"
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
