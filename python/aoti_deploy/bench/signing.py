"""The signed-bundle section of the benchmark: what verifying a bundle costs, for the
demo bundle and a large one (a 64 MB weight), in both runtimes, and what it adds to
the C++ runner's cold start (process start to first output), against the time one
SHA-256 of the bundle's bytes takes on this host, all measured in one run.
Stage functions only: ``aoti-deploy bench`` prints."""

from __future__ import annotations

import hashlib
import os
import re
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..errors import AotiDeployError
from ..package.bundle_writer import write_bundle
from ..runtime.trust import TrustPolicy, open_model
from ..runtime.cpp_runner import CppRunner

# Whole-process runs per runner and bundle; the median is reported.
COLD_START_RUNS = 7
_VERIFIED = re.compile(r"signature: verified \d+ files \(.*\) with .* in ([0-9.]+) ms")


def large_weights_model() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """A 4096x4096 float32 linear layer: a 64 MB weight, so a 68 MB package."""
    torch.manual_seed(0)
    return nn.Linear(4096, 4096).eval(), (torch.randn(1, 4096),)


@dataclass
class SigningResult:
    """One bundle: its size, the verification time in each runtime, and the C++
    runner's cold start from the bare package and from the verified bundle."""

    name: str
    megabytes: float
    files: int
    cpp_verify_ms: float  # as the runner reports it: key, private copy, hashes, signature
    python_verify_ms: float  # open_model with the model-signing library, in this process
    cold_start_plain_ms: float  # aoti_runner PACKAGE LIB, whole process, median
    cold_start_signed_ms: float  # aoti_runner BUNDLE --trusted-key PUB, whole process, median
    sha256_ms: float  # one SHA-256 over every file the runner hashes, median (see sha256_once_ms)
    sealed_copy_ms: float  # read, hash and copy into a memfd, as the Triton backend does (see sealed_copy_ms)

    @property
    def cold_start_ratio(self) -> float:
        return self.cold_start_signed_ms / self.cold_start_plain_ms

    @property
    def verification_cost_ms(self) -> float:
        """What verifying adds to the cold start: verified minus bare."""
        return self.cold_start_signed_ms - self.cold_start_plain_ms

    @property
    def cost_in_hashes(self) -> float:
        """That cost in units of one SHA-256 of the bundle's bytes (the target: <= 1.2)."""
        return self.verification_cost_ms / self.sha256_ms

    @property
    def floor_in_hashes(self) -> float:
        """The sealed copy's own floor (read, hash, copy into a memfd) in units of one
        SHA-256: what any verified load that seals its bytes costs at least here."""
        return self.sealed_copy_ms / self.sha256_ms


def make_key_pair(folder: Path) -> tuple[Path, Path]:
    """A throwaway EC P-256 key pair (PEM), made with the cryptography library."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / "bench_signing.pem", folder / "bench_signing.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    private.chmod(0o600)
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def sha256_once_ms(files: list[Path], runs: int = 7) -> float:
    """The time (ms, median of ``runs``) to SHA-256 the bytes of ``files`` once, each
    file hashed whole with hashlib (OpenSSL's SHA-256, the implementation the C++ runner
    links) from bytes already in memory: the cost of the hash alone, no disk read."""
    contents = [path.read_bytes() for path in files]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for data in contents:
            hashlib.sha256(data).digest()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def sealed_copy_ms(files: list[Path], runs: int = 7, chunk: int = 1 << 20) -> float:
    """The time (ms, median of ``runs``) to do what the Triton backend's verified load
    does with every byte and nothing else: read each file (from the page cache) in 1 MiB
    blocks, SHA-256 each block and write it into a new memfd, then seal it. This is the
    floor of a load that hashes its bytes into sealed memory, measured with the same
    OpenSSL and kernel: beyond the hash, it pays for the copy into fresh shared memory.
    aoti_runner's load skips it: it unpacks the package as it hashes it."""
    import fcntl

    seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
    buffer = bytearray(chunk)
    view = memoryview(buffer)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        descriptors = []
        try:
            for path in files:
                sealed = os.memfd_create(path.name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
                descriptors.append(sealed)
                hasher = hashlib.sha256()
                with open(path, "rb", buffering=0) as source:
                    while got := source.readinto(buffer):
                        hasher.update(view[:got])
                        os.write(sealed, view[:got])
                fcntl.fcntl(sealed, fcntl.F_ADD_SEALS, seals)
                hasher.digest()
            times.append((time.perf_counter() - start) * 1e3)
        finally:
            for sealed in descriptors:
                os.close(sealed)
    return statistics.median(times)


def _run(args: list[str]) -> tuple[float, str]:
    """Wall time (ms) of one whole process, and its stdout; raises on failure."""
    start = time.perf_counter()
    result = subprocess.run(args, capture_output=True, text=True, timeout=600)
    elapsed = (time.perf_counter() - start) * 1e3
    if result.returncode != 0:
        raise AotiDeployError(f"{' '.join(args)} failed with exit {result.returncode}: "
                                f"{(result.stderr or result.stdout).strip()}")
    return elapsed, result.stdout


def measure_bundle(name: str, package: Path, op_libraries: list[Path], runner: Path, work_dir: Path,
                   private_key: Path, public_key: Path, runs: int = COLD_START_RUNS) -> SigningResult:
    """Sign ``package`` into a bundle under ``work_dir`` and time its verification
    and the cold starts, alternating bare and signed runs so both see the same machine."""
    bundle = write_bundle(package, op_libraries, work_dir / f"bundle_{name}", sign_key=private_key)
    files = sorted(p for p in bundle.iterdir() if p.name != "model.sig")
    megabytes = sum(p.stat().st_size for p in files) / 1e6
    plain_args = CppRunner(package, op_libraries, executable=runner).command()
    signed_args = CppRunner(bundle, trusted_key=public_key, executable=runner).command()
    plain, signed, verify = [], [], []
    _run(plain_args)  # page cache and dynamic loader warm for both
    for _ in range(runs):
        plain.append(_run(plain_args)[0])
        elapsed, stdout = _run(signed_args)
        signed.append(elapsed)
        match = _VERIFIED.search(stdout)
        if match is None:
            raise AotiDeployError(f"aoti_runner did not report a verified bundle for {bundle}:\n{stdout}")
        verify.append(float(match.group(1)))
    python = []
    for _ in range(3):
        with open_model(bundle, TrustPolicy(public_key, "--trusted-key")) as opened:
            python.append(opened.verify_seconds * 1e3)
    # The bytes the runner hashes: every file of the bundle, its signature too.
    hashed = sha256_once_ms(sorted(bundle.iterdir()))
    floor = sealed_copy_ms(sorted(bundle.iterdir()))
    return SigningResult(name, megabytes, len(files), statistics.median(verify), statistics.median(python),
                         statistics.median(plain), statistics.median(signed), hashed, floor)
