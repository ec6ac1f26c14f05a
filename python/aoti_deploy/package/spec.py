"""The package spec: what a package needs and accepts, recorded by export_compile as
one versioned JSON document under one metadata key (``aoti_deploy.spec``) and read
back, without loading the package, by every runtime.

cpp_runtime/core/package_spec.cpp parses the same document with nlohmann-json; the
vectors in tests/contract/spec_vectors.json pin both parsers to one verdict per
document, well-formed or not. Packages written before the document existed carry
``aoti_deploy.*`` entries instead; ``legacy_document`` converts them."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import PackageError
from .dtypes import NAMES
from .json_text import parse_json_limited

SPEC_KEY = "aoti_deploy.spec"
# The newest schema this toolkit reads. A writer records the lowest version whose
# readers understand the document, so older toolkits keep reading what they can: 2,
# or 3 when a dim is unbounded ("max": null), which a version-2 reader cannot read.
SCHEMA_VERSION = 3
UNBOUNDED_SCHEMA_VERSION = 3
# Before the JSON document: one metadata entry per field, "aoti_deploy.<field>".
LEGACY_PREFIX = "aoti_deploy."
# The largest integer a spec holds (JSON integers past it do not fit the C++ runner).
# As a dim's max it reads as unbounded: version-2 writers recorded torch.export's int_oo so.
INT64_MAX = 2**63 - 1
_REEXPORT = "Re-export the package with export_compile."
# What the runners do for a package from before the eager check was recorded.
_NO_EAGER_CHECK = "not recorded (--expected compares bitwise; --eager-reference uses torch.testing's defaults)"


class SpecError(PackageError):
    """The spec is missing (kind "missing"), malformed ("malformed"), or of a schema
    version this toolkit cannot read ("unsupported_version")."""


# The rules a comparison can be held to (verify/tolerance.py compares under them).
BITWISE = "bitwise"
ULP = "ulp"
CLOSE = "close"
RULES = (BITWISE, ULP, CLOSE)


@dataclass(frozen=True)
class Tolerance:
    """``rule`` is BITWISE, ULP (every element within ``max_ulp`` ULP) or CLOSE
    (``rtol``/``atol``; None for both means torch.testing's default for each
    tensor's dtype)."""

    rule: str = BITWISE
    max_ulp: int = 0
    rtol: float | None = None
    atol: float | None = None

    @property
    def is_default_close(self) -> bool:
        return self.rule == CLOSE and self.rtol is None

    def resolve(self, dtype: torch.dtype) -> tuple[float, float]:
        """(rtol, atol) for a tensor of ``dtype`` under the CLOSE rule."""
        if self.rtol is not None and self.atol is not None:
            return self.rtol, self.atol
        from torch.testing._comparison import default_tolerances

        return default_tolerances(dtype)

    def describe(self, dtype: torch.dtype | None = None) -> str:
        """The rule in a few words, e.g. "bitwise", "within 4 ULP", "rtol 1.3e-06,
        atol 1e-05" (for ``dtype``), or "torch.testing's rtol/atol for each dtype"."""
        if self.rule == BITWISE:
            return "bitwise"
        if self.rule == ULP:
            return f"within {self.max_ulp} ULP"
        if dtype is None and self.is_default_close:
            return "torch.testing's rtol/atol for each dtype"
        rtol, atol = self.resolve(dtype if dtype is not None else torch.float32)
        return f"rtol {fmt(rtol)}, atol {fmt(atol)}"

    def to_document(self) -> dict[str, Any]:
        """The spec's ``eager_check`` entry."""
        return {"rule": self.rule, "max_ulp": self.max_ulp, "rtol": self.rtol, "atol": self.atol}


def fmt(value: float | None) -> str:
    """printf %.9g, as the C++ runner prints numbers."""
    if value is None:
        return "n/a"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.9g}"


@dataclass(frozen=True)
class DimSpec:
    """A fixed size (min == max), an inclusive range of sizes, or min and up (max
    None: unbounded, ``"max": null`` in the document)."""

    min: int
    max: int | None

    @property
    def is_static(self) -> bool:
        return self.min == self.max

    @property
    def is_unbounded(self) -> bool:
        return self.max is None

    def contains(self, size: int) -> bool:
        return self.min <= size and (self.max is None or size <= self.max)

    def wanted(self) -> str:
        """What a size must be, for messages: "3", "a size in [1, 8]" or "a size >= 1"."""
        if self.is_static:
            return str(self.min)
        if self.max is None:
            return f"a size >= {self.min}"
        return f"a size in [{self.min}, {self.max}]"

    def __str__(self) -> str:
        if self.is_static:
            return str(self.min)
        return f"{self.min}..{'unbounded' if self.max is None else self.max}"


