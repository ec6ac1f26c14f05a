"""Crafted tensor files, packages and libraries, each built here from the suite's
demo package: both runners (aoti_runner and run_inference, each as a process) must
exit 2 with a message that names the problem, die of no signal, write no output, and
write nothing outside their own temporary folder. A short storage record, a zip with
no central directory, a path that leaves the extraction folder, JSON nested deeper
than any parser's stack, a spec that lies about the compiled model, a truncated
shared library: each once crashed a runner or read past a buffer."""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import subprocess
import zlib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch

from conftest import PACKAGE_SHAPE, Build, CompiledPackage, run_cli, run_cmd

GOOD = torch.randn(PACKAGE_SHAPE, generator=torch.Generator().manual_seed(3))
NUMEL = GOOD.numel()


def rewrite_zip(source: Path, target: Path, edit: Callable[[str, bytes], bytes | None],
                extra: Callable[[zipfile.ZipFile, str], None] | None = None) -> Path:
    """Copy a zip entry by entry through ``edit`` (None drops the entry), keeping each
    entry's header as it was, then let ``extra`` add entries under the archive's prefix."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        prefix = src.namelist()[0].split("/")[0]
        for info in src.infolist():
            data = edit(info.filename, src.read(info.filename))
            if data is not None:
                dst.writestr(info, data)
        if extra is not None:
            extra(dst, prefix)
    return target


def good_tensor_file(tmp: Path) -> Path:
    path = tmp / "good.pt"
    torch.save([GOOD], path)
    return path


def storage_record(edit: Callable[[bytes], bytes]) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        return rewrite_zip(good_tensor_file(tmp), tmp / "crafted.pt",
                           lambda name, data: edit(data) if name.endswith("/data/0") else data)
    return make


def numel_in_pickle(numel: int) -> Callable[[Path], Path]:
    """The pickle declares a storage of ``numel`` elements (the record keeps all)."""
    def edit(name: str, data: bytes) -> bytes:
        if not name.endswith("data.pkl"):
            return data
        # The storage's persistent id holds its numel as a pickled int (the first one of
        # that value: the sizes and strides come after it).
        needle = pickle.dumps(NUMEL, protocol=2)[2:-1]
        assert needle in data
        return data.replace(needle, pickle.dumps(numel, protocol=2)[2:-1], 1)
    return lambda tmp: rewrite_zip(good_tensor_file(tmp), tmp / "crafted.pt", edit)


def raw_bytes(content: bytes) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        path = tmp / "crafted.pt"
        path.write_bytes(content)
        return path
    return make


def tensor_zip_entry(name: str) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        return rewrite_zip(good_tensor_file(tmp), tmp / "crafted.pt", lambda n, d: d,
                           lambda dst, prefix: dst.writestr(name if name.startswith("/") else f"{prefix}/{name}", b"x"))
    return make


def deflated(tmp: Path) -> Path:
    with zipfile.ZipFile(good_tensor_file(tmp)) as src, zipfile.ZipFile(tmp / "crafted.pt", "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename), compress_type=zipfile.ZIP_DEFLATED)
    return tmp / "crafted.pt"


@dataclass(frozen=True)
class TensorCase:
    id: str
    make: Callable[[Path], Path]
    cpp: str  # words aoti_runner's message must hold
    python: str  # and run_inference's


BYTES = NUMEL * 4
SHORT = f"declares a storage of {BYTES} bytes, but its record in the file holds"
TENSOR_CASES = [
    # The storage record is empty, a few bytes short, or a few KiB short of the declared size.
    TensorCase("record-empty", storage_record(lambda data: b""), f"{SHORT} 0 ", "record size (0 bytes) does not match"),
    TensorCase("record-short-bytes", storage_record(lambda data: data[:-3]), f"{SHORT} {BYTES - 3} ",
               f"record size ({BYTES - 3} bytes) does not match"),
    TensorCase("record-short-kib", numel_in_pickle(NUMEL + 2048), f"declares a storage of {BYTES + 8192} bytes, but its "
               f"record in the file holds {BYTES} ", "does not match expected size"),
    # The pickle declares fewer elements than the tensor's view reaches.
    TensorCase("view-past-storage", numel_in_pickle(10), f"require a storage of at least {BYTES} bytes, but storage "
               "only has 40 bytes", "does not match expected size"),
    # A zip's local header and nothing else: no central directory.
    TensorCase("no-central-directory", raw_bytes(b"PK\x03\x04" + b"\0" * 5000),
               "it does not end with an end-of-central-directory record",
               "it does not end with an end-of-central-directory record"),
    TensorCase("entry-leaves-folder", tensor_zip_entry("../../escape"), "has a '..' component",
               "has a '..' component"),
    TensorCase("entry-absolute", tensor_zip_entry("/etc/x"), "is an absolute path", "is an absolute path"),
    TensorCase("entry-compressed", deflated, "is compressed (method 8)", "is compressed (method 8)"),
]


def run_both(build: Build, package: Path, op_library: Path, tmp: Path, *args: object
             ) -> dict[str, tuple[int, str]]:
    """aoti_runner and run_inference on the same arguments, each as a process, with
    --outputs; returns each one's exit code and output, after checking that neither
    died of a signal nor wrote an output."""
    results = {}
    for runtime in ("cpp", "python"):
        outputs = tmp / f"out_{runtime}.pt"
        if runtime == "cpp":
            done = run_cmd(build.runner, package, op_library, *args, "--outputs", outputs)
        else:
            done = run_cli("run_inference", package, op_library, *args, "--outputs", outputs, cwd=tmp, build=build)
        text = done.stdout + done.stderr
        assert done.returncode >= 0, f"{runtime} died of signal {-done.returncode}: {text}"
        assert "terminate called" not in text and "Traceback" not in text, text
        assert not outputs.exists(), f"{runtime} wrote outputs: {text}"
        results[runtime] = (done.returncode, text)
    return results


@pytest.mark.parametrize("flag", ["--inputs", "--expected"])
@pytest.mark.parametrize("case", TENSOR_CASES, ids=[case.id for case in TENSOR_CASES])
def test_crafted_tensor_file_is_refused_by_both_runners(case: TensorCase, flag: str, build: Build, op_library: Path,
                                                         compiled_package: CompiledPackage, tmp_path: Path) -> None:
    crafted = case.make(tmp_path)
    args = [flag, crafted] if flag == "--inputs" else ["--inputs", compiled_package.input_file, flag, crafted]
    results = run_both(build, compiled_package.path, op_library, tmp_path, *args)
    for runtime, words in (("cpp", case.cpp), ("python", case.python)):
        code, text = results[runtime]
        assert code == 2 and words in text and "crafted.pt" in text, f"{runtime}: {text}"


def test_the_tensor_case_builders_change_only_what_they_say(build: Build, op_library: Path,
                                                            compiled_package: CompiledPackage, tmp_path: Path) -> None:
    # The control: the untouched file through the same rewrite runs and passes.
    good = rewrite_zip(good_tensor_file(tmp_path), tmp_path / "copy.pt", lambda name, data: data)
    done = run_cmd(build.runner, compiled_package.path, op_library, "--inputs", good)
    assert done.returncode == 0 and "PASSED" in done.stdout, done.stdout + done.stderr
    assert numel_in_pickle(NUMEL)(tmp_path).read_bytes() == rewrite_zip(
        good_tensor_file(tmp_path), tmp_path / "same.pt", lambda n, d: d).read_bytes()


def peak_memory_mb(*args: object) -> tuple[int, str, float]:
    """Run a process to its end; its exit code, output and peak resident memory (MiB),
    from the kernel's accounting of that one child (wait4)."""
    process = subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    with process.stdout:
        output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, output, usage.ru_maxrss / 1024


