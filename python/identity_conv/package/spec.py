"""What a package needs and accepts, recorded by export_compile in the AOTI
package's own metadata (keys ``identity_conv.*``) and read back, without loading
the package, by both runners."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import PackageError

META_PREFIX = "identity_conv."
FORMAT_VERSION = "1"

DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class DimSpec:
    """A fixed size (min == max) or an inclusive range of sizes."""

    min: int
    max: int

    @property
    def is_static(self) -> bool:
        return self.min == self.max

    def __str__(self) -> str:
        return str(self.min) if self.is_static else f"{self.min}..{self.max}"


@dataclass(frozen=True)
class TensorSpec:
    dims: tuple[DimSpec, ...]
    dtype: str

    @classmethod
    def of(cls, tensor: torch.Tensor) -> "TensorSpec":
        return cls(tuple(DimSpec(s, s) for s in tensor.shape), dtype_name(tensor.dtype))

    def shape_str(self) -> str:
        return "[" + ", ".join(str(d) for d in self.dims) + "]"

    def encode(self) -> str:
        return f"{self.dtype}:" + ",".join(str(d) for d in self.dims)

    @classmethod
    def decode(cls, text: str) -> "TensorSpec":
        """``"float32:1..8,3,224,224"`` -> TensorSpec. The grammar is strict and the
        same as the C++ runner's: a dtype, a colon, then N or MIN..MAX per dim with
        0 <= MIN <= MAX."""
        dtype, colon, dims = text.partition(":")
        parsed = []
        try:
            if not colon or not dtype:
                raise ValueError("no dtype")
            for dim in dims.split(",") if dims else []:
                low, dots, high = dim.partition("..")
                d = DimSpec(int(low), int(high) if dots else int(low))
                if not 0 <= d.min <= d.max:
                    raise ValueError(f"empty range {dim}")
                parsed.append(d)
        except ValueError as error:
            raise PackageError(
                f"package metadata is malformed: input spec {text!r} ({error}). "
                "Re-export the package with export_compile."
            ) from error
        return cls(tuple(parsed), dtype)


@dataclass
class PackageSpec:
    """The facts export_compile records so a runner can check before it runs."""

    inputs: list[TensorSpec]
    device: str
    required_ops: list[str] = field(default_factory=list)
    required_classes: list[str] = field(default_factory=list)
    op_libraries: list[str] = field(default_factory=list)
    is_identity: bool = False
    torch_version: str = torch.__version__
    aoti: dict[str, str] = field(default_factory=dict)  # AOTI's own entries (CPU ISA, ...)
    # The shapes the package was verified at; runners draw random inputs of these.
    example_shapes: list[tuple[int, ...]] = field(default_factory=list)
    # Instruction-set flags of the compile host. AOTI compiles with -march=native, so
    # the kernels may use any of them; a host that lacks one could die with SIGILL.
    cpu_flags: list[str] = field(default_factory=list)
    # Custom ops only Python can run (written with --allow-python-ops): the C++
    # runner refuses such a package up front.
    python_only_ops: list[str] = field(default_factory=list)
    # Modules that register fakes or Python ops; the Python runner must import them.
    fake_modules: list[str] = field(default_factory=list)
    # What the export-time optimizations did (optimize.py), or that they were off.
    optimizations: str = ""
    # Groups of (input, dim) positions that must have equal sizes (one dynamic dim).
    shared_dims: list[list[tuple[int, int]]] = field(default_factory=list)
    # The compile cache: the key of everything the package was built from, and the
    # build's verification (JSON: [[label, BitReport fields], ...]) to report on a hit.
    cache_key: str = ""
    verified: str = ""
    # ONNX files only: "portable" or "custom-domain" (see onnx_export.py).
    onnx_mode: str = ""

    def to_metadata(self) -> dict[str, str]:
        entries = {
            "format": FORMAT_VERSION,
            "inputs": ";".join(spec.encode() for spec in self.inputs),
            "device": self.device,
            "required_ops": ",".join(self.required_ops),
            "required_classes": ",".join(self.required_classes),
            "op_libraries": ",".join(self.op_libraries),
            "is_identity": "1" if self.is_identity else "0",
            "torch_version": self.torch_version,
            "example_shapes": ";".join(",".join(map(str, shape)) for shape in self.example_shapes),
            "cpu_flags": " ".join(self.cpu_flags),
            "python_only_ops": ",".join(self.python_only_ops),
            "fake_modules": ",".join(self.fake_modules),
            "optimizations": self.optimizations,
            "shared_dims": ";".join(",".join(f"{i}.{d}" for i, d in group) for group in self.shared_dims),
            "cache_key": self.cache_key,
            "verified": self.verified,
        }
        if self.onnx_mode:
            entries["onnx_mode"] = self.onnx_mode
        return {META_PREFIX + key: value for key, value in entries.items()}

    def describe(self) -> list[tuple[str, str]]:
        """The facts inspect prints, in the same order and words as aoti_runner --inspect."""
        rows = [(f"input[{i}]", f"{spec.shape_str()} {spec.dtype}") for i, spec in enumerate(self.inputs)]
        rows += [
            ("device", self.device),
            ("required ops", ", ".join(self.required_ops)),
            ("required classes", ", ".join(self.required_classes)),
            ("op libraries", ", ".join(self.op_libraries)),
            ("python-only ops", ", ".join(self.python_only_ops) or "none"),
            ("fake modules", ", ".join(self.fake_modules)),
            ("shared dims", "; ".join(" = ".join(f"input[{i}] dim {d}" for i, d in group) for group in self.shared_dims)),
            ("optimizations", self.optimizations),
            ("identity model", "yes" if self.is_identity else "no"),
            ("torch version", self.torch_version),
            ("platform", f"{self.aoti.get('AOTI_PLATFORM', '')} {self.aoti.get('AOTI_MACHINE', '')}"),
            ("cpu isa", self.aoti.get("AOTI_CPU_ISA", "")),
            ("compute capability", self.aoti.get("AOTI_COMPUTE_CAPABILITY", "")),
        ]
        if self.onnx_mode:
            rows.append(("onnx mode", self.onnx_mode))
        return rows

    def to_json(self) -> dict[str, object]:
        """Machine-readable form: dims as {"min", "max"} pairs, AOTI's entries as-is."""
        return {
            "inputs": [
                {"dtype": spec.dtype, "dims": [{"min": d.min, "max": d.max} for d in spec.dims]}
                for spec in self.inputs
            ],
            "device": self.device,
            "required_ops": self.required_ops,
            "required_classes": self.required_classes,
            "op_libraries": self.op_libraries,
            "is_identity": self.is_identity,
            "torch_version": self.torch_version,
            "example_shapes": [list(shape) for shape in self.example_shapes],
            "cpu_flags": self.cpu_flags,
            "python_only_ops": self.python_only_ops,
            "fake_modules": self.fake_modules,
            "optimizations": self.optimizations,
            "shared_dims": [[list(position) for position in group] for group in self.shared_dims],
            "cache_key": self.cache_key,
            "onnx_mode": self.onnx_mode,
            "aoti": self.aoti,
        }

    @classmethod
    def from_metadata(cls, metadata: dict[str, str], path: Path) -> "PackageSpec":
        def get(key: str, default: str = "") -> str:
            return metadata.get(META_PREFIX + key, default)

        def split(text: str, sep: str = ",") -> list[str]:
            return [part for part in text.split(sep) if part]

        if META_PREFIX + "inputs" not in metadata:
            raise PackageError(
                f"package {path} has no identity_conv metadata (no "
                f"'{META_PREFIX}inputs' entry), so its inputs cannot be validated. "
                "Create the package with export_compile, which records them."
            )
        return cls(
            inputs=[TensorSpec.decode(text) for text in split(get("inputs"), ";")],
            device=get("device", "cpu"),
            required_ops=split(get("required_ops")),
            required_classes=split(get("required_classes")),
            op_libraries=split(get("op_libraries")),
            is_identity=get("is_identity") == "1",
            torch_version=get("torch_version", "unknown"),
            aoti={k: v for k, v in metadata.items() if not k.startswith(META_PREFIX)},
            example_shapes=_decode_shapes(get("example_shapes")),
            cpu_flags=get("cpu_flags").split(),
            python_only_ops=split(get("python_only_ops")),
            fake_modules=split(get("fake_modules")),
            optimizations=get("optimizations"),
            shared_dims=_decode_groups(get("shared_dims")),
            cache_key=get("cache_key"),
            verified=get("verified"),
            onnx_mode=get("onnx_mode"),
        )


