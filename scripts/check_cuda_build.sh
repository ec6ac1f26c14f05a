#!/usr/bin/env bash
# Compiles the CUDA kernels with no GPU: sets up .venv-cuda (torch 2.14.1, a CUDA 13
# build), configures CMake with CUDA on and warnings as errors in this project's own
# sources, builds the op library (every .cu file) and the runner against the CUDA
# libtorch, then proves the result: each op has a CUDA kernel registered, and the
# runner starts. Exits non-zero on any compile, link, warning or check failure.
#
# Environment: VENV (.venv-cuda), BUILD_DIR (build-cuda), TORCH_SPEC (torch==2.14.1),
# TORCH_CUDA_ARCH_LIST (CMake's default: 7.5;8.0;9.0+PTX).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/cuda_env.sh"
export CMAKE_ARGS="-DAOTI_DEPLOY_CUDA=ON -DAOTI_DEPLOY_WERROR=ON ${CMAKE_ARGS:-}"

if ! command -v nvcc >/dev/null; then
  echo "check_cuda_build: nvcc is not on PATH; the CUDA toolkit is needed to compile the kernels" >&2
  exit 2
fi

"$ROOT/scripts/setup.sh"

printf '\n==> checking the CUDA kernels are registered\n'
"$VENV/bin/python" "$ROOT/scripts/check_cuda_dispatch.py" "$BUILD_DIR/libidentity_conv_ops.so"

printf '\n==> checking the CUDA-linked runner starts\n'
usage="$("$BUILD_DIR/aoti_runner" --help)"
if [[ "$usage" != "Usage: aoti_runner"* ]]; then
  echo "FAILED: $BUILD_DIR/aoti_runner --help did not print its usage" >&2
  exit 1
fi
echo "PASSED: $BUILD_DIR/aoti_runner --help prints its usage"
needed="$(readelf -d "$BUILD_DIR/aoti_runner" "$BUILD_DIR/libidentity_conv_ops.so")"
if [[ "$needed" != *libtorch_cuda.so* ]]; then
  echo "FAILED: the CUDA build does not link the CUDA libtorch" >&2
  exit 1
fi
echo "PASSED: the op library and runner link the CUDA libtorch"
