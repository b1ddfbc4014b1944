#!/usr/bin/env bash
# Builds the cosim image (default cosim:local) with no container registry:
#   1. the base image (containers/build-base.sh, unless BASE names another image),
#   2. wheels of cosim, its compiled core (maturin, with the host's cargo) and its dependencies,
#      built on this host with pip,
#   3. `docker build` from those wheels alone.
#
#   containers/build.sh                          # local base image
#   BASE=python:3.11-slim containers/build.sh    # where a registry exists
#   ASTRA_SIM_SRC=/path/to/astra-sim containers/build.sh   # also cosim-astrasim:local (ASTRA-sim from that checkout)
#
# Reruns are fast: the base image and the dependency wheels are kept (refreshed when
# pyproject.toml changes) and Docker caches the dependency layer.
#
# Any venv's Python will do (PYTHON, default .venv/bin/python, as `make quickstart` leaves it):
# cosim's wheel is built in an isolated environment from the [build-system] requirements,
# themselves kept as wheels, not with whatever setuptools that venv has.
#
# Images this build replaces are removed: the previous $COSIM_IMAGE and stale dependency stages,
# but only those labelled with this build's id (COSIM_BUILD_ID, default a hash of this checkout's
# path and the image name); other projects' images and other checkouts' are left alone.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
HERE="$ROOT/containers"
BASE=${BASE:-cosim/base:local}
IMAGE=${COSIM_IMAGE:-cosim:local}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
[[ -x "$PYTHON" ]] || PYTHON=python3
WHEELS="$HERE/.build/wheels"
BUILD_ID=${COSIM_BUILD_ID:-$(printf '%s\n%s' "$ROOT" "$IMAGE" | sha256sum | cut -c1-16)}

if [[ "$BASE" == "cosim/base:local" ]]; then
  "$HERE/build-base.sh"
fi

# The dependencies of cosim plus the optional groups the adapters need (those declared).
WANTED=${COSIM_EXTRAS:-genz,scalesim,aiconfigurator,astrasim}
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
# cosim's build requirements ([build-system] requires) as wheels, refreshed when they change; the
# wheel below is built in an isolated environment installed from them alone.
# cosim's and its compiled core's (core/pyproject.toml: maturin).
BUILD_REQUIRES=$("$PYTHON" - "$ROOT/pyproject.toml" "$ROOT/core/pyproject.toml" <<'PY'
import sys, tomllib
requires = []
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        requires += tomllib.load(f)["build-system"]["requires"]
print("\n".join(requires))
PY
)
mkdir -p "$WHEELS/build"
if [[ "$(cat "$WHEELS/build/requirements.txt" 2>/dev/null)" != "$BUILD_REQUIRES" ]]; then
  echo "$BUILD_REQUIRES" > "$WHEELS/build/requirements.new"
  "$PYTHON" -m pip wheel --quiet --wheel-dir "$WHEELS/build" -r "$WHEELS/build/requirements.new" \
    2>"$WHEELS/pip.log" || { cat "$WHEELS/pip.log" >&2; exit 1; }
  mv "$WHEELS/build/requirements.new" "$WHEELS/build/requirements.txt"
fi
rm -rf "$WHEELS/app"
"$PYTHON" -m pip wheel --quiet --no-deps --no-index --find-links "$WHEELS/build" --wheel-dir "$WHEELS/app" \
  "$SRC" 2>"$SRC/wheel.log" || { cat "$SRC/wheel.log" >&2; exit 1; }
# The compiled core (core/, Rust), a wheel of its own that maturin builds with this host's cargo: a
# linux wheel for the image's Debian, the host's (build-base.sh) or python:3.11-slim's alike.
command -v cargo >/dev/null 2>&1 || { echo "cosim's core is Rust: install a Rust toolchain (cargo) to build the image" >&2; exit 1; }
"$PYTHON" -m pip wheel --quiet --no-deps --no-index --find-links "$WHEELS/build" --wheel-dir "$WHEELS/app" \
  "$SRC/core" 2>"$SRC/wheel.log" || { cat "$SRC/wheel.log" >&2; exit 1; }

OLD=$(docker image inspect -f '{{.Id}} {{index .Config.Labels "cosim.build"}}' "$IMAGE" 2>/dev/null || true)
docker build --build-arg BASE="$BASE" --build-arg COSIM_BUILD="$BUILD_ID" -t "$IMAGE" -f "$HERE/Dockerfile" "$HERE"
# Drop what the rebuild replaced, of what builds with this id made: the previous image, and the
# dependency stages but the newest (the one just used: the build cache).
NEW=$(docker image inspect -f '{{.Id}}' "$IMAGE")
if [[ "$OLD" == *" $BUILD_ID" && "${OLD%% *}" != "$NEW" ]]; then docker rmi "${OLD%% *}" >/dev/null 2>&1 || true; fi
docker images -q --filter label=cosim.stage=deps --filter "label=cosim.build=$BUILD_ID" | tail -n +2 \
  | xargs -r docker rmi >/dev/null 2>&1 || true

# Optional: ASTRA_SIM_SRC=/path/to/astra-sim (a checkout with its submodules) also builds cosim-astrasim:local,
# the cosim image with ASTRA-sim's analytical binaries (containers/build-astrasim.sh, docs/astrasim.md).
if [[ -n "${ASTRA_SIM_SRC:-}" ]]; then
  COSIM_IMAGE="$IMAGE" "$HERE/build-astrasim.sh" "$ASTRA_SIM_SRC"
fi