# The integer dtypes a value range may apply to, and the values each holds.
VALUE_DTYPES: dict[str, tuple[int, int]] = {
    "uint8": (0, 2**8 - 1),
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True)
class ValueRange:
    """The values an integer input may hold, inclusive: where it indexes a tensor,
    any other value makes the compiled kernel abort the process. ``why`` says what
    it indexes (e.g. "embedding rows 0..999"), for messages."""

    min: int
    max: int
    why: str = ""

    def __str__(self) -> str:
        return f"[{self.min}, {self.max}]"

    def to_document(self) -> dict[str, Any]:
        return {"min": self.min, "max": self.max, "why": self.why}


# What a tensor's name may be: an identifier, dots allowed after the first character
# (e.g. "input_ids", "encoder.last_hidden_state"), at most TENSOR_NAME_LIMIT characters.
TENSOR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
TENSOR_NAME_LIMIT = 128


@dataclass(frozen=True)
class TensorSpec:
    dims: tuple[DimSpec, ...]
    dtype: str
    # Inputs only, and only when export saw (or was told) which values index a tensor.
    values: ValueRange | None = None
    # The model's own name for it (e.g. "input_ids", "logits"); "" in packages from
    # before names were recorded.
    name: str = ""

    def shape_str(self) -> str:
        return "[" + ", ".join(str(d) for d in self.dims) + "]"

    def to_document(self) -> dict[str, Any]:
        """An ``inputs`` or ``outputs`` item of the spec document."""
        document: dict[str, Any] = {"dtype": self.dtype, "dims": [{"min": d.min, "max": d.max} for d in self.dims]}
        if self.values is not None:  # written only when recorded: older packages have none
            document["values"] = self.values.to_document()
        if self.name:  # written only when recorded: older readers ignore it
            document["name"] = self.name
        return document


def tensor_label(role: str, index: int, specs: list[TensorSpec]) -> str:
    """How messages name a tensor: "input[0]", or "input[0] (input_ids)" when the
    package records names. cpp_runtime/core/package_spec.cpp's tensor_label is the same."""
    name = specs[index].name if index < len(specs) else ""
    return f"{role}[{index}]" + (f" ({name})" if name else "")


def tensor_names(specs: list[TensorSpec]) -> list[str]:
    """The recorded names of ``specs`` in order, or [] when they have none."""
    return [spec.name for spec in specs] if specs and specs[0].name else []


@dataclass(frozen=True)
class OpRef:
    """A custom op the package calls: ``ns::name`` and its overload ("default" for
    the unnamed one). ``overload`` is None for packages from before overloads were
    recorded: any overload of the name then satisfies the check."""

    name: str
    overload: str | None = "default"

    def __str__(self) -> str:
        return self.name if self.overload in (None, "default") else f"{self.name}.{self.overload}"


