"""Signed deploy bundles, through both runtimes' CLIs: a bundle signed with the
model-signing library (or its own CLI) verifies in C++ and in Python, runs with the
same bits as the bare package, and every tampered bundle is refused before any native
code from it runs (a shared object whose constructor writes a marker file proves it)."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from conftest import Build, CompiledPackage, run_cli, run_cmd
from aoti_deploy.package.private_folder import remove_orphaned_folders
from aoti_deploy.runtime.tensor_files import load_tensors
from aoti_deploy.verify.bits import bit_view

TRUSTED_KEY_ENV = "AOTI_DEPLOY_TRUSTED_KEY"

# A valid shared object whose constructor writes the file $MARKER_PATH: if it is ever
# dlopen'ed, the marker appears.
MARKER_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void write_marker(void) {
  const char* path = getenv("MARKER_PATH");
  if (path) { FILE* f = fopen(path, "w"); if (f) { fputs("native code ran\n", f); fclose(f); } }
}
int marker_library_symbol(void) { return 42; }
"""


@dataclass(frozen=True)
class Keys:
    dir: Path

    def private(self, name: str) -> Path:
        return self.dir / f"{name}.pem"

    def public(self, name: str) -> Path:
        return self.dir / f"{name}.pub"


@dataclass(frozen=True)
class Signed:
    bundle: Path  # signed with keys "signing" (P-256) through the bundle CLI
    reference: list[torch.Tensor]  # the bare package's outputs (aoti_runner) for the input file
    input_file: Path
    marker_library: Path


def openssl(*args: object) -> None:
    result = run_cmd("openssl", *args)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    """EC key pairs made with the openssl commands the README shows, and an Ed25519 one."""
    folder = tmp_path_factory.mktemp("keys")
    for name, curve in [("signing", "prime256v1"), ("other", "prime256v1"), ("p384", "secp384r1")]:
        openssl("ecparam", "-name", curve, "-genkey", "-noout", "-out", folder / f"{name}.pem")
        openssl("ec", "-in", folder / f"{name}.pem", "-pubout", "-out", folder / f"{name}.pub")
    openssl("genpkey", "-algorithm", "ed25519", "-out", folder / "ed25519.pem")
    openssl("pkey", "-in", folder / "ed25519.pem", "-pubout", "-out", folder / "ed25519.pub")
    return Keys(folder)


@pytest.fixture(scope="session")
def signed(tmp_path_factory: pytest.TempPathFactory, build: Build, compiled_package: CompiledPackage,
           keys: Keys) -> Signed:
    folder = tmp_path_factory.mktemp("signed")
    bundle = folder / "bundle"
    result = run_cli("aoti-deploy", "bundle", compiled_package.path, "--output", bundle, "--sign-key",
                     keys.private("signing"), cwd=folder, build=build)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in bundle.iterdir()) == ["libidentity_conv_ops.so", "model.pt2", "model.sig"]
    reference = folder / "reference.pt"
    result = run_cmd(build.runner, compiled_package.path, build.op_library, "--inputs", compiled_package.input_file,
                     "--outputs", reference)
    assert result.returncode == 0, result.stdout + result.stderr
    source = folder / "marker.c"
    source.write_text(MARKER_SOURCE)
    marker_library = folder / "libmarker.so"
    result = run_cmd("cc", "-shared", "-fPIC", "-o", marker_library, source)
    assert result.returncode == 0, result.stderr
    return Signed(bundle, load_tensors(reference), compiled_package.input_file, marker_library)


def same_bits(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and torch.equal(bit_view(x), bit_view(y)) for x, y in zip(a, b)
    )


