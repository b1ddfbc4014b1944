#!/usr/bin/env bash
# Regenerates stubs/ from proto/ (Python, .pyi, gRPC). Usage: scripts/gen_stubs.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-stubs}"
python="${PYTHON:-python}"
rm -rf "$out/cosim"
mkdir -p "$out"
"$python" -m grpc_tools.protoc -Iproto \
  --python_out="$out" --mypy_out="$out" \
  --grpc_python_out="$out" --mypy_grpc_out="$out" \
  proto/cosim/v1/*.proto
touch "$out/cosim/v1/__init__.py"
