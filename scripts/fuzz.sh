#!/usr/bin/env bash
# Builds the libFuzzer targets (cpp_runtime/fuzz, in the ASan + UBSan build) and runs
# each for SECONDS (default 60) from its seed corpus in tests/fuzz_corpus/<target>.
# New inputs go to a work corpus in the build folder (the committed seeds stay as
# they are); a crash, a sanitizer report, a leak, a timeout or an out-of-memory stops
# that target, saves the input under $SAN_BUILD_DIR/fuzz-artifacts/, and makes this
# script exit non-zero after the other targets ran. Prints each target's executions
# and executions per second.
#
#   ./scripts/fuzz.sh [SECONDS]         FUZZ_TARGETS="fuzz_spec fuzz_package" to pick
#
# FUZZ_RUNS=N runs each target for N executions instead of SECONDS (e.g.
# FUZZ_RUNS=2000000 for the 10-million-execution local run the docs report).
#
# FUZZ_SEED=N fixes libFuzzer's random seed (CI sets it, so a CI run's mutations are
# the same each time and a finding there reproduces); unset, each run explores anew.
#
# Replay one input: build-asan/fuzz_package path/to/input (after sourcing
# build-asan/sanitizer_env.sh, or with the ASAN_OPTIONS below).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_PER_TARGET="${1:-60}"
if [[ -n "${FUZZ_RUNS:-}" ]]; then BUDGET="$FUZZ_RUNS executions"; else BUDGET="${SECONDS_PER_TARGET}s"; fi
"$ROOT/scripts/sanitizer_build.sh"
abs_path() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
SAN_BUILD_DIR="$(abs_path "${SAN_BUILD_DIR:-$ROOT/build-asan}")"
# shellcheck source=/dev/null
source "$SAN_BUILD_DIR/sanitizer_env.sh"
# Leaks are checked here (an input that leaks is a finding): libtorch's registries
# stay reachable through its globals, so they are not reported.
export ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=0/detect_leaks=1}"
# One leak of libtorch's own, named and explained in the file.
export LSAN_OPTIONS="suppressions=$ROOT/cmake/lsan.supp:print_suppressions=0"

TARGETS="${FUZZ_TARGETS:-fuzz_spec fuzz_package fuzz_tensor_file fuzz_signature fuzz_triton_request}"
failed=()
summary=()
total=0
for target in $TARGETS; do
  seeds="$ROOT/tests/fuzz_corpus/${target#fuzz_}"
  work="$SAN_BUILD_DIR/fuzz-corpus/$target"
  artifacts="$SAN_BUILD_DIR/fuzz-artifacts"
  mkdir -p "$work" "$artifacts"
  log="$SAN_BUILD_DIR/fuzz-$target.log"
  printf '\n==> %s for %s (seeds %s, log %s)\n' "$target" "$BUDGET" "${seeds#"$ROOT"/}" "$log"
  status=0
  # One process, one thread: the machine's other core stays free; libtorch's intra-op
  # pool is not needed for inputs this small.
  seed_flag=()
  [[ -n "${FUZZ_SEED:-}" ]] && seed_flag=(-seed="$FUZZ_SEED")
  budget=(-max_total_time="$SECONDS_PER_TARGET")
  [[ -n "${FUZZ_RUNS:-}" ]] && budget=(-runs="$FUZZ_RUNS")
  OMP_NUM_THREADS=1 "$SAN_BUILD_DIR/$target" "$work" "$seeds" "${seed_flag[@]}" \
    "${budget[@]}" -timeout=20 -rss_limit_mb=3072 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$artifacts/$target-" > "$log" 2>&1 || status=$?
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  line="$(printf '%-22s %10s execs %8s/s' "$target" "${runs:-?}" "${rate:-?}")"
  if [[ $status -ne 0 ]]; then
    line+="  FAILED (exit $status)"
    failed+=("$target")
    grep -m1 -A30 -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|.*threw|.*deadly signal|.*out-of-memory)' "$log" || tail -30 "$log"
  fi
  summary+=("$line")
  total=$((total + ${runs:-0}))
done

printf '\n==> fuzzing summary (%s per target)\n' "$BUDGET"
printf '  %s\n' "${summary[@]}"
printf '  %-22s %10s execs\n' "total" "$total"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzzing found problems in: ${failed[*]} (inputs in $SAN_BUILD_DIR/fuzz-artifacts)" >&2
  exit 1
fi
