#!/usr/bin/env bash
# For a machine with an NVIDIA GPU: builds with the CUDA kernels (like
# check_cuda_build.sh) and runs every test marked `cuda`, which are skipped with
# "needs a CUDA device" elsewhere: the op and class on CUDA tensors in every dtype
# (non-contiguous too), opcheck on CUDA, export + AOTI compile for --device cuda,
# and both runners on the CUDA package, bit-exact. A missing GPU is an error here,
# never a pass by skipping. Extra arguments go to pytest, which runs from the
# repository root (paths in them are relative to it).
#
# Environment: as check_cuda_build.sh (VENV, BUILD_DIR, TORCH_SPEC, TORCH_CUDA_ARCH_LIST).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/cuda_env.sh"

"$ROOT/scripts/check_cuda_build.sh"

if ! "$VENV/bin/python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: torch.cuda.is_available() is false on this machine; run this where a GPU is visible" >&2
  exit 2
fi
"$VENV/bin/python" -c "import torch; print('GPU:', torch.cuda.get_device_name(0), '| torch', torch.__version__, '| CUDA', torch.version.cuda)"

printf '\n==> running the CUDA tests\n'
cd "$ROOT"
AOTI_DEPLOY_BUILD_DIR="$BUILD_DIR" AOTI_DEPLOY_REQUIRE_CUDA=1 "$VENV/bin/python" -m pytest -m cuda -rs "$@"
