#!/usr/bin/env bash
# Builds cosim-astrasim:local (COSIM_ASTRASIM_IMAGE): the cosim image (COSIM_IMAGE, default cosim:local, from
# containers/build.sh) plus ASTRA-sim 2.0's analytical binaries compiled from a local checkout with its
# submodules; nothing is fetched from GitHub (Debian packages only, inside the build).
#
#   containers/build-astrasim.sh /path/to/astra-sim
#   docker run --rm cosim-astrasim:local serve astrasim --host 0.0.0.0 --port 50051
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "${1:?usage: build-astrasim.sh ASTRA_SIM_CHECKOUT}" && pwd)
IMAGE=${COSIM_ASTRASIM_IMAGE:-cosim-astrasim:local}
BASE=${COSIM_IMAGE:-cosim:local}
docker image inspect "$BASE" >/dev/null 2>&1 || { echo "build-astrasim.sh: $BASE is missing: run containers/build.sh" >&2; exit 1; }

# The build context: the checkout without git metadata or the simulators' other backends (ns-3, htsim).
CONTEXT=$(mktemp -d /tmp/cosim-astrasim-context.XXXXXX)
trap 'rm -rf "$CONTEXT"' EXIT
mkdir -p "$CONTEXT/astra-sim"
tar -C "$SRC" --exclude=.git --exclude=extern/network_backend/ns-3 --exclude=extern/network_backend/csg-htsim \
    --exclude=build/astra_analytical/build -cf - . | tar -C "$CONTEXT/astra-sim" -xf -
cp "$HERE/astrasim.Dockerfile" "$CONTEXT/Dockerfile"
cp "$HERE/../adapters/astrasim/build.sh" "$CONTEXT/build.sh"
docker build --build-arg COSIM_IMAGE="$BASE" -t "$IMAGE" "$CONTEXT"
# The binaries are there and find every library they link.
docker run --rm --entrypoint sh "$IMAGE" -c \
  'test -x "$COSIM_ASTRA_SIM" && ! ldd "$COSIM_ASTRA_SIM" /usr/local/bin/AstraSim_Analytical_Congestion_Aware | grep "not found"'
echo "$IMAGE: ASTRA-sim at \$COSIM_ASTRA_SIM; cosim serve astrasim uses it"
