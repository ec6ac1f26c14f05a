"""Typed errors raised by the stage functions. The CLIs turn them into messages and
exit codes; stage functions never print or exit."""

from __future__ import annotations

EXIT_PASS = 0
EXIT_MISMATCH = 1
EXIT_USAGE = 2


class AotiDeployError(Exception):
    """Base of every error the toolkit raises on purpose. Carries the exit code, and
    a ``kind`` where the C++ runner must reach the same verdict (the shared contract
    vectors in tests/contract compare kinds, not wording)."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str = "", *, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


class OpLibraryError(AotiDeployError):
    """The op library could not be found or loaded."""


class ModelError(AotiDeployError):
    """A user's model factory could not be imported or called, or returned something
    that is not a module (with optional example inputs)."""


class ExportError(AotiDeployError):
    """torch.export failed, or the exported graph is not what the package needs."""


class CompileError(AotiDeployError):
    """AOTInductor failed to compile or package the exported program."""


class PackageError(AotiDeployError):
    """A package is missing, damaged, lacks metadata or cannot run in this process."""


class InputError(AotiDeployError):
    """An input or tensor file does not match what the package was compiled for."""


class VerificationError(AotiDeployError):
    """Bits differ where they must not."""

    exit_code = EXIT_MISMATCH