def copy_bundle(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def run_runtime(runtime: str, build: Build, target: Path, *args: object, cwd: Path, **env: str | None
                ) -> subprocess.CompletedProcess[str]:
    """aoti_runner or run_inference on a package or bundle, as a process."""
    if runtime == "cpp":
        environment = {**os.environ}
        for key, value in env.items():
            if value is None:
                environment.pop(key, None)
            else:
                environment[key] = value
        result = run_cmd(build.runner, target, *args, cwd=cwd, env=environment)
        assert "terminate called" not in result.stderr
        return result
    return run_cli("run_inference", target, *args, cwd=cwd, build=build, **env)


RUNTIMES = ["cpp", "python"]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_verified_bundle_runs_with_the_bare_packages_bits(runtime: str, build: Build, signed: Signed, keys: Keys,
                                                            tmp_path: Path) -> None:
    outputs = tmp_path / "out.pt"
    result = run_runtime(runtime, build, signed.bundle, "--trusted-key", keys.public("signing"),
                         "--inputs", signed.input_file, "--outputs", outputs, cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "signature: verified 2 files" in output
    assert "PASSED" in output
    assert same_bits(load_tensors(outputs), signed.reference)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_trusted_key_can_come_from_the_environment(runtime: str, build: Build, signed: Signed, keys: Keys,
                                                      compiled_package: CompiledPackage, tmp_path: Path) -> None:
    env = {TRUSTED_KEY_ENV: str(keys.public("signing"))}
    result = run_runtime(runtime, build, signed.bundle, cwd=tmp_path, **env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "signature: verified" in result.stdout
    # With the variable set, a bare package is refused: it cannot be verified.
    result = run_runtime(runtime, build, compiled_package.path, cwd=tmp_path, **env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "bare package" in result.stderr and f"${TRUSTED_KEY_ENV}" in result.stderr


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_model_signing_cli_signs_what_both_runtimes_verify(runtime: str, build: Build, signed: Signed,
                                                               keys: Keys, tmp_path: Path) -> None:
    """Interop with the reference implementation's own CLI, with a P-384 key."""
    bundle = copy_bundle(signed.bundle, tmp_path / "bundle")
    (bundle / "model.sig").unlink()
    model_signing = Path(sys.executable).parent / "model_signing"
    result = run_cmd(model_signing, "sign", "key", bundle, "--private_key", keys.private("p384"),
                     "--signature", bundle / "model.sig")
    assert result.returncode == 0, result.stdout + result.stderr
    outputs = tmp_path / "out.pt"
    result = run_runtime(runtime, build, bundle, "--trusted-key", keys.public("p384"), "--inputs", signed.input_file,
                         "--outputs", outputs, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert same_bits(load_tensors(outputs), signed.reference)


def test_the_model_signing_cli_verifies_what_the_bundle_command_signs(signed: Signed, keys: Keys) -> None:
    model_signing = Path(sys.executable).parent / "model_signing"
    result = run_cmd(model_signing, "verify", "key", signed.bundle, "--public_key", keys.public("signing"),
                     "--signature", signed.bundle / "model.sig")
    assert result.returncode == 0, result.stdout + result.stderr


# --- tampering: each refused, exit 2, before anything native from the bundle runs ----

def _read_line(fd: int) -> str:
    """One line from a pipe, read a byte at a time so that nothing past it is consumed."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line.decode()


def _replace_zip_entry(package: Path, suffix: str, transform) -> None:
    """Rewrite the zip with one entry's bytes transformed (zipfile writes correct CRCs)."""
    staged = package.with_suffix(".tmp")
    with zipfile.ZipFile(package) as source, zipfile.ZipFile(staged, "w") as target:
        matches = [info for info in source.infolist() if info.filename.endswith(suffix)]
        assert len(matches) == 1, [info.filename for info in source.infolist()]
        for info in source.infolist():
            data = source.read(info)
            target.writestr(info, transform(data) if info is matches[0] else data)
    staged.replace(package)


def _constants_offset(shared_object: bytes) -> int:
    """File offset of the .lrodata section, where AOTI keeps the weights it compiles
    into the model library (read with readelf from binutils)."""
    with_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"wrapper_{os.getpid()}.so"
    with_file.write_bytes(shared_object)
    try:
        listing = run_cmd("readelf", "-S", "--wide", with_file).stdout
    finally:
        with_file.unlink()
    for line in listing.splitlines():
        fields = line.replace("[ ", "[").split()
        if ".lrodata" in fields:
            name_at = fields.index(".lrodata")
            return int(fields[name_at + 3], 16)  # name, type, address, offset
    raise AssertionError(f"no .lrodata section in the model library:\n{listing}")


def _flip_weight_byte(data: bytes) -> bytes:
    offset = _constants_offset(data)
    return data[:offset] + bytes([data[offset] ^ 0x01]) + data[offset + 1:]


def _edit_payload(signature: Path, edit) -> None:
    document = json.loads(signature.read_text())
    payload = json.loads(base64.b64decode(document["dsseEnvelope"]["payload"]))
    edit(payload)
    document["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    signature.write_text(json.dumps(document))


def tamper(case: str, bundle: Path, signed: Signed, keys: Keys, build: Build) -> None:
    marker_bytes = signed.marker_library.read_bytes()
    if case == "model library replaced":
        _replace_zip_entry(bundle / "model.pt2", ".wrapper.so", lambda _: marker_bytes)
    elif case == "one weight byte changed":
        _replace_zip_entry(bundle / "model.pt2", ".wrapper.so", _flip_weight_byte)
    elif case == "a byte of the package flipped in place":
        # No CRC-32 fixed up: the package is damaged as a zip, and refused as unsigned.
        with open(bundle / "model.pt2", "r+b") as file:
            file.seek(file.seek(0, os.SEEK_END) // 2)
            byte = file.read(1)
            file.seek(-1, os.SEEK_CUR)
            file.write(bytes([byte[0] ^ 0x40]))
    elif case == "package truncated":
        with open(bundle / "model.pt2", "r+b") as file:
            file.truncate(file.seek(0, os.SEEK_END) // 2)
    elif case == "op library swapped":
        shutil.copy(signed.marker_library, bundle / "libidentity_conv_ops.so")
    elif case == "op library added":
        shutil.copy(signed.marker_library, bundle / "libextra.so")
    elif case == "op library removed":
        (bundle / "libidentity_conv_ops.so").unlink()
    elif case == "signed by another key":
        (bundle / "model.sig").unlink()
        result = run_cmd(Path(sys.executable).parent / "model_signing", "sign", "key", bundle, "--private_key",
                         keys.private("other"), "--signature", bundle / "model.sig")
        assert result.returncode == 0, result.stderr
    elif case == "payload edited, old signature kept":
        # The attacker's library goes in, and the statement is edited to match it.
        _replace_zip_entry(bundle / "model.pt2", ".wrapper.so", lambda _: marker_bytes)
        digest = hashlib.sha256((bundle / "model.pt2").read_bytes()).hexdigest()

        def point_at_new_file(payload: dict) -> None:
            for resource in payload["predicate"]["resources"]:
                if resource["name"] == "model.pt2":
                    resource["digest"] = digest
            root = hashlib.sha256(b"".join(bytes.fromhex(r["digest"]) for r in payload["predicate"]["resources"]))
            payload["subject"][0]["digest"]["sha256"] = root.hexdigest()

        _edit_payload(bundle / "model.sig", point_at_new_file)
    elif case == "truncated signature":
        text = (bundle / "model.sig").read_bytes()
        (bundle / "model.sig").write_bytes(text[: len(text) // 2])
    elif case == "garbage signature":
        (bundle / "model.sig").write_bytes(os.urandom(512))
    elif case == "signature removed":
        (bundle / "model.sig").unlink()
    elif case == "symlinked op library":
        (bundle / "libidentity_conv_ops.so").unlink()
        (bundle / "libidentity_conv_ops.so").symlink_to(signed.marker_library)
    else:
        raise AssertionError(case)


# The words both runtimes use for each refusal.
TAMPER_CASES = {
    "model library replaced": "model.pt2: digest mismatch",
    "one weight byte changed": "model.pt2: digest mismatch",
    "a byte of the package flipped in place": "model.pt2: digest mismatch",
    "package truncated": "model.pt2: digest mismatch",
    "op library swapped": "libidentity_conv_ops.so: digest mismatch",
    "op library added": "libextra.so: unknown file",
    "op library removed": "libidentity_conv_ops.so: missing file",
    "signed by another key": "signed by another key",
    "payload edited, old signature kept": "bad signature",
    "truncated signature": "malformed signature",
    "garbage signature": "malformed signature",
    "signature removed": "is not signed (no model.sig), and a trusted key is set",
    "symlinked op library": "not a regular file",
}


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("case", list(TAMPER_CASES))
def test_a_tampered_bundle_is_refused_before_native_code_runs(case: str, runtime: str, build: Build, signed: Signed,
                                                              keys: Keys, tmp_path: Path) -> None:
    bundle = copy_bundle(signed.bundle, tmp_path / "bundle")
    tamper(case, bundle, signed, keys, build)
    marker = tmp_path / "marker"
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    result = run_runtime(runtime, build, bundle, "--trusted-key", keys.public("signing"), cwd=tmp_path,
                         MARKER_PATH=str(marker), TMPDIR=str(temp))
    assert result.returncode == 2, result.stdout + result.stderr
    assert TAMPER_CASES[case] in result.stderr, result.stderr
    assert "loaded op library" not in result.stdout
    assert not marker.exists(), f"native code from the tampered bundle ran ({case})"
    # What was unpacked while it was hashed goes with the refusal.
    assert not any(temp.iterdir()), sorted(p.name for p in temp.rglob("*"))


def _sign_with_model_signing(bundle: Path, keys: Keys) -> None:
    """Sign ``bundle`` again with model-signing's own CLI (the bundle command would
    refuse the packages these tests craft)."""
    (bundle / "model.sig").unlink()
    result = run_cmd(Path(sys.executable).parent / "model_signing", "sign", "key", bundle, "--private_key",
                     keys.private("signing"), "--signature", bundle / "model.sig")
    assert result.returncode == 0, result.stdout + result.stderr


def _rewrite_package(package: Path, preamble: bytes = b"", extra: tuple[str, bytes] | None = None) -> str:
    """Rewrite the zip with ``preamble`` before it (offsets shifted to match) and an
    ``extra`` entry (a name under the model's folder, and its bytes). Returns the
    archive's top folder."""
    staged = package.with_suffix(".tmp")
    with zipfile.ZipFile(package) as source:
        top = source.namelist()[0].split("/")[0]
        with open(staged, "wb") as raw:
            raw.write(preamble)
            with zipfile.ZipFile(raw, "w") as target:
                for info in source.infolist():
                    target.writestr(info, source.read(info))
                if extra:
                    target.writestr(f"{top}/data/aotinductor/model/{extra[0]}", extra[1])
    staged.replace(package)
    return top


@pytest.mark.parametrize("case, words", [
    ("an entry 40 folders deep", "folders deep; a package's files are at most 30 deep"),
    ("bytes before the zip", "package is not a zip archive"),
])
def test_a_signed_package_that_cannot_be_unpacked_is_refused_and_leaves_nothing(case: str, words: str, build: Build,
                                                                               signed: Signed, keys: Keys,
                                                                               tmp_path: Path) -> None:
    """What the verified runner unpacks as it hashes is held to the bare runner's rules
    and its own limits, under a good signature too: refused in words, nothing left."""
    bundle = copy_bundle(signed.bundle, tmp_path / "bundle")
    if case == "an entry 40 folders deep":
        _rewrite_package(bundle / "model.pt2", extra=("/".join(["d"] * 40) + "/x.bin", b"x"))
    else:
        _rewrite_package(bundle / "model.pt2", preamble=b"\0" * 16)
        bare = run_cmd(build.runner, bundle / "model.pt2", build.op_library, cwd=tmp_path)
        assert bare.returncode == 2 and words in bare.stderr, bare.stdout + bare.stderr
    _sign_with_model_signing(bundle, keys)
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    result = run_cmd(build.runner, bundle, "--trusted-key", keys.public("signing"), cwd=tmp_path,
                     env={**os.environ, "TMPDIR": str(temp)})
    assert result.returncode == 2 and words in result.stderr, result.stdout + result.stderr
    assert not any(temp.iterdir()), sorted(str(p) for p in temp.rglob("*"))[:5]


def test_a_verified_package_is_checked_as_a_bare_one_is(build: Build, signed: Signed, keys: Keys,
                                                       tmp_path: Path) -> None:
    """The verified runner reads its package's spec from what it unpacked while hashing
    (the index from memory, every entry from its file), the bare one from the file: a
    signed package with a broken JSON entry outside the model's folder, which only the
    spec check reads, is refused by both in the same words."""
    bundle = copy_bundle(signed.bundle, tmp_path / "bundle")
    package = bundle / "model.pt2"
    with zipfile.ZipFile(package, "a") as archive:
        name = archive.namelist()[0].split("/")[0] + "/extra/notes.json"
        archive.writestr(name, b"{not json")
    _sign_with_model_signing(bundle, keys)
    words = f"{name} is not valid JSON"
    bare = run_cmd(build.runner, package, build.op_library, cwd=tmp_path)
    assert bare.returncode == 2 and words in bare.stderr, bare.stdout + bare.stderr
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    verified = run_cmd(build.runner, bundle, "--trusted-key", keys.public("signing"), cwd=tmp_path,
                       env={**os.environ, "TMPDIR": str(temp)})
    assert verified.returncode == 2, verified.stdout + verified.stderr
    assert "model.pt2 (verified, unpacked as it was hashed)" in verified.stderr, verified.stderr
    assert words in verified.stderr, verified.stderr
    assert not any(temp.iterdir())


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_marker_library_really_marks_when_loaded(runtime: str, build: Build, signed: Signed,
                                                    tmp_path: Path) -> None:
    """The control for the tamper tests: an unsigned run of the swapped model library
    does run its constructor (and then fails), so an absent marker above means
    something."""
    bundle = copy_bundle(signed.bundle, tmp_path / "bundle")
    (bundle / "model.sig").unlink()
    _replace_zip_entry(bundle / "model.pt2", ".wrapper.so", lambda _: signed.marker_library.read_bytes())
    marker = tmp_path / "marker"
    result = run_runtime(runtime, build, bundle, cwd=tmp_path, MARKER_PATH=str(marker))
    assert result.returncode == 2, result.stdout + result.stderr
    assert marker.exists()


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_require_signature(runtime: str, build: Build, signed: Signed, compiled_package: CompiledPackage,
                           tmp_path: Path) -> None:
    unsigned = copy_bundle(signed.bundle, tmp_path / "unsigned")
    (unsigned / "model.sig").unlink()
    cases = [
        (unsigned, "is not signed (no model.sig), and --require-signature is set"),
        (compiled_package.path, "is a bare package, and --require-signature is set"),
        (signed.bundle, "no trusted key is set to verify it with"),
    ]
    for target, words in cases:
        result = run_runtime(runtime, build, target, "--require-signature", cwd=tmp_path, **{TRUSTED_KEY_ENV: None})
        assert result.returncode == 2, result.stdout + result.stderr
        assert words in result.stderr
    # Without the flag and without a key, an unsigned bundle runs as a package does.
    result = run_runtime(runtime, build, unsigned, cwd=tmp_path, **{TRUSTED_KEY_ENV: None})
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("key, words", [
    ("ed25519.pub", "EC keys on P-256, P-384 or P-521"),
    ("signing.pem", "private key"),
    ("missing.pub", "not found"),
])
def test_an_unusable_trusted_key_is_refused(runtime: str, key: str, words: str, build: Build, signed: Signed,
                                            keys: Keys, tmp_path: Path) -> None:
    result = run_runtime(runtime, build, signed.bundle, "--trusted-key", keys.dir / key, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert words in result.stderr
    assert "loaded op library" not in result.stdout


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_what_runs_is_the_verified_copy(runtime: str, build: Build, signed: Signed, keys: Keys,
                                        tmp_path: Path) -> None:
    """Check-then-load: the moment verification is reported (before anything loads),
    the original bundle's files are renamed over by the attacker's, prepared in advance,
    and the new files are then rewritten in place with the attacker's bytes too; the run
    still passes on the verified bytes, loads its libraries from its own copy (C++: the
    sealed memory, Python: the private folder), runs none of the attacker's code, and
    leaves no copy behind when it exits."""
    bundle = copy_bundle(signed.bundle, tmp_path / "bundle")
    marker = tmp_path / "marker"
    evil = copy_bundle(signed.bundle, tmp_path / "evil")
    shutil.copy(signed.marker_library, evil / "libidentity_conv_ops.so")
    _replace_zip_entry(evil / "model.pt2", ".wrapper.so", lambda _: signed.marker_library.read_bytes())
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    command = (
        [str(build.runner), str(bundle), "--list-loaded-objects"]
        if runtime == "cpp"
        else [str(Path(sys.executable).parent / "run_inference"), str(bundle)]
    )
    env = {**os.environ, "MARKER_PATH": str(marker), "PYTHONUNBUFFERED": "1", TRUSTED_KEY_ENV: str(keys.public("signing")),
           "AOTI_DEPLOY_BUILD_DIR": str(build.dir), "TMPDIR": str(temp)}
    # Unbuffered bytes: the first line is read byte by byte, so nothing after it sits in
    # a reader's buffer that communicate() (which reads the descriptor) would never see.
    process = subprocess.Popen(command + ["--inputs", str(signed.input_file)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, bufsize=0, env=env, cwd=tmp_path)
    first_line = _read_line(process.stdout.fileno())
    assert first_line.startswith("signature: verified"), first_line + process.communicate()[1].decode()
    for name in ("libidentity_conv_ops.so", "model.pt2"):  # two renames: microseconds
        os.replace(evil / name, bundle / name)
    for name in ("libidentity_conv_ops.so", "model.pt2"):  # and the same files changed in place
        with open(bundle / name, "r+b") as file:
            file.write(file.read())
    rest_bytes, error_bytes = process.communicate(timeout=300)
    rest, errors = rest_bytes.decode(), error_bytes.decode()
    output = first_line + rest
    assert process.returncode == 0, output + errors
    assert "PASSED" in output
    if runtime == "cpp":
        assert first_line.rstrip().endswith("running what was hashed (each file read once: the libraries sealed in "
                                            "memory, the package unpacked as it was read)")
        assert f"loaded op library {bundle}/libidentity_conv_ops.so (verified, sealed in memory)" in output
        assert "loaded object: /memfd:libidentity_conv_ops.so (deleted)" in output
        assert f"loaded object: {bundle}/libidentity_conv_ops.so" not in output
    else:
        copy_dir = first_line.rsplit("running the private copy ", 1)[1].strip()
        assert f"loaded op library {copy_dir}/libidentity_conv_ops.so" in output, output + errors
        assert not Path(copy_dir).exists()
    assert not marker.exists()
    assert not any(temp.iterdir())


def _wait_for_mapping(pid: int, needle: str, process: subprocess.Popen, timeout_s: float = 120) -> list[str]:
    """/proc/PID/maps once a line of it holds ``needle``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
        if any(needle in line for line in lines):
            return lines
        time.sleep(0.05)
    raise AssertionError(f"{needle} never mapped into the runner")


@contextlib.contextmanager
def _sigkilled_after(process: subprocess.Popen) -> Iterator[None]:
    """SIGKILL ``process`` once the block ends (on any path) and reap it; a block that
    ended normally also checks that the kill is what ended it."""
    try:
        yield
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL


@pytest.mark.parametrize("kind", ["verified bundle", "bare package"])
def test_a_killed_runner_leaves_nothing_in_its_temp_folder(kind: str, build: Build, signed: Signed, keys: Keys,
                                                          compiled_package: CompiledPackage, tmp_path: Path) -> None:
    """A runner SIGKILLed while it runs (here: in a long benchmark) runs no clean-up, so
    whatever it had on disk would stay: once the package is loaded it has nothing there.
    Its maps show the verified op library mapped from sealed memory, not from a file."""
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    if kind == "verified bundle":
        command = [build.runner, signed.bundle, "--trusted-key", keys.public("signing")]
    else:
        command = [build.runner, compiled_package.path, build.op_library]
    process = subprocess.Popen([*map(str, command), "--inputs", str(signed.input_file), "--bench", "100000000"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(temp)})
    with _sigkilled_after(process):
        _wait_for_mapping(process.pid, "wrapper.so", process)
        time.sleep(1.0)  # the loader's constructor returns (the demo model loads in milliseconds)
        maps = Path(f"/proc/{process.pid}/maps").read_text().splitlines()
        left = sorted(str(p.relative_to(temp)) for p in temp.rglob("*"))
    assert left == [] and not any(temp.iterdir()), left
    libraries = [line for line in maps if "libidentity_conv_ops.so" in line]
    assert libraries
    if kind == "verified bundle":
        assert all("/memfd:libidentity_conv_ops.so" in line for line in libraries), libraries
    # The model library was loaded from the unpacked folder, which is gone.
    assert any("wrapper.so (deleted)" in line and str(temp) in line for line in maps), maps


UNPACKED_PREFIX = "aoti_deploy_unpacked_"
BUNDLE_COPY_PREFIX = "aoti_deploy_bundle_"
LOAD_SCRIPT = """
import sys
import aoti_deploy as ad
with ad.load(sys.argv[1], trusted_key=sys.argv[2]):
    print("loaded", flush=True)
"""


@pytest.fixture(scope="module")
def big_bundle(tmp_path_factory: pytest.TempPathFactory, build: Build, compiled_package: CompiledPackage,
               keys: Keys) -> Path:
    """The signed bundle of a package with 64 MiB more constants (a file torch's loader
    does not read): hashing, sealing or copying and unpacking it take long enough for a
    runner to be killed in the middle of each."""
    folder = tmp_path_factory.mktemp("big")
    package = folder / "model.pt2"
    shutil.copy(compiled_package.path, package)
    with zipfile.ZipFile(package, "a") as archive:
        prefix = archive.namelist()[0].split("/")[0]
        with archive.open(zipfile.ZipInfo(f"{prefix}/data/constants/padding.bin"), "w") as padding:
            for _ in range(64):
                padding.write(os.urandom(1 << 20))
    bundle = folder / "bundle"
    result = run_cli("aoti-deploy", "bundle", package, "--output", bundle, "--sign-key", keys.private("signing"),
                     cwd=folder, build=build)
    assert result.returncode == 0, result.stdout + result.stderr
    return bundle


def _start_time(pid: int) -> int:
    """Field 22 of /proc/PID/stat: when the process started, in clock ticks after boot."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def _poll(condition, process: subprocess.Popen, what: str, timeout_s: float = 120):
    """``condition()``'s first true value, polled while ``process`` runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        assert process.poll() is None, f"the process ended before {what}"
        time.sleep(0.002)
    raise AssertionError(f"{what} did not happen in {timeout_s} s")


def _owned_by(temp: Path, prefix: str, pid: int) -> list[Path]:
    return sorted(p for p in temp.iterdir() if p.name.startswith(f"{prefix}{pid}_"))


def _holds_bytes(folder: Path, name: str, at_least: int) -> bool:
    return any(p.name == name and p.stat().st_size >= at_least for p in folder.rglob("*") if p.is_file())


def _plant_decoys(temp: Path, prefix: str) -> set[str]:
    """Folders a sweep must leave alone: one named by a live process (this test's), the
    unowned name of earlier versions, another name, and, named by a process that is gone,
    a folder with another mode and a link to a folder. Returns every name in ``temp``."""
    gone_pid = subprocess.Popen(["true"])
    gone_pid.wait()
    live = temp / f"{prefix}{os.getpid()}_{_start_time(os.getpid())}_live01"
    for folder in (live, temp / f"{prefix}Ab3dE9", temp / "other_folder"):
        folder.mkdir(mode=0o700)
        (folder / "kept").write_text("kept")
    wide = temp / f"{prefix}{gone_pid.pid}_1_wide01"
    wide.mkdir(mode=0o755)
    wide.chmod(0o755)
    (wide / "kept").write_text("kept")
    target = temp.parent / f"{temp.name}_link_target"
    target.mkdir(mode=0o700, exist_ok=True)
    (target / "kept").write_text("kept")
    (temp / f"{prefix}{gone_pid.pid}_1_link01").symlink_to(target, target_is_directory=True)
    return {p.name for p in temp.iterdir()}


def _decoys_intact(temp: Path, names: set[str]) -> None:
    assert {p.name for p in temp.iterdir()} == names
    for name in names:
        assert (temp / name / "kept").read_text() == "kept", name
    assert (temp.parent / f"{temp.name}_link_target" / "kept").exists()


def _kill_while_loading(command: list, temp: Path, prefix: str, when: str, filling: str) -> tuple[int, list[Path]]:
    """Start ``command`` with $TMPDIR ``temp`` and SIGKILL it: at once ("start"), as soon as
    its private folder appears ("folder"), or once the big file ``filling`` in it holds
    1 MiB ("filling"). Returns its pid and the folders it left."""
    process = subprocess.Popen([str(a) for a in command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "TMPDIR": str(temp)})
    with _sigkilled_after(process):
        if when != "start":
            folder = _poll(lambda: _owned_by(temp, prefix, process.pid), process, "the private folder appeared")[0]
            if when == "filling":
                _poll(lambda: _holds_bytes(folder, filling, 1 << 20), process, f"{filling} filled")
    left = _owned_by(temp, prefix, process.pid)
    if when != "start":
        assert left, f"killed at '{when}', the process left nothing: nothing to test"
    return process.pid, left


KILL_POINTS = ["start", "folder", "filling"]


def test_a_runner_killed_while_loading_leaves_nothing_after_the_next_start(build: Build, big_bundle: Path,
                                                                           signed: Signed, keys: Keys,
                                                                           tmp_path: Path) -> None:
    """A runner killed while it loads a big verified bundle leaves its unpacked folder;
    the next runner's start removes it (its owner is gone), and nothing else: not a live
    process's folder, not an unowned name, not a folder with another mode, not a link."""
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    names = _plant_decoys(temp, UNPACKED_PREFIX)
    command = [build.runner, big_bundle, "--trusted-key", keys.public("signing"), "--inputs", signed.input_file]
    for when in KILL_POINTS:
        pid, left = _kill_while_loading(command, temp, UNPACKED_PREFIX, when, "padding.bin")
        result = run_cmd(build.runner, signed.bundle, "--trusted-key", keys.public("signing"), "--inspect",
                         env={**os.environ, "TMPDIR": str(temp)})
        assert result.returncode == 0, result.stdout + result.stderr
        assert not any(p.exists() for p in left) and not _owned_by(temp, UNPACKED_PREFIX, pid), when
        _decoys_intact(temp, names)


def test_a_python_load_killed_while_copying_leaves_nothing_after_the_next_load(build: Build, big_bundle: Path,
                                                                               signed: Signed, keys: Keys,
                                                                               tmp_path: Path) -> None:
    """The same for aoti_deploy.load under a trusted key: a process killed while it copies
    a big bundle into its private folder leaves the copy; the next load removes it, and
    nothing else. A runner's start removes it too (one rule, both languages)."""
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    names = _plant_decoys(temp, BUNDLE_COPY_PREFIX)
    script = tmp_path / "load.py"
    script.write_text(LOAD_SCRIPT)
    command = [sys.executable, script, big_bundle, keys.public("signing")]
    environment = {**os.environ, "TMPDIR": str(temp), "AOTI_DEPLOY_BUILD_DIR": str(build.dir)}
    for when in KILL_POINTS:
        pid, left = _kill_while_loading(command, temp, BUNDLE_COPY_PREFIX, when, "model.pt2")
        result = run_cmd(sys.executable, script, signed.bundle, keys.public("signing"), env=environment)
        assert result.returncode == 0 and "loaded" in result.stdout, result.stdout + result.stderr
        assert not any(p.exists() for p in left) and not _owned_by(temp, BUNDLE_COPY_PREFIX, pid), when
        _decoys_intact(temp, names)
    pid, left = _kill_while_loading(command, temp, BUNDLE_COPY_PREFIX, "folder", "model.pt2")
    result = run_cmd(build.runner, signed.bundle, "--trusted-key", keys.public("signing"), "--inspect",
                     env={**os.environ, "TMPDIR": str(temp)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert not any(p.exists() for p in left)
    _decoys_intact(temp, names)


def test_a_locked_folder_is_kept_whatever_its_name_says(build: Build, signed: Signed, keys: Keys, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder's owner holds its lock (flock) while it lives, so a sweeper that cannot
    see the owner (another pid namespace: its pid names no process here) keeps the
    folder while the lock is held, in both runtimes, and removes it once it is not."""
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    folders = [temp / f"{prefix}{gone.pid}_1_locked" for prefix in (UNPACKED_PREFIX, BUNDLE_COPY_PREFIX)]
    locks = []
    for folder in folders:
        folder.mkdir(mode=0o700)
        locks.append(os.open(folder, os.O_RDONLY | os.O_DIRECTORY))
        fcntl.flock(locks[-1], fcntl.LOCK_EX | fcntl.LOCK_NB)
    inspect = [build.runner, signed.bundle, "--trusted-key", keys.public("signing"), "--inspect"]
    try:
        assert run_cmd(*inspect, env={**os.environ, "TMPDIR": str(temp)}).returncode == 0
        monkeypatch.setenv("TMPDIR", str(temp))
        monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again
        assert remove_orphaned_folders() == 0
        assert all(folder.is_dir() for folder in folders)
    finally:
        for fd in locks:
            os.close(fd)
    assert run_cmd(*inspect, env={**os.environ, "TMPDIR": str(temp)}).returncode == 0
    assert not any(folder.exists() for folder in folders)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_inspect_shows_the_signature_and_each_files_digest(runtime: str, build: Build, signed: Signed, keys: Keys,
                                                           tmp_path: Path) -> None:
    bundle = copy_bundle(signed.bundle, tmp_path / "bundle")
    tamper("op library swapped", bundle, signed, keys, build)
    if runtime == "cpp":
        result = run_cmd(build.runner, bundle, "--inspect")
    else:
        result = run_cli("aoti-deploy", "inspect", bundle, cwd=tmp_path, build=build)
    assert result.returncode == 0, result.stdout + result.stderr
    hint = json.loads((bundle / "model.sig").read_text())["verificationMaterial"]["publicKey"]["hint"]
    package_digest = hashlib.sha256((bundle / "model.pt2").read_bytes()).hexdigest()
    library_digest = hashlib.sha256((bundle / "libidentity_conv_ops.so").read_bytes()).hexdigest()
    lines = result.stdout.splitlines()
    assert any(hint in line for line in lines), result.stdout
    assert any(package_digest in line and "(as signed)" in line for line in lines), result.stdout
    assert any(library_digest in line and "(differs from the signature)" in line for line in lines), result.stdout


def test_the_bundle_command_refuses_an_ed25519_signing_key(build: Build, compiled_package: CompiledPackage,
                                                          keys: Keys, tmp_path: Path) -> None:
    result = run_cli("aoti-deploy", "bundle", compiled_package.path, "--output", tmp_path / "bundle", "--sign-key",
                     keys.private("ed25519"), cwd=tmp_path, build=build)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "EC" in result.stderr and "openssl ecparam" in result.stderr
    assert not (tmp_path / "bundle").exists()


def test_a_bundle_refuses_extra_op_library_arguments(build: Build, signed: Signed, tmp_path: Path) -> None:
    result = run_cmd(build.runner, signed.bundle, build.op_library)
    assert result.returncode == 2
    assert "a bundle carries its own op libraries" in result.stderr


def test_the_benchmark_times_verification_and_cold_start(build: Build, compiled_package: CompiledPackage,
                                                         tmp_path: Path) -> None:
    """The benchmark's signed-bundle section on the session's package, one run each
    (the numbers are reported by the benchmark, not judged here)."""
    from aoti_deploy.bench.signing import make_key_pair, measure_bundle

    private_key, public_key = make_key_pair(tmp_path / "keys")
    result = measure_bundle("session", compiled_package.path, [build.op_library], build.runner, tmp_path,
                            private_key, public_key, runs=1)
    assert result.files == 2
    assert result.megabytes == pytest.approx(
        (compiled_package.path.stat().st_size + build.op_library.stat().st_size) / 1e6)
    assert 0 < result.cpp_verify_ms < result.cold_start_signed_ms
    assert result.python_verify_ms > 0 and result.cold_start_plain_ms > 0
    # The floor it is judged against: hashing while copying into a memfd does the hash and more.
    assert result.sealed_copy_ms > result.sha256_ms > 0


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_keys_on_every_nist_curve_and_in_any_pem_form_verify(runtime: str, build: Build, signed: Signed,
                                                              keys: Keys, tmp_path: Path) -> None:
    """P-521 signs and verifies; a P-256 public key written with a compressed point
    has the same key hint (model-signing hashes a normalised encoding)."""
    openssl("ecparam", "-name", "secp521r1", "-genkey", "-noout", "-out", tmp_path / "p521.pem")
    openssl("ec", "-in", tmp_path / "p521.pem", "-pubout", "-out", tmp_path / "p521.pub")
    openssl("ec", "-in", keys.private("signing"), "-pubout", "-conv_form", "compressed", "-out", tmp_path / "c.pub")
    bundle = copy_bundle(signed.bundle, tmp_path / "bundle")
    result = run_cli("aoti-deploy", "bundle", bundle, "--output", bundle, "--sign-key", tmp_path / "p521.pem",
                     cwd=tmp_path, build=build)
    assert result.returncode == 0, result.stdout + result.stderr
    for target, key in [(bundle, tmp_path / "p521.pub"), (signed.bundle, tmp_path / "c.pub")]:
        result = run_runtime(runtime, build, target, "--trusted-key", key, cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "signature: verified" in result.stdout


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_key_on_another_curve_of_the_same_size_is_refused(runtime: str, build: Build, signed: Signed,
                                                            tmp_path: Path) -> None:
    openssl("ecparam", "-name", "secp256k1", "-genkey", "-noout", "-out", tmp_path / "k1.pem")
    openssl("ec", "-in", tmp_path / "k1.pem", "-pubout", "-out", tmp_path / "k1.pub")
    result = run_runtime(runtime, build, signed.bundle, "--trusted-key", tmp_path / "k1.pub", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "secp256k1" in result.stderr and "P-256, P-384 or P-521" in result.stderr


def _set(path: list, value):
    def edit(document: dict) -> None:
        node = document
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


# Signature files the reference reader refuses: both runtimes must call each malformed.
MALFORMED_SIGNATURES = {
    "a numeric key hint": lambda d: _set(["verificationMaterial", "publicKey", "hint"], 5)(d),
    "a string publicKey": lambda d: _set(["verificationMaterial", "publicKey"], "abc")(d),
    "an extra top-level field": lambda d: _set(["extra"], 1)(d),
    "an extra field in the signature": lambda d: _set(["dsseEnvelope", "signatures", 0, "extra"], 1)(d),
    "padding beyond two '='": lambda d: _set(["dsseEnvelope", "signatures", 0, "sig"],
                                             d["dsseEnvelope"]["signatures"][0]["sig"] + "====")(d),
    "a space before the payload": lambda d: _set(["dsseEnvelope", "payload"],
                                                 "    " + d["dsseEnvelope"]["payload"])(d),
}


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("case", [*MALFORMED_SIGNATURES, "a byte-order mark", "nesting 200 levels deep"])
def test_both_runtimes_call_the_same_signature_files_malformed(case: str, runtime: str, build: Build,
                                                               signed: Signed, keys: Keys, tmp_path: Path) -> None:
    bundle = copy_bundle(signed.bundle, tmp_path / "bundle")
    signature = bundle / "model.sig"
    document = json.loads(signature.read_text())
    if case == "a byte-order mark":
        signature.write_bytes(b"\xef\xbb\xbf" + signature.read_bytes())
    elif case == "nesting 200 levels deep":
        document["dsseEnvelope"]["signatures"][0]["keyid"] = json.loads("[" * 200 + "]" * 200)
        signature.write_text(json.dumps(document))
    else:
        MALFORMED_SIGNATURES[case](document)
        signature.write_text(json.dumps(document))
    result = run_runtime(runtime, build, bundle, "--trusted-key", keys.public("signing"), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "malformed signature" in result.stderr, result.stderr


def test_the_python_api_loads_only_a_verified_bundle_under_a_trusted_key(build: Build, signed: Signed, keys: Keys,
                                                                         compiled_package: CompiledPackage,
                                                                         tmp_path: Path) -> None:
    """aoti_deploy.load applies the runners' trust rules: a bare package or a bundle
    signed by another key is refused before anything loads; the signed bundle runs
    with the bare package's bits, in a fresh process (one that has loaded no op
    library yet: a process holds one copy of a library) and through the C++ runner."""
    import aoti_deploy as ad

    with pytest.raises(ad.PackageError, match="bare package"):
        ad.load(compiled_package.path, trusted_key=keys.public("signing"))
    with pytest.raises(ad.PackageError):
        ad.load(signed.bundle, trusted_key=keys.public("other"))
    bundle = ad.Package(compiled_package.path, None).bundle(tmp_path / "api_bundle", sign_key=keys.private("signing"))
    script = tmp_path / "load_signed.py"
    script.write_text("""
import sys
import aoti_deploy as ad
from aoti_deploy.runtime.tensor_files import load_tensors, save_tensors
with ad.load(sys.argv[1], trusted_key=sys.argv[2]) as package:
    inputs = load_tensors(sys.argv[3])
    save_tensors(sys.argv[4], package.run(inputs))
    assert package.verify(tuple(inputs), against="cpp").bit_identical
print("ok")
""")
    for k, path in enumerate((bundle, signed.bundle)):
        result = run_cmd(sys.executable, script, path, keys.public("signing"), signed.input_file, tmp_path / f"{k}.pt",
                         env={**os.environ, "AOTI_DEPLOY_BUILD_DIR": str(build.dir)})
        assert result.returncode == 0 and "ok" in result.stdout, result.stdout + result.stderr
        assert same_bits(load_tensors(tmp_path / f"{k}.pt"), signed.reference)
