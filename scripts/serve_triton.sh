#!/usr/bin/env bash
# Serve the demo package from Triton Inference Server through this project's aoti
# backend, and check it: set up .venv and build (scripts/setup.sh, which installs the
# triton extra and builds build/backends/aoti/libtriton_aoti.so), export and compile
# artifacts/model.pt2 as scripts/demo.sh does, write it into the model repository
# artifacts/triton_repository as the model identity_conv, then start tritonserver on free
# loopback ports and check its outputs bit for bit over HTTP and gRPC (aoti-deploy serve).
# Usage: scripts/serve_triton.sh [--keep]   (--keep leaves the server running and prints
# how to stop it). Exits with aoti-deploy serve's code: 0 passed, 1 bits differ, 2 error.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# VENV and BUILD_DIR may be given relative to the current folder.
abs_path() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
KEEP=()
for arg in "$@"; do
  case "$arg" in
    --keep) KEEP=(--keep) ;;
    *) echo "usage: $0 [--keep]" >&2; exit 2 ;;
  esac
done
"$ROOT/scripts/setup.sh" || exit $?
VENV="$(abs_path "${VENV:-$ROOT/.venv}")"
BUILD_DIR="$(abs_path "${BUILD_DIR:-$ROOT/build}")"
LIB="$BUILD_DIR/libidentity_conv_ops.so"
# The CLIs find the op library and the backend in this build.
export AOTI_DEPLOY_BUILD_DIR="$BUILD_DIR"
cd "$ROOT"

step() { printf '\n==> %s\n' "$*"; }

# Always run, as demo.sh does: the compile cache makes it quick when the package at
# --output was built from the same sources, and rebuilds one an older toolkit wrote.
step "export + AOTI compile -> artifacts/model.pt2"
"$VENV/bin/export_compile" --output artifacts/model.pt2 --op-lib "$LIB" || exit $?

step "model repository: artifacts/triton_repository/identity_conv (config.pbtxt, version 1 bundle)"
"$VENV/bin/aoti-deploy" triton-repository artifacts/model.pt2 --repository artifacts/triton_repository \
  --name identity_conv --version 1 --op-lib "$LIB" || exit $?

step "tritonserver with the aoti backend: requests over HTTP and gRPC, outputs checked bit for bit"
"$VENV/bin/aoti-deploy" serve --repository artifacts/triton_repository --model identity_conv "${KEEP[@]}"
