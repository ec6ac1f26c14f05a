#!/usr/bin/env bash
# Configures and builds the sanitizer build (ASan + UBSan, clang, with the libFuzzer
# targets) into SAN_BUILD_DIR (default build-asan), beside the regular build. Installs
# clang and its sanitizer runtimes from the Debian packages when they are missing.
# Sourced by scripts/sanitize.sh and scripts/fuzz.sh; needs scripts/setup.sh's venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
abs_path() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
VENV="$(abs_path "${VENV:-$ROOT/.venv}")"
SAN_BUILD_DIR="$(abs_path "${SAN_BUILD_DIR:-$ROOT/build-asan}")"
CLANGXX="${CLANGXX:-clang++}"

# clang 14 (Debian 12) builds against the torch wheels' headers and libstdc++ ABI;
# libclang-rt-14-dev holds the ASan/UBSan runtimes and libFuzzer.
if ! command -v "$CLANGXX" > /dev/null || [[ ! -e "$("$CLANGXX" -print-file-name=libclang_rt.asan-x86_64.so)" ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "clang and its sanitizer runtimes are missing: apt-get install clang libclang-rt-14-dev" >&2
    exit 2
  fi
  printf '\n==> installing clang and its sanitizer runtimes (Debian packages)\n'
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libclang-rt-14-dev > /dev/null
fi

export PATH="$VENV/bin:$PATH"
if [[ ! -f "$SAN_BUILD_DIR/build.ninja" ]]; then
  printf '\n==> configuring %s (clang, ASan + UBSan, fuzz targets)\n' "$SAN_BUILD_DIR"
  # -O1: the sanitizers' usual level; it also keeps this build's compile time down.
  # shellcheck source=scripts/compiler_cache.sh
  source "$ROOT/scripts/compiler_cache.sh"
  cmake -S "$ROOT" -B "$SAN_BUILD_DIR" -G Ninja \
    -DCMAKE_CXX_COMPILER="$CLANGXX" -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS=-O1 \
    -DPython3_EXECUTABLE="$VENV/bin/python" "${COMPILER_CACHE_ARGS[@]}" \
    -DAOTI_DEPLOY_SANITIZE=address,undefined -DAOTI_DEPLOY_FUZZ=ON > /dev/null
fi
printf '\n==> building %s\n' "$SAN_BUILD_DIR"
# Two jobs at most: a sanitized translation unit of torch headers takes about 1 GB.
cmake --build "$SAN_BUILD_DIR" -j "${JOBS:-2}"