def _decode_groups(text: str) -> list[list[tuple[int, int]]]:
    """``"0.0,1.0;0.2,1.3"`` -> [[(0, 0), (1, 0)], [(0, 2), (1, 3)]], strictly."""
    groups = []
    try:
        for group in filter(None, text.split(";")):
            positions = []
            for position in group.split(","):
                i, dot, d = position.partition(".")
                if not dot:
                    raise ValueError(position)
                positions.append((int(i), int(d)))
            groups.append(positions)
    except ValueError as error:
        raise PackageError(f"package metadata is malformed: shared dims {text!r}") from error
    return groups


def _decode_shapes(text: str) -> list[tuple[int, ...]]:
    try:
        return [tuple(int(size) for size in shape.split(",")) for shape in text.split(";") if shape]
    except ValueError as error:
        raise PackageError(f"package metadata is malformed: example shapes {text!r}") from error


def rewrite_package_metadata(source: str | Path, target: str | Path, changes: dict[str, str | None]) -> Path:
    """Copy an AOTI package to ``target`` (which may be ``source``), setting the given
    entries in the metadata JSON files it carries; a value of None deletes the key.

    Raises:
        PackageError: the package cannot be read or written.
    """
    import json
    import os
    import tempfile

    source, target = Path(source), Path(target)
    try:
        with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".pt2", delete=False) as tmp:
            temporary = Path(tmp.name)
        with zipfile.ZipFile(source) as src, zipfile.ZipFile(temporary, "w") as dst:
            for item in src.infolist():
                data = src.read(item.filename)
                if item.filename.endswith("_metadata.json"):
                    metadata = json.loads(data)
                    for key, value in changes.items():
                        if value is None:
                            metadata.pop(key, None)
                        else:
                            metadata[key] = value
                    data = json.dumps(metadata).encode()
                dst.writestr(item, data)
        os.replace(temporary, target)
    except (OSError, zipfile.BadZipFile, ValueError) as error:
        raise PackageError(f"could not rewrite the metadata of {source} into {target}: {error}") from error
    return target