def test_a_tensor_file_of_many_views_reads_their_storage_once(build: Build, op_library: Path,
                                                               compiled_package: CompiledPackage,
                                                               tmp_path: Path) -> None:
    """torch.save names a storage again for every view of it. aoti_runner read the
    record afresh for each name: 800 views of one 1 MiB storage (a 1.1 MiB file) took
    800 MiB of reads, and a crafted 64 KB file ran the fuzzer out of memory. torch.load
    reads each storage once; so must the runner."""
    storage = torch.arange(1 << 18, dtype=torch.float32)  # 1 MiB
    one = tmp_path / "one_view.pt"
    many = tmp_path / "many_views.pt"
    torch.save([storage[0:1]], one)
    torch.save([storage[i:i + 1] for i in range(800)], many)
    assert many.stat().st_size - one.stat().st_size < 128 * 1024  # the same storage, written once
    peaks = {}
    for name, file in (("one", one), ("many", many)):
        code, output, peaks[name] = peak_memory_mb(build.runner, compiled_package.path, op_library,
                                                   "--inputs", file)
        assert code == 2, output
        expected = "got 800" if name == "many" else "expected rank"
        assert expected in output, output
    assert peaks["many"] - peaks["one"] < 64, peaks


# --- packages ---------------------------------------------------------------------