@dataclass
class PackageSpec:
    """The facts export_compile records so a runner can check before it runs."""

    inputs: list[TensorSpec]
    device: str = "cpu"
    # The flat outputs (pytree order), for serving configs that declare them. Empty
    # when not recorded: packages from before, or a model with a non-tensor output.
    outputs: list[TensorSpec] = field(default_factory=list)
    required_ops: list[OpRef] = field(default_factory=list)
    required_classes: list[str] = field(default_factory=list)
    op_libraries: list[str] = field(default_factory=list)
    # Which op namespaces each of op_libraries registers, so a runner can say which
    # library a missing op needs. Written only when known (older packages lack it).
    op_library_namespaces: dict[str, list[str]] = field(default_factory=dict)
    is_identity: bool = False
    torch_version: str = "unknown"
    # The shapes the package was verified at (one per input); random inputs use them.
    example_shapes: list[tuple[int, ...]] = field(default_factory=list)
    # The instruction-set flags a host needs: the CPU target's (a psABI level), or
    # for native (-march=native) every flag of the compile host. A host that lacks
    # one could die with SIGILL.
    cpu_flags: list[str] = field(default_factory=list)
    # What the compiled code was built for: "native" or e.g. "x86-64-v3"; "" in
    # packages from before targets were recorded (those were all native).
    cpu_target: str = ""
    # Custom ops only Python can run (written with --allow-python-ops): the C++
    # runner refuses such a package up front.
    python_only_ops: list[str] = field(default_factory=list)
    # Modules that register fakes or Python ops; the Python runner must import them.
    fake_modules: list[str] = field(default_factory=list)
    # What the export-time optimizations did (optimize.py), or that they were off.
    optimizations: str = ""
    # Groups of (input, dim) positions that must have equal sizes (one dynamic dim).
    shared_dims: list[list[tuple[int, int]]] = field(default_factory=list)
    # The compile cache: the key of what shaped the package, and the checks it passed
    # ([[label, BitReport fields], ...]) to report on a hit.
    cache_key: str = ""
    verified: list[list[Any]] = field(default_factory=list)
    # ONNX files only: "portable" or "custom-domain" (see compiler/onnx_export.py).
    onnx_mode: str = ""
    # The rule compiled code was held to against eager at export, which the runners'
    # --eager-reference applies too. None in packages from before it was recorded.
    eager_check: Tolerance | None = None
    # The model's non-tensor inputs (Python ints, floats, bools, strings, None) that
    # torch.export baked into the compiled code: the Python API refuses another value.
    # Each is {"name", "index" (its leaf in the flattened (args, kwargs)), "value"}.
    constant_inputs: list[dict[str, Any]] = field(default_factory=list)
    # The Inductor settings the package was compiled with (export's inductor_configs):
    # booleans, integers and strings by config name.
    inductor_configs: dict[str, bool | int | str] = field(default_factory=dict)
    aoti: dict[str, str] = field(default_factory=dict)  # AOTI's own entries (CPU ISA, ...)
    schema_version: int = SCHEMA_VERSION  # the version the spec was read from

    def written_schema_version(self) -> int:
        """The lowest schema version that can hold the spec: UNBOUNDED_SCHEMA_VERSION
        with an unbounded dim, else 2."""
        unbounded = any(d.is_unbounded for t in self.inputs + self.outputs for d in t.dims)
        return UNBOUNDED_SCHEMA_VERSION if unbounded else 2

    def to_document(self) -> dict[str, Any]:
        """The JSON document (schema ``written_schema_version``), as written into packages."""
        return {
            "schema_version": self.written_schema_version(),
            "inputs": [spec.to_document() for spec in self.inputs],
            # Only when recorded (as cpu_target): a spec without outputs writes the document it always did.
            **({"outputs": [spec.to_document() for spec in self.outputs]} if self.outputs else {}),
            "example_shapes": [list(shape) for shape in self.example_shapes],
            "shared_dims": [[list(position) for position in group] for group in self.shared_dims],
            "device": self.device,
            "required_ops": [
                {"name": op.name, **({} if op.overload is None else {"overload": op.overload})}
                for op in self.required_ops
            ],
            "required_classes": list(self.required_classes),
            "python_only_ops": list(self.python_only_ops),
            "op_libraries": list(self.op_libraries),
            **({"op_library_namespaces": dict(self.op_library_namespaces)} if self.op_library_namespaces else {}),
            "fake_modules": list(self.fake_modules),
            "is_identity": self.is_identity,
            "torch_version": self.torch_version,
            "cpu_flags": list(self.cpu_flags),
            **({"cpu_target": self.cpu_target} if self.cpu_target else {}),
            "optimizations": self.optimizations,
            "cache_key": self.cache_key,
            "verified": self.verified,
            "onnx_mode": self.onnx_mode,
            **({} if self.eager_check is None else {"eager_check": self.eager_check.to_document()}),
            **({"constant_inputs": list(self.constant_inputs)} if self.constant_inputs else {}),
            **({"inductor_configs": dict(self.inductor_configs)} if self.inductor_configs else {}),
        }

    def to_metadata(self) -> dict[str, str]:
        """The package metadata entries: the document under SPEC_KEY."""
        return {SPEC_KEY: json.dumps(self.to_document(), sort_keys=True)}

    def describe(self) -> list[tuple[str, str]]:
        """The facts inspect prints, in the same order and words as aoti_runner --inspect."""
        rows = [
            (f"{name}[{i}]", (f"{spec.name}  " if spec.name else "") + f"{spec.shape_str()} {spec.dtype}")
            for name, specs in (("input", self.inputs), ("output", self.outputs))
            for i, spec in enumerate(specs)
        ]
        for i in reversed(range(len(self.inputs))):  # each under its input's row
            if (values := self.inputs[i].values) is not None:
                rows.insert(i + 1, (f"input[{i}] values", f"{values.min}..{values.max} ({values.why})"))
        rows += [
            ("spec", f"schema {self.schema_version}" + (" (legacy entries)" if self.schema_version < 2 else "")),
            ("device", self.device),
            ("required ops", ", ".join(str(op) for op in self.required_ops)),
            ("required classes", ", ".join(self.required_classes)),
            ("op libraries", ", ".join(self.op_libraries)),
            ("python-only ops", ", ".join(self.python_only_ops) or "none"),
            ("fake modules", ", ".join(self.fake_modules)),
            ("shared dims", "; ".join(" = ".join(f"input[{i}] dim {d}" for i, d in group) for group in self.shared_dims)),
            ("optimizations", self.optimizations),
            ("eager check", self.eager_check.describe() if self.eager_check else _NO_EAGER_CHECK),
            ("identity model", "yes" if self.is_identity else "no"),
            ("torch version", self.torch_version),
            ("platform", f"{self.aoti.get('AOTI_PLATFORM', '')} {self.aoti.get('AOTI_MACHINE', '')}"),
            ("cpu target", self.cpu_target or "native (not recorded)"),
            ("cpu isa", self.aoti.get("AOTI_CPU_ISA", "")),
            ("compute capability", self.aoti.get("AOTI_COMPUTE_CAPABILITY", "")),
        ]
        if self.onnx_mode:
            rows.append(("onnx mode", self.onnx_mode))
        if self.inductor_configs:
            settings = (f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in sorted(self.inductor_configs.items()))
            rows.append(("inductor configs", ", ".join(settings)))
        return rows

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for inspect --json: the document, plus AOTI's entries."""
        document = self.to_document()
        document["schema_version"] = self.schema_version
        return {**document, "aoti": self.aoti}

    @classmethod
    def from_metadata(cls, metadata: dict[str, str], path: object = "the package") -> "PackageSpec":
        """Parse the spec from a package's metadata entries: the JSON document, else
        the legacy entries through ``legacy_document``.

        Raises:
            SpecError: no spec, a malformed one, or an unsupported schema version.
        """
        aoti = {k: v for k, v in metadata.items() if not k.startswith(LEGACY_PREFIX)}
        if SPEC_KEY in metadata:
            try:
                document = parse_json_limited(metadata[SPEC_KEY], parse_constant=_reject_constant)
            except ValueError as error:
                raise _malformed(f"{SPEC_KEY} is not valid JSON ({error})") from None
        elif LEGACY_PREFIX + "inputs" in metadata:
            document = legacy_document(metadata)
        else:
            raise SpecError(
                f"package {path} has no aoti_deploy spec (no '{SPEC_KEY}' entry), so its inputs cannot be "
                "validated.\nCreate the package with export_compile, which records it.",
                kind="missing",
            )
        spec = parse_document(document)
        spec.aoti = aoti
        return spec


