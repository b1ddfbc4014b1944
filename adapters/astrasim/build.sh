#!/usr/bin/env bash
# Builds ASTRA-sim 2.0's analytical binaries (congestion-unaware and congestion-aware) from a local
# checkout, downloading nothing:
#
#   adapters/astrasim/build.sh /path/to/astra-sim [OUT]     # OUT default: /path/to/astra-sim/build/astra_analytical/build
#   export COSIM_ASTRA_SIM=OUT/bin/AstraSim_Analytical_Congestion_Unaware
#
# The checkout needs its submodules (git clone --recursive, or git submodule update --init
# extern/graph_frontend/chakra extern/network_backend/analytical extern/remote_memory_backend/analytical
# extern/helper/fmt extern/helper/spdlog). ASTRA-sim's CMakeLists fetches yaml-cpp from GitHub at configure
# time; here it comes from Debian's libyaml-cpp-dev (find_package first, FetchContent disconnected), or from
# a local yaml-cpp source tree named by YAML_CPP_SRC. Build tools (Debian): g++ make cmake protobuf-compiler
# libprotobuf-dev libyaml-cpp-dev. JOBS (default 2) compile jobs, under nice.
set -euo pipefail

SRC=$(cd "${1:?usage: build.sh ASTRA_SIM_CHECKOUT [OUT]}" && pwd)
OUT=${2:-$SRC/build/astra_analytical/build}
JOBS=${JOBS:-2}

for dir in extern/graph_frontend/chakra/schema/protobuf extern/network_backend/analytical/congestion_aware \
           extern/remote_memory_backend/analytical extern/helper/fmt/include extern/helper/spdlog/include; do
  if [[ ! -d "$SRC/$dir" ]]; then
    echo "build.sh: $SRC/$dir is missing: check out ASTRA-sim with its submodules (git clone --recursive)" >&2
    exit 1
  fi
done
for tool in g++ cmake protoc; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (apt-get install g++ make cmake" \
    "protobuf-compiler libprotobuf-dev libyaml-cpp-dev)" >&2; exit 1; }
done

# Chakra's execution-trace schema, compiled as ASTRA-sim's own build script does (once, in the checkout).
PROTO="$SRC/extern/graph_frontend/chakra/schema/protobuf"
if [[ ! -f "$PROTO/et_def.pb.cc" || ! -f "$PROTO/et_def.pb.h" ]]; then
  protoc et_def.proto --proto_path="$PROTO" --cpp_out="$PROTO"
fi

YAML=(-DFETCHCONTENT_TRY_FIND_PACKAGE_MODE=ALWAYS)
if [[ -n "${YAML_CPP_SRC:-}" ]]; then
  YAML=(-DFETCHCONTENT_SOURCE_DIR_YAML-CPP="$(cd "$YAML_CPP_SRC" && pwd)" -DYAML_CPP_BUILD_TESTS=OFF)
fi
mkdir -p "$OUT"
cmake -S "$SRC/build/astra_analytical" -B "$OUT" -DCMAKE_BUILD_TYPE=Release -DBUILDTARGET=all \
  -DFETCHCONTENT_FULLY_DISCONNECTED=ON "${YAML[@]}"
nice cmake --build "$OUT" -j "$JOBS"
for name in AstraSim_Analytical_Congestion_Unaware AstraSim_Analytical_Congestion_Aware; do
  [[ -x "$OUT/bin/$name" ]] || { echo "build.sh: $OUT/bin/$name was not built" >&2; exit 1; }
  echo "$OUT/bin/$name"
done
