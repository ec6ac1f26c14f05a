#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs the whole pytest suite. Extra arguments go
# to pytest. Exits non-zero on any failure, including "no tests collected".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# VENV and BUILD_DIR may be given relative to the current folder.
abs_path() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
VENV="$(abs_path "${VENV:-$ROOT/.venv}")"
export AOTI_DEPLOY_BUILD_DIR="$(abs_path "${BUILD_DIR:-$ROOT/build}")"
# The suite covers the ONNX target, signed bundles and the transformers models of
# examples/hf_models.py and the Kubernetes manifests too: install their extras, and
# make a missing ONNX extra fail the ONNX tests rather than skip them. The docs extra
# (mkdocs) is for CI's `mkdocs build --strict` after the suite.
export EXTRAS="${EXTRAS:-test,build,bench,sign,onnx,triton,hf,k8s,quant,docs}"
export AOTI_DEPLOY_REQUIRE_ONNX="${AOTI_DEPLOY_REQUIRE_ONNX:-1}"
# The same for the transformers models: a missing hf extra fails the zoo tests.
export AOTI_DEPLOY_REQUIRE_HF="${AOTI_DEPLOY_REQUIRE_HF:-1}"
# The same for the serving tests: a missing triton extra or backend fails them.
export AOTI_DEPLOY_REQUIRE_TRITON="${AOTI_DEPLOY_REQUIRE_TRITON:-1}"
# The same for the manifests' schema checks: a missing k8s extra fails them.
export AOTI_DEPLOY_REQUIRE_K8S="${AOTI_DEPLOY_REQUIRE_K8S:-1}"
# The same for the int8 deploys: a missing quant extra fails their tests.
export AOTI_DEPLOY_REQUIRE_QUANT="${AOTI_DEPLOY_REQUIRE_QUANT:-1}"
"$ROOT/scripts/setup.sh"
# The fleet tests (tests/test_fleet.py) put HAProxy in front of two tritonservers.
"$ROOT/scripts/install_haproxy.sh"

# Two pytest-xdist workers (TEST_WORKERS=0 runs the suite in this one process), a test
# file to a worker, the longest files first (tests/conftest.py: LONGEST_FIRST): the suite
# keeps both cores of a 2-core AVX2 host busy, and took 848-1105 s there from a fresh
# clone. A compile that tests in both workers need is made once (tests/conftest.py:
# once_per_run); the console scripts' processes fork from one that has imported torch
# (tests/preforked.py).
printf '\n==> running the test suite (%s pytest workers)\n' "${TEST_WORKERS:-2}"
cd "$ROOT"
"$VENV/bin/python" -m pytest -n "${TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