def _reject_constant(name: str) -> None:
    # Python's json reads NaN and Infinity, which JSON (and nlohmann-json) does not.
    raise ValueError(f"{name} is not JSON")


def _malformed(detail: str) -> SpecError:
    return SpecError(f"package metadata is malformed: {detail}. {_REEXPORT}", kind="malformed")


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _int(value: Any, where: str, low: int = 0) -> int:
    # bool is an int in Python, not in JSON; floats (1.0) are not ints either.
    if type(value) is not int or not low <= value <= INT64_MAX:
        raise _malformed(f"{where}: expected an integer >= {low}, got {json.dumps(value)}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _malformed(f"{where}: expected a string, got {_type_name(value)}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise _malformed(f"{where}: expected an array, got {_type_name(value)}")
    return value


def _qualified(value: Any, where: str) -> str:
    name = _str(value, where)
    namespace, sep, rest = name.partition("::")
    if not sep or not namespace or not rest:
        raise _malformed(f"{where}: expected a qualified name 'namespace::name', got {json.dumps(name)}")
    return name


def _tolerance(value: Any, where: str) -> Tolerance:
    if not isinstance(value, dict):
        raise _malformed(f"{where}: expected an object, got {_type_name(value)}")
    rule = value.get("rule")
    if rule not in RULES:
        raise _malformed(f"{where}.rule: expected one of {', '.join(RULES)}, got {json.dumps(rule)}")
    max_ulp = _int(value.get("max_ulp", 0), f"{where}.max_ulp")
    bounds = []
    for key in ("rtol", "atol"):
        bound = value.get(key)
        if bound is not None and (type(bound) not in (int, float) or not 0 <= bound < float("inf")):
            raise _malformed(f"{where}.{key}: expected a finite number >= 0 or null, got {json.dumps(bound)}")
        try:
            bounds.append(None if bound is None else float(bound))
        except OverflowError:  # an integer past float's range
            raise _malformed(f"{where}.{key}: expected a finite number >= 0 or null, got {json.dumps(bound)}") from None
    if (bounds[0] is None) != (bounds[1] is None):
        raise _malformed(f"{where}: rtol and atol are both numbers or both null")
    if rule == ULP and max_ulp == 0:
        raise _malformed(f"{where}: the ulp rule needs max_ulp >= 1 (0 is the bitwise rule)")
    return Tolerance(rule, max_ulp if rule == ULP else 0, *(bounds if rule == CLOSE else (None, None)))


def _tensor_specs(value: Any, key: str, version: int) -> list[TensorSpec]:
    """The ``inputs`` or ``outputs`` entry (``key``): one object per tensor, with a
    known dtype and dims of non-empty [min, max] ranges. ``"max": null`` (schema 3) is
    unbounded, and so is INT64_MAX: what version-2 writers recorded for int_oo."""
    specs = []
    for i, item in enumerate(_list(value, key)):
        where = f"{key}[{i}]"
        if not isinstance(item, dict):
            raise _malformed(f"{where}: expected an object, got {_type_name(item)}")
        dtype = _str(item.get("dtype"), f"{where}.dtype")
        if dtype not in NAMES:
            raise _malformed(f"{where}.dtype: unknown dtype {json.dumps(dtype)}")
        dims = []
        for d, dim in enumerate(_list(item.get("dims"), f"{where}.dims")):
            if not isinstance(dim, dict):
                raise _malformed(f"{where}.dims[{d}]: expected an object, got {_type_name(dim)}")
            low = _int(dim.get("min"), f"{where}.dims[{d}].min")
            if "max" in dim and dim["max"] is None:
                if version < UNBOUNDED_SCHEMA_VERSION:
                    raise _malformed(
                        f"{where}.dims[{d}].max: null (unbounded) needs schema_version {UNBOUNDED_SCHEMA_VERSION}, "
                        f"but the spec is version {version}"
                    )
                high = None
            else:
                high = _int(dim.get("max"), f"{where}.dims[{d}].max")
                if high == INT64_MAX:
                    high = None
            if high is not None and low > high:
                raise _malformed(f"{where}.dims[{d}]: the range {low}..{high} is empty")
            dims.append(DimSpec(low, high))
        values = None if item.get("values") is None else _value_range(item["values"], dtype, f"{where}.values")
        name = _tensor_name(item["name"], f"{where}.name") if "name" in item else ""
        specs.append(TensorSpec(tuple(dims), dtype, values, name))
    _check_names(specs, key)
    return specs


def _tensor_name(value: Any, where: str) -> str:
    """A tensor's ``name``: a string matching TENSOR_NAME, of TENSOR_NAME_LIMIT
    characters at most."""
    name = _str(value, where)
    # The characters first: then every name measured is ASCII, one byte per character
    # in C++ as here.
    if not TENSOR_NAME.fullmatch(name):
        shown = json.dumps(name, ensure_ascii=False)  # cut as the C++ parser's brief_json cuts it
        raise _malformed(
            f"{where}: expected a name of ASCII letters, digits, '_' and '.' that does not start with a digit or "
            f"'.', got {shown[:80] + '...' if len(shown) > 80 else shown}"
        )
    if len(name) > TENSOR_NAME_LIMIT:
        raise _malformed(f"{where}: a name has at most {TENSOR_NAME_LIMIT} characters, got {len(name)}")
    return name


def _check_names(specs: list[TensorSpec], key: str) -> None:
    """Names on every entry of ``key`` or on none, and no name twice."""
    named = [i for i, spec in enumerate(specs) if spec.name]
    if named and len(named) != len(specs):
        unnamed = next(i for i, spec in enumerate(specs) if not spec.name)
        raise _malformed(f"{key}[{unnamed}]: has no name, but {key}[{named[0]}] has one (name every entry or none)")
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if spec.name in seen:
            raise _malformed(f"{key}[{i}].name: {json.dumps(spec.name)} is also {key}[{seen[spec.name]}]'s name")
        if spec.name:
            seen[spec.name] = i


def _value_range(value: Any, dtype: str, where: str) -> ValueRange:
    """An input's ``values`` entry: integers min <= max that the input's (integer)
    dtype holds, and a string ``why``."""
    if not isinstance(value, dict):
        raise _malformed(f"{where}: expected an object, got {_type_name(value)}")
    if dtype not in VALUE_DTYPES:
        raise _malformed(f"{where}: a value range applies to an integer input ({', '.join(VALUE_DTYPES)}), got {dtype}")
    bounds = []
    for key in ("min", "max"):
        bound = value.get(key)
        if type(bound) is not int or not -(2**63) <= bound <= INT64_MAX:
            raise _malformed(f"{where}.{key}: expected a 64-bit integer, got {json.dumps(bound)}")
        bounds.append(bound)
    low, high = bounds
    if low > high:
        raise _malformed(f"{where}: the range {low}..{high} is empty")
    lowest, highest = VALUE_DTYPES[dtype]
    if low < lowest or high > highest:
        raise _malformed(f"{where}: the range {low}..{high} does not fit {dtype}")
    why = value.get("why")
    return ValueRange(low, high, "" if why is None else _str(why, f"{where}.why"))


def _constant_inputs(value: Any) -> list[dict[str, Any]]:
    """The ``constant_inputs`` entry: objects with a string ``name``, an integer
    ``index`` and a JSON scalar ``value`` (or an array of them). Only the Python
    runtime reads it: the C++ runners take the package's tensors only."""
    constants = []
    for k, item in enumerate(_list(value, "constant_inputs")):
        where = f"constant_inputs[{k}]"
        if not isinstance(item, dict):
            raise _malformed(f"{where}: expected an object, got {_type_name(item)}")
        scalar = item.get("value")
        if isinstance(scalar, (dict, list)):
            raise _malformed(f"{where}.value: expected a number, boolean, string or null, got {_type_name(scalar)}")
        constants.append({"name": _str(item.get("name"), f"{where}.name"), "index": _int(item.get("index"), f"{where}.index"),
                          "value": scalar})
    return constants


def _inductor_configs(value: Any) -> dict[str, bool | int | str]:
    """The ``inductor_configs`` entry: an object of non-empty keys whose values are
    booleans, 64-bit integers or strings (as the C++ reader takes them)."""
    if not isinstance(value, dict):
        raise _malformed(f"inductor_configs: expected an object, got {_type_name(value)}")
    configs: dict[str, bool | int | str] = {}
    for key, setting in value.items():
        if not key:
            raise _malformed("inductor_configs: a key is empty")
        integer = type(setting) is int and -(2**63) <= setting <= INT64_MAX
        if not (type(setting) in (bool, str) or integer):
            raise _malformed(f"inductor_configs.{key}: expected a boolean, integer or string, got {json.dumps(setting)}")
        configs[key] = setting
    return configs


def parse_document(document: Any) -> PackageSpec:
    """Validate a spec document and build the PackageSpec. Unknown keys are ignored
    (a newer minor addition); every known key is checked for type and consistency.

    Raises:
        SpecError: kind "malformed" or "unsupported_version".
    """
    if not isinstance(document, dict):
        raise _malformed(f"the spec must be a JSON object, got {_type_name(document)}")
    version = _int(document.get("schema_version"), "schema_version", low=1)
    if version > SCHEMA_VERSION:
        raise SpecError(
            f"the package spec has schema version {version}, but this toolkit reads versions up to "
            f"{SCHEMA_VERSION}. Upgrade the toolkit, or re-export the package with this one.",
            kind="unsupported_version",
        )
    if "inputs" not in document:
        raise _malformed("the spec has no 'inputs'")

    def get(key: str, default: Any) -> Any:
        return document[key] if key in document else default

    inputs = _tensor_specs(document["inputs"], "inputs", version)
    outputs = _tensor_specs(get("outputs", []), "outputs", version)

    shapes = []
    raw_shapes = _list(get("example_shapes", []), "example_shapes")
    if raw_shapes and len(raw_shapes) != len(inputs):
        raise _malformed(f"example_shapes: {len(raw_shapes)} shape(s) for {len(inputs)} input(s)")
    for i, raw in enumerate(raw_shapes):
        shape = tuple(_int(size, f"example_shapes[{i}][{d}]") for d, size in enumerate(_list(raw, f"example_shapes[{i}]")))
        dims = inputs[i].dims
        if len(shape) != len(dims) or any(not dim.contains(size) for size, dim in zip(shape, dims)):
            raise _malformed(f"example_shapes[{i}]: {list(shape)} does not fit input {i}'s {inputs[i].shape_str()}")
        shapes.append(shape)

    groups = []
    for g, raw_group in enumerate(_list(get("shared_dims", []), "shared_dims")):
        group = []
        for p, position in enumerate(_list(raw_group, f"shared_dims[{g}]")):
            where = f"shared_dims[{g}][{p}]"
            pair = _list(position, where)
            if len(pair) != 2:
                raise _malformed(f"{where}: expected [input, dim], got {json.dumps(pair)}")
            i, d = _int(pair[0], f"{where}[0]"), _int(pair[1], f"{where}[1]")
            if i >= len(inputs) or d >= len(inputs[i].dims):
                raise _malformed(f"{where}: input {i} dim {d} is not an input dim")
            group.append((i, d))
        if len(group) < 2:
            raise _malformed(f"shared_dims[{g}]: a group needs two or more positions, got {len(group)}")
        groups.append(group)

    ops = []
    for k, op in enumerate(_list(get("required_ops", []), "required_ops")):
        where = f"required_ops[{k}]"
        if not isinstance(op, dict):
            raise _malformed(f"{where}: expected an object, got {_type_name(op)}")
        overload = op.get("overload")
        ops.append(OpRef(_qualified(op.get("name"), f"{where}.name"), None if overload is None else _str(overload, f"{where}.overload")))

    def strings(key: str, qualified: bool = False) -> list[str]:
        check = _qualified if qualified else _str
        return [check(value, f"{key}[{k}]") for k, value in enumerate(_list(get(key, []), key))]

    namespaces = get("op_library_namespaces", {})
    if not isinstance(namespaces, dict):
        raise _malformed(f"op_library_namespaces: expected an object, got {_type_name(namespaces)}")
    library_namespaces = {
        library: [_str(name, f"op_library_namespaces.{library}[{k}]") for k, name in
                  enumerate(_list(names, f"op_library_namespaces.{library}"))]
        for library, names in namespaces.items()
    }

    is_identity = get("is_identity", False)
    if not isinstance(is_identity, bool):
        raise _malformed(f"is_identity: expected a boolean, got {_type_name(is_identity)}")
    return PackageSpec(
        inputs=inputs,
        outputs=outputs,
        device=_str(get("device", "cpu"), "device"),
        required_ops=ops,
        required_classes=strings("required_classes", qualified=True),
        op_libraries=strings("op_libraries"),
        op_library_namespaces=library_namespaces,
        is_identity=is_identity,
        torch_version=_str(get("torch_version", "unknown"), "torch_version"),
        example_shapes=shapes,
        cpu_flags=strings("cpu_flags"),
        cpu_target=_str(get("cpu_target", ""), "cpu_target"),
        python_only_ops=strings("python_only_ops", qualified=True),
        fake_modules=strings("fake_modules"),
        optimizations=_str(get("optimizations", ""), "optimizations"),
        shared_dims=groups,
        cache_key=_str(get("cache_key", ""), "cache_key"),
        verified=_list(get("verified", []), "verified"),
        onnx_mode=_str(get("onnx_mode", ""), "onnx_mode"),
        eager_check=None if get("eager_check", None) is None else _tolerance(document["eager_check"], "eager_check"),
        constant_inputs=_constant_inputs(get("constant_inputs", [])),
        inductor_configs=_inductor_configs(get("inductor_configs", {})),
        schema_version=version,
    )


# The legacy grammar: sizes are plain decimal digits, nothing else ("1_0", " 3",
# "+3" and empty parts are malformed), so both converters read it alike.
_SIZE = re.compile(r"^[0-9]+$")


def _legacy_int(text: str, where: str) -> int:
    if not _SIZE.match(text):
        raise _malformed(f"{where}: expected a non-negative integer, got {json.dumps(text)}")
    return int(text)


def _legacy_split(text: str, sep: str) -> list[str]:
    """"" -> []; otherwise every part, empty ones included (the caller refuses them)."""
    return text.split(sep) if text else []


def legacy_document(metadata: dict[str, str]) -> dict[str, Any]:
    """Convert the ``aoti_deploy.*`` entries of a package written before the spec
    document (schema 1) into a document. Strict: a part the old writer could not
    have written is malformed.

    Raises:
        SpecError: kind "malformed".
    """

    def get(key: str, default: str = "") -> str:
        return metadata.get(LEGACY_PREFIX + key, default)

    def names(key: str) -> list[str]:
        parts = _legacy_split(get(key), ",")
        if any(not part for part in parts):
            raise _malformed(f"{LEGACY_PREFIX}{key}: empty entry in {json.dumps(get(key))}")
        return parts

    inputs = []
    for text in _legacy_split(get("inputs"), ";"):
        dtype, colon, dims_text = text.partition(":")
        if not colon or not dtype:
            raise _malformed(f"{LEGACY_PREFIX}inputs: input spec {json.dumps(text)} has no dtype")
        dims = []
        for dim in _legacy_split(dims_text, ","):
            low, dots, high = dim.partition("..")
            where = f"{LEGACY_PREFIX}inputs: input spec {json.dumps(text)}"
            dims.append({"min": _legacy_int(low, where), "max": _legacy_int(high if dots else low, where)})
        inputs.append({"dtype": dtype, "dims": dims})

    # The old writer joined shapes with ";" and sizes with ",", so a 0-d input's shape
    # is an empty part: keep empty parts when they give one shape per input.
    # An empty entry with no 0-d input means no shapes were recorded.
    shapes_text = get("example_shapes")
    parts = shapes_text.split(";")
    if not shapes_text and all(item["dims"] for item in inputs):
        shapes = []
    elif len(parts) == len(inputs):
        shapes = [
            [_legacy_int(size, f"{LEGACY_PREFIX}example_shapes") for size in _legacy_split(part, ",")] for part in parts
        ]
    else:
        raise _malformed(f"{LEGACY_PREFIX}example_shapes: {len(parts)} shape(s) for {len(inputs)} input(s)")

    groups = []
    for group in _legacy_split(get("shared_dims"), ";"):
        positions = []
        for position in group.split(","):
            i, dot, d = position.partition(".")
            where = f"{LEGACY_PREFIX}shared_dims"
            if not dot:
                raise _malformed(f"{where}: expected INPUT.DIM, got {json.dumps(position)}")
            positions.append([_legacy_int(i, where), _legacy_int(d, where)])
        groups.append(positions)

    verified_text = get("verified")
    try:
        verified = json.loads(verified_text) if verified_text else []
    except ValueError:
        verified = []  # only the cache reads it; a bad entry is a cache miss
    return {
        "schema_version": 1,
        "inputs": inputs,
        "example_shapes": shapes,
        "shared_dims": groups,
        "device": get("device", "cpu"),
        # Schema 1 recorded no overloads: any overload of the name satisfies the check.
        "required_ops": [{"name": name} for name in names("required_ops")],
        "required_classes": names("required_classes"),
        "python_only_ops": names("python_only_ops"),
        "op_libraries": names("op_libraries"),
        "fake_modules": names("fake_modules"),
        "is_identity": get("is_identity") == "1",
        "torch_version": get("torch_version", "unknown"),
        "cpu_flags": get("cpu_flags").split(),
        "optimizations": get("optimizations"),
        "cache_key": get("cache_key"),
        "verified": verified if isinstance(verified, list) else [],
        "onnx_mode": get("onnx_mode"),
    }
