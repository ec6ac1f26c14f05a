#!/usr/bin/env bash
# Rolling updates and a lost replica under load, on real servers: sets up
# (scripts/setup.sh), installs haproxy when missing (scripts/install_haproxy.sh), then
# runs `aoti-deploy fleet`: a new signed version published under load from 8 clients to
# one tritonserver, then two replicas behind HAProxy (one SIGKILLed and restarted, then
# the update rolled across both). Prints one row per scenario with its failed requests,
# switch/detect/return times and p99s. Extra arguments go to `aoti-deploy fleet`.
# Exits 0 only with no failed request and every answer one version's bits.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
abs_path() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
VENV="$(abs_path "${VENV:-$ROOT/.venv}")"
export AOTI_DEPLOY_BUILD_DIR="$(abs_path "${BUILD_DIR:-$ROOT/build}")"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/install_haproxy.sh"

cd "$ROOT"
printf '\n==> aoti-deploy fleet\n'
exec "$VENV/bin/aoti-deploy" fleet "$@"