def metadata_edit(edit: Callable[[dict], None], suffix: str = "wrapper_metadata.json"):
    def entry(name: str, data: bytes) -> bytes:
        if not name.endswith(suffix):
            return data
        metadata = json.loads(data)
        edit(metadata)
        return json.dumps(metadata).encode()
    return entry


def spec_edit(edit: Callable[[dict], None]):
    def on_metadata(metadata: dict) -> None:
        document = json.loads(metadata["aoti_deploy.spec"])
        edit(document)
        metadata["aoti_deploy.spec"] = json.dumps(document)
    return metadata_edit(on_metadata)


def deep_spec(metadata: dict) -> None:
    document = json.loads(metadata["aoti_deploy.spec"])
    document["extra"] = "DEEP"
    metadata["aoti_deploy.spec"] = json.dumps(document).replace('"DEEP"', "[" * 150_000 + "]" * 150_000)


def dynamic_where_static(document: dict) -> None:
    for dim in document["inputs"][0]["dims"][2:]:
        dim["min"], dim["max"] = 1, 512
    document.pop("example_shapes", None)


def truncated_library(name: str, data: bytes) -> bytes:
    return data[: len(data) * 2 // 3] if name.endswith(".so") else data


@dataclass(frozen=True)
class PackageCase:
    id: str
    edit: Callable[[str, bytes], bytes | None]
    message: str
    extra: Callable[[zipfile.ZipFile, str], None] | None = None
    inputs: torch.Tensor = GOOD
    # Applied to the written archive's bytes, with its entry prefix.
    raw: Callable[[bytes, str], bytes] | None = None


def truncated_library_in_constants(data: bytes, prefix: str) -> bytes:
    """The model library moved to data/constants/, cut short: torch extracts that folder
    into the model's folder by file name and loads the library it finds there."""
    source, target = io.BytesIO(data), io.BytesIO()
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            payload = src.read(info.filename)
            if info.filename.endswith(".so"):
                name = info.filename.rsplit("/", 1)[1]
                dst.writestr(f"{prefix}/data/constants/{name}", payload[: len(payload) // 2])
            else:
                dst.writestr(info, payload)
    return target.getvalue()


def hide_second_archive(data: bytes, prefix: str) -> bytes:
    """The archive untouched, but for a comment that holds a second archive: its entries
    plus one that leaves the extraction folder, its own central directory, and an end
    record whose comment length is wrong. A reader that takes the end record whose
    comment runs to the end of the file reads the first archive; torch's (miniz) takes
    the last end-record signature, and so reads the second."""
    at = data.rfind(b"PK\x05\x06")
    _, _, _, count, _, directory_size, directory_offset, _ = struct.unpack("<IHHHHIIH", data[at:at + 22])
    name = f"{prefix}/data/aotinductor/model/{'../' * 12}tmp/{ESCAPE_NAME}".encode()
    payload = b"escaped"
    crc = zlib.crc32(payload)
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, crc, len(payload), len(payload), len(name),
                        0) + name + payload
    central = data[directory_offset:directory_offset + directory_size] + struct.pack(
        "<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, 0, 0, 0, 0x21, crc, len(payload), len(payload), len(name), 0, 0,
        0, 0, 0o600 << 16, len(data)) + name
    second_end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count + 1, count + 1, len(central),
                             len(data) + len(local), 7)
    comment = local + central + second_end
    return data[:at] + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, directory_size, directory_offset,
                                   len(comment)) + comment


def symlink_entry(dst: zipfile.ZipFile, prefix: str) -> None:
    info = zipfile.ZipInfo(f"{prefix}/data/aotinductor/model/link")
    info.create_system = 3
    info.external_attr = 0o120777 << 16
    dst.writestr(info, "/etc/passwd")


ESCAPE_NAME = "hostile_escape_marker.txt"

