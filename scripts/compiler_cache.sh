# Sourced by scripts/setup.sh and scripts/sanitizer_build.sh (needs ROOT and VENV): sets
# COMPILER_CACHE_ARGS, the CMake arguments that put ccache (from the build extra) in front
# of the C++ compiler, so a clean checkout rebuilds only what changed since the last build
# on this machine (the cache is ~/.cache/ccache, shared by every build folder and clone).
# CCACHE_BASEDIR makes paths under the checkout relative, so two clones share entries.
# AOTI_DEPLOY_CCACHE=0 builds without it.
COMPILER_CACHE_ARGS=()
if [[ "${AOTI_DEPLOY_CCACHE:-1}" != 0 && -x "$VENV/bin/ccache" ]]; then
  launcher="$(command -v env);CCACHE_BASEDIR=$ROOT;CCACHE_NOHASHDIR=true;$VENV/bin/ccache"
  # C++ only: nvcc behind ccache is not tried here, so the CUDA kernels compile as before.
  COMPILER_CACHE_ARGS=("-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher")
fi
