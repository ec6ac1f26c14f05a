"""Where a package is built before it passed its checks: a fresh temporary file
beside the output, renamed onto it only then, so a failed build never replaces (or
destroys) a good package."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def staging_path(output: Path, suffix: str = ".pt2") -> Path:
    """A fresh temporary path in ``output``'s folder (so the final rename is atomic)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=output.parent, prefix=f".{output.stem}.", suffix=suffix)
    os.close(handle)
    return Path(name)