PACKAGE_CASES = [
    PackageCase("spec-nested-150k", metadata_edit(deep_spec),
                "aoti_deploy.spec is not valid JSON (nested more than 64 levels deep)"),
    PackageCase("metadata-nested-120k", lambda n, d: b"[" * 120_000 + b"]" * 120_000
                if n.endswith("wrapper_metadata.json") else d, "wrapper_metadata.json is not valid JSON (nested more "
                "than 64 levels deep)"),
    # The file torch's loader parses when it builds the model (the .cpp's metadata).
    PackageCase("kernel-metadata-nested", lambda n, d: b"{\"a\":" * 100_000 + b"1" + b"}" * 100_000
                if n.endswith("kernel_metadata.json") else d, "kernel_metadata.json is not valid JSON (nested more "
                "than 64 levels deep)"),
    PackageCase("zip-slip", lambda n, d: d, "has a '..' component (it would be extracted outside its folder)",
                extra=lambda dst, prefix: dst.writestr(
                    f"{prefix}/data/aotinductor/model/" + "../" * 12 + f"tmp/{ESCAPE_NAME}", b"escaped")),
    PackageCase("symlink-entry", lambda n, d: d, "is a symbolic link", extra=symlink_entry),
    PackageCase("comment-hides-a-second-archive", lambda n, d: d, "its end record declares a comment",
                raw=hide_second_archive),
    PackageCase("spec-dynamic-where-compiled-static", spec_edit(dynamic_where_static),
                "the spec says input[0] dim 2 is 1..512, but the model was compiled for exactly 8",
                inputs=torch.randn(2, 3, 4, 12)),
    PackageCase("spec-dtype-lies", spec_edit(lambda doc: doc["inputs"][0].update(dtype="float64")),
                "the spec says input[0] is float64, but the model was compiled for float32", inputs=GOOD.double()),
    PackageCase("model-library-truncated", truncated_library, "is not a complete shared library for this machine"),
    PackageCase("library-in-constants-truncated", lambda n, d: d, "/data/constants/", raw=truncated_library_in_constants),
    # The spec check fails closed: no source to read the compiled checks from is a refusal.
    PackageCase("wrapper-source-missing", lambda n, d: None if n.endswith("wrapper.cpp") else d,
                "it carries no generated wrapper source"),
]


@pytest.mark.parametrize("case", PACKAGE_CASES, ids=[case.id for case in PACKAGE_CASES])
def test_crafted_package_is_refused_by_both_runners(case: PackageCase, build: Build, op_library: Path,
                                                    compiled_package: CompiledPackage, tmp_path: Path) -> None:
    escape = Path("/tmp") / ESCAPE_NAME
    escape.unlink(missing_ok=True)
    package = rewrite_zip(compiled_package.path, tmp_path / "crafted.pt2", case.edit, case.extra)
    if case.raw is not None:
        with zipfile.ZipFile(package) as archive:
            prefix = archive.namelist()[0].split("/")[0]
        package.write_bytes(case.raw(package.read_bytes(), prefix))
    inputs = tmp_path / "inputs.pt"
    torch.save([case.inputs], inputs)
    results = run_both(build, package, op_library, tmp_path, "--inputs", inputs)
    for runtime, (code, text) in results.items():
        assert code == 2 and case.message in text, f"{runtime}: {text}"
    assert not escape.exists()


def test_the_package_rewrite_alone_changes_nothing(build: Build, op_library: Path,
                                                   compiled_package: CompiledPackage, tmp_path: Path) -> None:
    # The control for the table above.
    package = rewrite_zip(compiled_package.path, tmp_path / "copy.pt2", lambda n, d: d)
    done = run_cmd(build.runner, package, op_library, "--inputs", compiled_package.input_file)
    assert done.returncode == 0 and "PASSED" in done.stdout, done.stdout + done.stderr


def test_truncated_op_library_is_refused_before_it_is_loaded(build: Build, compiled_package: CompiledPackage,
                                                             tmp_path: Path) -> None:
    library = tmp_path / "libidentity_conv_ops.so"
    data = build.op_library.read_bytes()
    library.write_bytes(data[: len(data) // 2])
    results = run_both(build, compiled_package.path, library, tmp_path)
    for runtime, (code, text) in results.items():
        assert code == 2 and f"op library {library} is not a complete shared library for this machine" in text, text
