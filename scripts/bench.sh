#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs the benchmark suite: every runtime of the
# IdentityModel at three sizes against the 4-copy memory floor, the op kernel's
# bandwidth, and C++ serving from 1 and 2 threads. Extra arguments go to `aoti-deploy
# bench` (e.g. --iterations 0.1 for a quicker run). Writes artifacts/bench/bench.{json,md,png}.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
abs_path() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
VENV="$(abs_path "${VENV:-$ROOT/.venv}")"
BUILD_DIR="$(abs_path "${BUILD_DIR:-$ROOT/build}")"
"$ROOT/scripts/setup.sh"

printf '\n==> benchmark\n'
cd "$ROOT"
"$VENV/bin/aoti-deploy" bench --runner "$BUILD_DIR/aoti_runner" --op-lib "$BUILD_DIR/libidentity_conv_ops.so" "$@"
