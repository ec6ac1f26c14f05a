"""Writes the fuzz targets' seed corpora (tests/fuzz_corpus/<target>/) from real files:
a package that export_compile wrote, reduced to the entries the C++ reader checks;
tensor files torch.save wrote; a signature model-signing wrote over a tiny bundle (with
a key made for the run and thrown away); the contract vectors' spec documents; and
Triton requests in the layout cpp_runtime/fuzz/fuzz_triton_request.cpp decodes.
Every seed stays a few KB: no package, library or large tensor is committed.

    .venv/bin/python scripts/make_fuzz_seeds.py [--package model.pt2] [--op-lib build/libidentity_conv_ops.so]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fuzz_corpus"


def write_seeds(target: str, seeds: list[bytes]) -> None:
    folder = CORPUS / target
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for seed in seeds:
        assert len(seed) <= 8192, f"{target}: a seed of {len(seed)} bytes; keep the corpus small"
        (folder / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
    print(f"{target}: {len(seeds)} seeds, {sum(len(s) for s in seeds)} bytes")


def export_package(op_lib: Path, out: Path) -> Path:
    package = out / "model.pt2"
    subprocess.run(
        [str(Path(sys.executable).parent / "export_compile"), "--batch", "2", "--channels", "3",
         "--height", "8", "--width", "12", "--output", str(package), "--op-lib", str(op_lib)],
        check=True, capture_output=True,
    )
    return package


def tiny_shared_object(out: Path) -> bytes:
    """A real, minimal ELF shared object from this machine's toolchain."""
    source = out / "tiny.c"
    source.write_text("int tiny(void) { return 1; }\n")
    library = out / "tiny.so"
    subprocess.run(["cc", "-shared", "-nostdlib", "-Os", "-s", "-Wl,--build-id=none",
                    "-Wl,-z,noseparate-code", "-Wl,-z,norelro", "-o", library, source],
                   check=True)
    return library.read_bytes()


def reduced_wrapper(source: str) -> str:
    """The wrapper source's input checks (what check_spec_against_compiled reads), with
    the line after each "unmatched dim value" line, which holds the expected size."""
    lines = source.splitlines()
    keep: list[str] = []
    for i, line in enumerate(lines):
        if ("ConstantHandle(input_handles[" in line or "_expected_dtype = aoti_torch_dtype_" in line
                or ": unmatched dim value at " in line):
            keep.append(line)
            if ": unmatched dim value at " in line and i + 1 < len(lines):
                keep.append(lines[i + 1])
    return "\n".join(keep) + "\n"


def package_seeds(package: Path, work: Path) -> tuple[list[bytes], dict[str, str]]:
    """The package with its model library replaced by a tiny one and its generated
    sources cut to the lines the reader parses; and its metadata."""
    library = tiny_shared_object(work)
    seeds = []
    metadata: dict[str, str] = {}
    with zipfile.ZipFile(package) as source:
        entries = [(info.filename, source.read(info)) for info in source.infolist()]
    for name, data in entries:
        if name.endswith("wrapper_metadata.json"):
            metadata = json.loads(data)
    for variant in ("full", "no_library"):
        target = work / f"{variant}.pt2"
        with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as out:
            for name, data in entries:
                if name.endswith(".so"):
                    if variant == "no_library":
                        continue
                    data = library
                elif name.endswith("wrapper.cpp"):
                    data = reduced_wrapper(data.decode()).encode()
                elif name.endswith("kernel.cpp") or name.endswith("kernel_metadata.json"):
                    continue  # not read before torch's loader
                elif "/constants/" in name:
                    data = data[:64]
                out.writestr(name, data)
        seeds.append(target.read_bytes())
    return seeds, metadata


def spec_seeds(metadata: dict[str, str]) -> list[bytes]:
    """The package's metadata as the reader gets it, its spec document alone, and the
    contract vectors' documents (well formed and not)."""
    seeds = [json.dumps(metadata).encode(), metadata["aoti_deploy.spec"].encode()]
    vectors = json.loads((ROOT / "tests" / "contract" / "spec_vectors.json").read_text())["vectors"]
    picked = [v for v in vectors if "ok" in v["expect"]][:6] + [v for v in vectors if "ok" not in v["expect"]][:6]
    # An output's kind (Python scalar outputs): one well-formed document, one not.
    picked += [v for v in vectors if v["name"] in ("output_kind_scalars_by_name", "output_kind_int_of_int32")]
    for vector in picked:
        document = {key: value if isinstance(value, str) else json.dumps(value)
                    for key, value in vector["metadata"].items()}
        seeds.append(json.dumps(document).encode())
    return seeds