def check_model_file(path: Path, what: str, hint: str) -> None:
    """Raise PackageError, naming ``what`` and ending with ``hint``, if ``path`` is
    missing, not a file, or empty."""
    if not path.exists():
        raise PackageError(f"{what} not found: {path}\n{hint}")
    if not path.is_file():
        raise PackageError(f"{what} path is not a file: {path}\n{hint}")
    if path.stat().st_size == 0:
        raise PackageError(f"{what} is empty (0 bytes): {path}\n{hint}")


def read_package_spec(path: str | Path) -> PackageSpec:
    """Check that ``path`` looks like an AOTI package and read its recorded spec.

    Raises:
        PackageError: the file is missing, empty, not a zip, not an AOTI package,
            or was not written by export_compile.
    """
    path = Path(path)
    hint = "Create it with `export_compile` (default output artifacts/model.pt2)."
    check_model_file(path, "package", hint)
    with path.open("rb") as file:
        magic = file.read(4)
    if magic != b"PK\x03\x04":
        raise PackageError(
            f"package is not a zip archive (an AOTI .pt2 package is one): {path}\n{hint}"
        )
    if not zipfile.is_zipfile(path):
        raise PackageError(
            f"could not read the AOTI package {path}: the zip archive is damaged or "
            f"truncated (no central directory).\n{hint}"
        )
    try:
        metadata = torch._C._aoti.AOTIModelPackageLoader.load_metadata_from_package(
            str(path), "model"
        )
    except RuntimeError as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise PackageError(
            f"could not read the AOTI package {path}: {first_line}\n"
            f"The file is damaged or is not an AOTI package. {hint}"
        ) from error
    return PackageSpec.from_metadata(dict(metadata), path)
