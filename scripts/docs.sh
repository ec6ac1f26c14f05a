#!/usr/bin/env bash
# Builds the documentation site (mkdocs-material, mkdocs.yml at the root) and serves it
# at http://127.0.0.1:8000, rebuilding on every change. `./scripts/docs.sh build` only
# builds it into site/, with --strict, as CI does. Installs the docs extra into the venv
# first if it is missing (scripts/setup.sh, which also builds the op library).
#
# Environment: VENV (.venv), and whatever scripts/setup.sh takes.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
abs_path() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
VENV="$(abs_path "${VENV:-$ROOT/.venv}")"

# The API reference imports nothing, but mkdocstrings reads the package's sources, and
# the venv must have mkdocs: set it up with the docs extra when either is missing.
if [[ ! -x "$VENV/bin/mkdocs" ]]; then
  stamp="$VENV/.aoti_deploy_installed"
  have_extras="$(sed -n 2p "$stamp" 2>/dev/null || true)"
  EXTRAS="${have_extras:+$have_extras,}docs" VENV="$VENV" "$ROOT/scripts/setup.sh"
fi

cd "$ROOT"
# Material for MkDocs prints a banner about its successor on every build.
export NO_MKDOCS_2_WARNING=1
case "${1:-serve}" in
  build) exec "$VENV/bin/mkdocs" build --strict ;;
  serve) exec "$VENV/bin/mkdocs" serve --strict -a 127.0.0.1:8000 ;;
  *) echo "usage: $0 [serve|build]" >&2; exit 2 ;;
esac
