"""aoti_runner, the C++ runner, as a process with no Python in it: its command line is
built here and nowhere else, for a run that writes outputs and for --bench. Importing
this module does not import torch (the cold-start helper builds commands with it)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AotiDeployError, PackageError
from ..locate import runner_path

if TYPE_CHECKING:
    import torch

# Exit codes of aoti_runner that still write --outputs: 0 ok, 1 a check failed
# (identity, --expected or --eager-reference).
WROTE_OUTPUTS = (0, 1)


@dataclass(frozen=True)
class CppRunner:
    """aoti_runner on one package (or bundle), with the op libraries and trust options
    to pass (a bundle carries its own libraries: give none)."""

    package: Path
    op_libraries: Sequence[str | os.PathLike[str]] = ()
    trusted_key: str | os.PathLike[str] | None = None
    require_signature: bool = False
    executable: str | os.PathLike[str] | None = None  # default: aoti_runner in the build folder

    def command(self, *options: str) -> list[str]:
        """The full command line, ``options`` last."""
        command = [str(runner_path(self.executable)), str(self.package), *(str(p) for p in self.op_libraries)]
        if self.trusted_key is not None:
            command += ["--trusted-key", str(self.trusted_key)]
        if self.require_signature:
            command.append("--require-signature")
        return command + list(options)

    def outputs(self, tensors: Sequence[torch.Tensor], *, accept: Sequence[int] = (0,),
                timeout: float = 600) -> list[torch.Tensor]:
        """The runner's flat outputs for ``tensors`` (the package's inputs in order).

        Args:
            accept: exit codes after which the outputs are read (``WROTE_OUTPUTS``
                also takes a failed check's, for the caller to compare).

        Raises:
            PackageError: another exit code, or no outputs written; with the
                runner's message.
        """
        from .tensor_files import read_tensors, save_tensors

        with tempfile.TemporaryDirectory(prefix="aoti_deploy_cpp_") as folder:
            inputs, outputs = Path(folder) / "inputs.pt", Path(folder) / "outputs.pt"
            save_tensors(inputs, [x.cpu() for x in tensors])
            result = subprocess.run(self.command("--inputs", str(inputs), "--outputs", str(outputs)),
                                    capture_output=True, text=True, timeout=timeout)
            if result.returncode not in accept or not outputs.exists():
                raise PackageError(f"aoti_runner failed (exit {result.returncode}): "
                                   f"{(result.stderr or result.stdout).strip()}")
            # A list, or a dict by output name in the package's order (--outputs).
            return read_tensors(outputs)[1]

    def bench(self, tensors: Sequence[torch.Tensor] | Path, iterations: int, warmup: int, *options: str,
              timeout: float | None = None) -> dict[str, Any]:
        """``aoti_runner --bench`` on ``tensors`` (or a tensor file of them; timing
        inside its process), with more of its options (``--threads``,
        ``--intra-op-threads``, ``--malloc``, ``--pin-threads``); its JSON result
        (p50_us, p99_us, mean_us, ...).

        Raises:
            AotiDeployError: the runner failed, with its message and how long it ran.
        """
        from .tensor_files import save_tensors

        with tempfile.TemporaryDirectory(prefix="aoti_deploy_bench_") as folder:
            out = Path(folder) / "bench.json"
            inputs = tensors if isinstance(tensors, Path) else save_tensors(Path(folder) / "inputs.pt",
                                                                             [x.cpu() for x in tensors])
            started = time.perf_counter()
            result = subprocess.run(
                self.command("--inputs", str(inputs), "--bench", str(iterations), "--warmup", str(warmup),
                             "--bench-json", str(out), *options),
                capture_output=True, text=True, timeout=timeout or max(600, 10 * iterations),
            )
            if result.returncode != 0:
                raise AotiDeployError(f"aoti_runner --bench failed (exit {result.returncode}, "
                                      f"{time.perf_counter() - started:.0f} s): "
                                      f"{(result.stderr or result.stdout).strip()}")
            return json.loads(out.read_text())