def tensor_file_seeds(work: Path) -> list[bytes]:
    generator = torch.Generator().manual_seed(0)
    contents = [
        [torch.randn(2, 3, generator=generator)],
        [torch.arange(6, dtype=torch.int64).reshape(2, 3), torch.tensor([True, False, True])],
        (torch.randn(3, 2, generator=generator).t(),),  # a non-contiguous view, as a tuple
        [torch.randn(4, generator=generator).to(torch.bfloat16)[1:3], torch.tensor(1.5, dtype=torch.float16)],
        [torch.empty(0, 3), torch.zeros(2, 1, dtype=torch.float64).expand(2, 4)],
        torch.ones(2, 2, dtype=torch.uint8),  # a bare tensor
    ]
    seeds = []
    for i, content in enumerate(contents):
        path = work / f"tensors_{i}.pt"
        torch.save(content, path)
        seeds.append(path.read_bytes())
    return seeds


def signature_seeds(work: Path) -> list[bytes]:
    """model-signing's signature over a two-file bundle, signed with a key made here."""
    bundle = work / "bundle"
    bundle.mkdir()
    (bundle / "model.pt2").write_bytes(b"PK\x05\x06" + bytes(18))
    (bundle / "libops.so").write_bytes(b"\x7fELF")
    key = work / "key.pem"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key],
                   check=True, capture_output=True)
    signature = work / "model.sig"
    subprocess.run([Path(sys.executable).parent / "model_signing", "sign", "key", bundle, "--private_key", key,
                    "--signature", signature], check=True, capture_output=True)
    text = signature.read_bytes()
    statement = base64.b64decode(json.loads(text)["dsseEnvelope"]["payload"])
    # Even first byte: a whole signature file; odd: a statement the target signs itself.
    return [b"\x00" + text, b"\x01" + statement]


def request(spec: int, inputs: list[tuple], fill: bytes) -> bytes:
    """One request in fuzz_triton_request's layout. Each input is (name, datatype,
    shape, byte size mode, [(memory type, misalignment, share), ...])."""
    out = bytearray([spec, len(inputs)])
    for name, datatype, shape, size_mode, buffers in inputs:
        out += bytes([name, datatype, len(shape)])
        for dim in shape:
            out += bytes([dim]) if 0 <= dim < 0xF0 else b"\xf0" + struct.pack("<q", dim)
        out += bytes([size_mode]) if size_mode in (0,) else bytes([2]) + struct.pack("<Q", size_mode)
        out += bytes([len(buffers)])
        for memory, misalign, share in buffers:
            out += bytes([memory, misalign, share])
    return bytes(out) + fill


def triton_request_seeds() -> list[bytes]:
    FP32, INT64, BOOL, FP16, BF16, UINT8, INT32, FP64, INT8, INT16 = 11, 9, 1, 10, 14, 2, 8, 12, 6, 7
    one = [(0, 0, 0xFE)]
    return [
        # The demo package, in one buffer and in three (one misaligned).
        request(0, [(0, FP32, [2, 3, 8, 12], 0, one)], bytes(range(256))),
        request(0, [(0, FP32, [2, 3, 8, 12], 0, [(0, 0, 100), (1, 3, 127), (0, 0, 0)])], b"\x3f\x80\x00\x00"),
        # Dynamic dims, one of them unbounded; a wrong byte size.
        request(1, [(0, FP32, [4, 3, 20, 5], 0, one)], b"\x01\x02"),
        request(1, [(0, FP32, [1, 3, 2, 4], 100, one)], b"\x01"),
        # Indices within their range with a bool mask sharing dims; then out of range.
        request(2, [(0, INT64, [2, 3], 0, one), (0, BOOL, [2, 3], 0, one)], struct.pack("<6q", 0, 1, 2, 3, 4, 999) + bytes(6)),
        request(2, [(0, INT64, [1, 2], 0, one), (0, BOOL, [1, 2], 0, one)], struct.pack("<2q", 1000, -1) + b"\x01\x02"),
        # A scalar and an empty dim; every other dtype.
        request(3, [(0, FP16, [], 0, one), (0, BF16, [0], 0, [])], b"\x00\x3c"),
        request(4, [(0, UINT8, [2, 2], 0, one), (0, INT32, [3], 0, one), (0, FP64, [1], 0, one),
                    (0, INT8, [2], 0, one)], struct.pack("<4B3i", 1, 2, 3, 4, -5, 0, 5)),
        # The wrong names and counts.
        request(0, [(3, FP32, [2, 3, 8, 12], 0, one)], b""),
        request(2, [(0, INT64, [2, 3], 0, one)], b""),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", type=Path, help="an export_compile package (default: export the demo)")
    parser.add_argument("--op-lib", type=Path, default=ROOT / "build" / "libidentity_conv_ops.so")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        package = args.package or export_package(args.op_lib, work)
        packages, metadata = package_seeds(package, work)
        write_seeds("package", packages)
        write_seeds("spec", spec_seeds(metadata))
        write_seeds("tensor_file", tensor_file_seeds(work))
        write_seeds("signature", signature_seeds(work))
        write_seeds("triton_request", triton_request_seeds())


if __name__ == "__main__":
    main()
