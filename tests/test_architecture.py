"""The package's layer contracts (pyproject.toml's [tool.importlinter]), checked by
import-linter on the real import graph: the layer order, the CLI reaching the compiler
only through the API, and no import cycle among any package's modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    assert lint_imports.is_file(), "import-linter is part of the test extra: pip install -e '.[test]'"
    result = subprocess.run([str(lint_imports), "--no-cache"], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 3 kept, 0 broken." in result.stdout, result.stdout
