#!/usr/bin/env bash
# Runs the process tests of aoti_runner and a CI-sized subset of the Triton backend's
# tests on the sanitizer build (ASan + UBSan, scripts/sanitizer_build.sh), with zero
# reports allowed. Extra arguments go to pytest (e.g. -k, or other test files).
#
# How: the pytest process itself runs with the shared ASan runtime in LD_PRELOAD,
# because it loads the instrumented op library (torch.ops.load_library) to export the
# test packages. Every process it starts inherits LD_PRELOAD and the *SAN_OPTIONS:
# aoti_runner and contract_vectors (which link the same runtime anyway), and
# tritonserver, which so runs the instrumented libtriton_aoti.so under ASan. By hand:
#   source build-asan/sanitizer_env.sh
#   LD_PRELOAD=$AOTI_DEPLOY_ASAN_RUNTIME tritonserver --backend-directory build-asan/backends ...
# Every report, from any of these processes, is written to a file under
# $SAN_BUILD_DIR/sanitizer-reports/ (log_path): the run fails when one exists, even
# where a test expected the process to fail anyway.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
abs_path() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
VENV="$(abs_path "${VENV:-$ROOT/.venv}")"
SAN_BUILD_DIR="$(abs_path "${SAN_BUILD_DIR:-$ROOT/build-asan}")"
export SAN_BUILD_DIR
"$ROOT/scripts/sanitizer_build.sh"
# shellcheck source=/dev/null
source "$SAN_BUILD_DIR/sanitizer_env.sh"

reports="$SAN_BUILD_DIR/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS="$ASAN_OPTIONS:log_path=$reports/asan"
export UBSAN_OPTIONS="$UBSAN_OPTIONS:log_path=$reports/ubsan"
export AOTI_DEPLOY_BUILD_DIR="$SAN_BUILD_DIR"
export AOTI_DEPLOY_REQUIRE_TRITON="${AOTI_DEPLOY_REQUIRE_TRITON:-1}"

# The Triton subset: correct outputs over both protocols, refused loads, every kind of
# bad request, faults inside execute, crafted packages and an out-of-range index: each
# path of the backend that reads untrusted input or fails. Left out for time: the load
# and reload soak tests (100 reloads, many clients, eight models in parallel).
TRITON_SUBSET="outputs_have or cannot_run or bad_request or concurrent_bad or overflows or fault_in_execute \
or crafted_package or index_out_of_range or dynamic_batching"
cd "$ROOT"
status=0
if [[ $# -eq 0 ]]; then
  # Both at once, in two pytest workers, a test file to a worker: the Triton file's
  # worker compiles its packages while the other runs the process tests.
  printf '\n==> process tests and the Triton backend subset (a real tritonserver), on the sanitizer build\n'
  LD_PRELOAD="$AOTI_DEPLOY_ASAN_RUNTIME" "$VENV/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile \
    tests/test_cpp_runner.py tests/test_hostile_files.py tests/test_contract.py tests/test_triton.py \
    -k "not test_triton.py or $TRITON_SUBSET" || status=$?
else
  printf '\n==> on the sanitizer build: %s\n' "$*"
  LD_PRELOAD="$AOTI_DEPLOY_ASAN_RUNTIME" "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" || status=$?
fi

if compgen -G "$reports/*" > /dev/null; then
  echo "sanitizer reports (a finding each):" >&2
  for report in "$reports"/*; do
    printf '\n--- %s\n' "$report" >&2
    head -40 "$report" >&2
  done
  exit 1
fi
echo "no sanitizer report"
exit $status
