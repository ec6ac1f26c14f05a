"""The suite's preforked console scripts (tests/preforked.py) give what a fresh process
gives: exit code, stdout and stderr, from the command's own folder and environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from preforked import Preforked


def test_a_forked_command_is_a_fresh_process(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    server = Preforked(bin_dir)
    env = {**os.environ, "TMPDIR": str(tmp_path), "COLUMNS": "90"}
    try:
        for args in (["--help"], ["run", "absent.pt2"], ["no-such-command"]):
            forked = server.run("aoti-deploy", args, cwd=tmp_path, env=env, timeout=120)
            fresh = subprocess.run([bin_dir / "aoti-deploy", *args], capture_output=True, text=True, cwd=tmp_path,
                                   env=env, timeout=120)
            assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
        assert forked.returncode == 2 and "no-such-command" in forked.stderr
        assert server.forked == 3, "the commands ran as plain subprocesses"
        assert server._process is not None
        pid = server._process.pid
    finally:
        server.stop()
    assert not Path(f"/proc/{pid}").exists()
