"""The servers this package starts on 127.0.0.1 (tritonserver, haproxy): free loopback
ports, and the child process each runs as, in its own session with its output appended
to a log file, ending with its parent, stopped by its PID."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TypeVar

from ..errors import AotiDeployError

LOOPBACK = "127.0.0.1"


def free_ports(n: int) -> list[int]:
    """``n`` different free TCP ports on 127.0.0.1: each socket binds port 0 and stays
    open until all are picked. (tritonserver --http-port=0 works, but its log then
    says ":0", so a caller could not tell the port.)"""
    sockets = []
    try:
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((LOOPBACK, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


_Process = TypeVar("_Process", bound="LoopbackProcess")


class LoopbackProcess:
    """A server's process: launched by ``_launch``, stopped by its PID (SIGTERM, then
    SIGKILL) on ``stop`` or on leaving a ``with`` block. A subclass names the error it
    raises and what it is called in the message for a process never started."""

    error: type[AotiDeployError] = AotiDeployError
    not_started = "the process was not started"

    def __init__(self, binary: Path) -> None:
        self.binary = binary
        self.process: subprocess.Popen[bytes] | None = None
        self.log_file: Path | None = None
        self._log: IO[bytes] | None = None

    def _launch(self, command: Sequence[str], *, die_with_parent: bool, env: dict[str, str] | None = None) -> None:
        """Start ``command`` with stdin closed and stdout and stderr appended to
        ``self.log_file``, in its own session (a Ctrl-C in the terminal is this
        process's to handle). With ``die_with_parent`` the kernel sends it SIGTERM when
        this process ends, however it ends (PR_SET_PDEATHSIG, set by util-linux's
        setpriv before it execs). ``env`` adds to (or overrides) this process's
        environment.

        Raises:
            ``self.error`` (kind start): the process could not be launched.
        """
        assert self.log_file is not None
        try:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_file.open("ab")
            setpriv = shutil.which("setpriv")
            launch = [setpriv, "--pdeathsig", "TERM", "--"] if die_with_parent and setpriv else []
            self.process = subprocess.Popen(
                [*launch, *command], stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                start_new_session=True, env={**os.environ, **env} if env else None,
            )
        except OSError as error:
            self._close_log()
            raise self.error(f"could not start {self.binary}: {error.strerror or error}", kind="start") from error

    @property
    def pid(self) -> int:
        if self.process is None:
            raise self.error(self.not_started)
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM the PID, wait up to ``timeout`` seconds, then SIGKILL. Safe to call
        again.

        Returns:
            Its exit code (negative: the signal that ended it), or None if never started.
        """
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close_log()
        return self.process.returncode

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self: _Process) -> _Process:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
