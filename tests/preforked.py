"""The toolkit's console scripts as processes that start without paying for
``import torch`` (about 2.5 s of CPU each on a 2-core host, and the suite starts
hundreds): one server process per pytest worker imports torch, then forks a child
per command. The child is a real process of its own: it takes the command's working
folder, environment, argv and sys.path as a console script would, imports the
toolkit afresh, writes its stdout and stderr to files, and exits with the script's
code, which its own atexit handlers see. Only torch is imported before the fork
(nothing of the toolkit, which reads its environment at import), and it runs no op
there, so no thread pool is forked.

A command whose environment differs from the server's in anything that torch may
read at import, or that runs while the server is busy with another (a test's own
threads), runs as a plain subprocess instead: the result is the same, only slower.

This file is also the server's program: ``python -P preforked.py``."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# Variables a command may set or change that nothing reads at `import torch`
# (TMPDIR: Python's tempfile reads it at first use, which the child resets).
_FREE = ("AOTI_DEPLOY_", "MARKER_PATH", "COLUMNS", "PYTEST_CURRENT_TEST", "TMPDIR")


def _free(key: str) -> bool:
    return key.startswith(_FREE)


def _plain(command: list[str], cwd: Path | str | None, env: dict[str, str], timeout: float
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


class Preforked:
    """The server of one pytest worker; ``run`` is subprocess.run for a console script."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] = {}
        self._pending = b""  # what the server wrote past the last line read
        self.forked = 0  # commands run in a forked child

    def _server(self) -> subprocess.Popen[bytes] | None:
        if self._process is not None and self._process.poll() is None:
            return self._process
        # This worker's environment, not a command's: one that sets a variable of its
        # own then runs as a plain subprocess, and the next is forked again.
        self._env = {k: v for k, v in os.environ.items() if not _free(k)}
        self._pending = b""
        # A session of its own: stop() kills the server and any child it forked.
        self._process = subprocess.Popen(
            [sys.executable, "-P", __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
            env=self._env, cwd="/", start_new_session=True,
        )
        try:
            started = self._line(120) == "ready"
        except EOFError:
            started = False
        if not started:
            self.stop()
            return None
        return self._process

    def _line(self, timeout: float) -> str | None:
        """The server's next line, or None if none came within ``timeout`` seconds;
        EOFError if the server has ended."""
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise EOFError("the preforked server ended")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode().strip()

    def stop(self) -> None:
        """Stop the server and every child it forked (its process group) by PID, and reap it."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
        self._process = None

    def run(self, name: str, args: list[str], *, cwd: Path | str | None, env: dict[str, str],
            timeout: float) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin_dir / name), *args]
        if not self._lock.acquire(blocking=False):
            return _plain(command, cwd, env, timeout)
        try:
            server = self._server()
            same = server is not None and {k: v for k, v in env.items() if not _free(k)} == self._env
            if not same:
                return _plain(command, cwd, env, timeout)
            return self._forked(server, name, command, cwd, env, timeout)
        finally:
            self._lock.release()

    def _forked(self, server: subprocess.Popen[bytes], name: str, command: list[str], cwd: Path | str | None,
                env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
        assert server.stdin is not None and server.stdout is not None
        with tempfile.TemporaryDirectory(prefix="preforked_") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            request = {"script": name, "argv": command, "cwd": os.path.abspath(cwd or os.getcwd()), "env": env,
                       "stdout": str(out), "stderr": str(err), "bin": str(self.bin_dir)}
            try:
                server.stdin.write((json.dumps(request) + "\n").encode())
                pid = self._line(60)
            except (BrokenPipeError, EOFError):
                pid = None
            if pid is None:  # no child was started (or it is stopped with the server): a plain subprocess
                self.stop()
                return _plain(command, cwd, env, timeout)
            try:
                code = self._line(timeout)
            except EOFError:
                self.stop()
                raise RuntimeError(f"the preforked server ended while running {' '.join(command)}") from None
            except BaseException:  # interrupted: the child goes too, as subprocess.run's does
                self.stop()
                raise
            if code is None:
                self.stop()
                raise subprocess.TimeoutExpired(command, timeout, out.read_text(errors="replace"),
                                                err.read_text(errors="replace"))
            self.forked += 1
            return subprocess.CompletedProcess(command, int(code), out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))


def _child(request: dict) -> int:
    """In the forked child: become the console script and run it; its exit code."""
    from importlib.metadata import entry_points

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # chosen again from this command's TMPDIR
    # The interpreter's own streams (its buffering, encoding and error handlers, as a
    # fresh process has them), on new files: flushed first, then the descriptors swapped.
    sys.__stdout__.flush()
    sys.__stderr__.flush()
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT),
                            (2, request["stderr"], os.O_WRONLY | os.O_CREAT)):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = open(0, encoding=sys.__stdin__.encoding, errors=sys.__stdin__.errors, closefd=False)  # noqa: SIM115
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    sys.argv = request["argv"]
    sys.path.insert(0, request["bin"])  # a console script's folder is first on its path
    if "numpy.random" in sys.modules:  # torch imports it: each child draws its own seed, as a fresh one would
        sys.modules["numpy.random"].seed()
    (entry,) = entry_points(group="console_scripts", name=request["script"])
    try:
        result = entry.load()()
    except SystemExit as stop:
        result = stop.code
    if result is None:
        return 0
    if isinstance(result, int):
        return result
    print(result, file=sys.stderr)
    return 1


def _serve() -> int | None:
    """The server's loop: one request a line, a child per request. Returns in a child
    (its exit code); in the server, when its input ends."""
    import torch  # noqa: F401  (the point of this process)

    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return _child(request)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)
    return None


if __name__ == "__main__":
    sys.exit(_serve() or 0)  # in a child: the command's exit, with its atexit handlers and flushes
