#!/usr/bin/env bash
# The main job on the CPU default: set up .venv and build (scripts/setup.sh), export
# and compile the IdentityModel into artifacts/model.pt2, run it from Python and from
# C++ on the same input file, and verify both bit-for-bit. Then sign a deploy bundle
# with a throwaway key and run it verified in both runtimes. With the optional ONNX extra
# installed, also export artifacts/model.onnx and check it in onnxruntime against the
# Python runtime's output. Exits 0 only if every step that ran passed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# VENV and BUILD_DIR may be given relative to the current folder.
abs_path() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
"$ROOT/scripts/setup.sh" || exit $?
VENV="$(abs_path "${VENV:-$ROOT/.venv}")"
BUILD_DIR="$(abs_path "${BUILD_DIR:-$ROOT/build}")"
PY="$VENV/bin/python"
LIB="$BUILD_DIR/libidentity_conv_ops.so"
cd "$ROOT"

step() { printf '\n==> %s\n' "$*"; }

step "export + AOTI compile -> artifacts/model.pt2"
"$VENV/bin/export_compile" --output artifacts/model.pt2 --op-lib "$LIB" || exit $?

step "writing a seeded input file artifacts/demo_input.pt"
"$PY" - <<'PY' || exit $?
import torch
generator = torch.Generator().manual_seed(1234)
torch.save([torch.randn(1, 3, 224, 224, generator=generator)], "artifacts/demo_input.pt")
PY

step "Python runtime: run_inference"
"$VENV/bin/run_inference" artifacts/model.pt2 "$LIB" \
  --inputs artifacts/demo_input.pt --outputs artifacts/demo_output_python.pt
python_rc=$?

step "C++ runtime: aoti_runner (no Python in the process)"
"$BUILD_DIR/aoti_runner" artifacts/model.pt2 "$LIB" \
  --inputs artifacts/demo_input.pt --outputs artifacts/demo_output_cpp.pt
cpp_rc=$?

step "Python output vs C++ output"
cross_rc=1
if [[ $python_rc -eq 0 && $cpp_rc -eq 0 ]]; then
  "$VENV/bin/aoti-deploy" compare artifacts/demo_output_cpp.pt artifacts/demo_output_python.pt
  cross_rc=$?
else
  echo "skipped: a runtime failed"
fi

# A signed deploy bundle: a throwaway EC key made here, the bundle signed with it
# (OpenSSF Model Signing), then run in both runtimes with that key trusted, so each
# verifies every file before anything native loads.
step "signed bundle: throwaway key -> artifacts/bundle (model.pt2, op library, model.sig), verified in both runtimes"
signed_rc=1
if [[ $python_rc -eq 0 ]]; then
  KEYS=artifacts/keys
  mkdir -p "$KEYS" && chmod 700 "$KEYS"
  openssl ecparam -name prime256v1 -genkey -noout -out "$KEYS/demo_signing.pem" \
    && openssl ec -in "$KEYS/demo_signing.pem" -pubout -out "$KEYS/demo_signing.pub" 2>/dev/null \
    && "$VENV/bin/aoti-deploy" bundle artifacts/model.pt2 --output artifacts/bundle --op-lib "$LIB" \
         --sign-key "$KEYS/demo_signing.pem" \
    && "$VENV/bin/run_inference" artifacts/bundle --trusted-key "$KEYS/demo_signing.pub" \
         --inputs artifacts/demo_input.pt --expected artifacts/demo_output_python.pt \
    && "$BUILD_DIR/aoti_runner" artifacts/bundle --trusted-key "$KEYS/demo_signing.pub" \
         --inputs artifacts/demo_input.pt --expected artifacts/demo_output_python.pt
  signed_rc=$?
else
  echo "skipped: the Python runtime failed"
fi

# The ONNX target is an optional extra: run it when the extra is installed.
onnx_rc=0
onnx_result="skipped (the ONNX extra is not installed: $VENV/bin/pip install -e '.[onnx]')"
if [[ $python_rc -ne 0 ]]; then
  onnx_result="skipped: the Python runtime failed, so there is no reference output"
elif "$PY" -c "from aoti_deploy.compiler.onnx_export import missing_onnx_packages as m; raise SystemExit(bool(m()))"; then
  step "ONNX: export_compile onnx -> artifacts/model.onnx, then run_inference in onnxruntime"
  "$VENV/bin/export_compile" onnx --output artifacts/model.onnx --op-lib "$LIB" --no-show-graph \
    && "$VENV/bin/run_inference" artifacts/model.onnx --inputs artifacts/demo_input.pt \
      --expected artifacts/demo_output_python.pt
  onnx_rc=$?
  onnx_result=""
fi

verdict() { [[ $1 -eq 0 ]] && echo PASSED || echo "FAILED (exit $1)"; }
step "summary"
printf '  %-34s %s\n' "Python runtime (run_inference)" "$(verdict $python_rc)"
printf '  %-34s %s\n' "C++ runtime (aoti_runner)" "$(verdict $cpp_rc)"
printf '  %-34s %s\n' "Python vs C++ outputs (bitwise)" "$(verdict $cross_rc)"
printf '  %-34s %s\n' "Signed bundle, verified, both" "$(verdict $signed_rc)"
printf '  %-34s %s\n' "ONNX in onnxruntime vs Python" "${onnx_result:-$(verdict $onnx_rc)}"
[[ $python_rc -eq 0 && $cpp_rc -eq 0 && $cross_rc -eq 0 && $signed_rc -eq 0 && $onnx_rc -eq 0 ]]
