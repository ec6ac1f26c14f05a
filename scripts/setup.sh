#!/usr/bin/env bash
# Sets up everything the demo and the tests need, on a fresh clone or again:
# creates .venv, installs torch (TORCH_SPEC) and this package, then configures and
# builds the op library and the C++ runner with CMake + Ninja into build/.
# A second run reuses the venv and the build folder and only rebuilds what changed.
#
# Environment: TORCH_SPEC (default torch==2.13.0, a CPU build), VENV (.venv),
# BUILD_DIR (build), PYTHON (python3, used to create the venv), EXTRAS (the
# package's optional extras to install, default test,build,bench,sign,triton: sign is
# model-signing, for signed bundles; triton is pytriton's tritonserver and
# tritonclient, for serving; add onnx for the ONNX target, hf for transformers, k8s
# for Kubernetes manifests, docs for the docs site).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# VENV and BUILD_DIR may be given relative to the current folder.
abs_path() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
VENV="$(abs_path "${VENV:-$ROOT/.venv}")"
BUILD_DIR="$(abs_path "${BUILD_DIR:-$ROOT/build}")"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
PYTHON="${PYTHON:-python3}"
EXTRAS="${EXTRAS:-test,build,bench,sign,triton}"

step() { printf '\n==> %s\n' "$*"; }

if [[ ! -x "$VENV/bin/python" ]]; then
  step "creating $VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
PIP=("$VENV/bin/python" -m pip)

# The install stamp records what was installed (torch, pyproject.toml's hash, and
# the extras so far), so a second run skips pip when it would add nothing.
stamp="$VENV/.aoti_deploy_installed"
base="$TORCH_SPEC $(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
have_base="$(sed -n 1p "$stamp" 2>/dev/null || true)"
have_extras="$(sed -n 2p "$stamp" 2>/dev/null || true)"
needed=()
IFS=',' read -r -a wanted <<< "$EXTRAS"
for extra in "${wanted[@]}"; do
  [[ ",$have_extras," == *",$extra,"* ]] || needed+=("$extra")
done
if [[ "$have_base" != "$base" || ${#needed[@]} -gt 0 ]]; then
  step "installing $TORCH_SPEC"
  "${PIP[@]}" install --quiet "$TORCH_SPEC"
  step "installing the aoti-deploy package (editable) with extras $EXTRAS"
  # A venv made before the rename holds the old distribution, whose console scripts
  # (bundle, benchmark, ...) would outlive it. Remove it first: it owns export_compile
  # and run_inference too, so removing it later would take the new ones with it.
  "${PIP[@]}" uninstall --quiet --yes identity-conv 2>/dev/null || true
  # No build isolation is needed: the backend is setuptools, and torch is already in
  # the venv, so pip does not fetch a second torch for the build.
  "${PIP[@]}" install --quiet -e "$ROOT[$EXTRAS]"
  # pip keeps what earlier extras installed, so the stamp keeps them too.
  [[ "$have_base" == "$base" && -n "$have_extras" ]] && all="$have_extras,$EXTRAS" || all="$EXTRAS"
  all="$(tr ',' '\n' <<< "$all" | awk 'NF && !seen[$0]++' | paste -sd, -)"
  printf '%s\n%s\n' "$base" "$all" > "$stamp"
else
  step "reusing $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'), extras $have_extras)"
fi

# The checkout's Python is installed editable, so pip compiled none of it: compile its
# bytecode once here. Every process that imports the toolkit (each CLI run) then saves
# about 0.5 s, also where PYTHONDONTWRITEBYTECODE keeps Python from caching it itself.
"$VENV/bin/python" -m compileall -q "$ROOT/python" "$ROOT/examples" > /dev/null

# The venv's cmake (4.x) can set C++20 for nvcc; its ninja keeps the build reproducible.
export PATH="$VENV/bin:$PATH"
# Configure on the first run, and again whenever CMAKE_ARGS asks for options, so a
# reused build folder cannot silently keep older ones (e.g. -Werror off).
if [[ ! -f "$BUILD_DIR/build.ninja" || -n "${CMAKE_ARGS:-}" ]]; then
  step "configuring $BUILD_DIR (CMake + Ninja)"
  # shellcheck source=scripts/compiler_cache.sh
  source "$ROOT/scripts/compiler_cache.sh"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE="$VENV/bin/python" \
    "${COMPILER_CACHE_ARGS[@]}" \
    ${CMAKE_ARGS:-}
fi
step "building the op library and the C++ runner"
cmake --build "$BUILD_DIR"
echo "built $BUILD_DIR/libidentity_conv_ops.so and $BUILD_DIR/aoti_runner"
