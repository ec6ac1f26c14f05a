# The CUDA build's environment, sourced by check_cuda_build.sh and gpu_check.sh so both
# use the same one: VENV (.venv-cuda), BUILD_DIR (build-cuda) and TORCH_SPEC
# (torch==2.14.1), each taken from the environment when set there (VENV and BUILD_DIR
# may be relative to the current folder). Exported, since setup.sh reads them. Needs
# ROOT, the repository's root.
abs_path() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
export VENV="$(abs_path "${VENV:-$ROOT/.venv-cuda}")"
export BUILD_DIR="$(abs_path "${BUILD_DIR:-$ROOT/build-cuda}")"
export TORCH_SPEC="${TORCH_SPEC:-torch==2.14.1}"
