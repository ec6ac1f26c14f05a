"""The package spec: what a package needs and accepts, recorded by export_compile as
one versioned JSON document under one metadata key (``aoti_deploy.spec``) and read
back, without loading the package, by every runtime.

cpp_runtime/core/package_spec.cpp parses the same document with nlohmann-json; the
vectors in tests/contract/spec_vectors.json pin both parsers to one verdict per
document, well-formed or not. Packages written before the document existed carry
``aoti_deploy.*`` entries instead; ``legacy_document`` converts them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .json_text import parse_json_limited
from .spec_fields import (
    constant_inputs_of,
    inductor_configs_of,
    describe_quantization,
    quantization_of,
    tuning_of,
    int_of,
    list_of,
    qualified_of,
    reject_constant,
    str_of,
    tensor_specs_of,
    tolerance_of,
    type_name_of,
)
from .spec_legacy import legacy_document
# The spec's vocabulary and types: most of the toolkit reads them from here.
from .spec_types import (  # noqa: F401
    BITWISE, CLOSE, INT64_MAX, LEGACY_PREFIX, RULES, SCHEMA_VERSION, SPEC_KEY, TENSOR_NAME, TENSOR_NAME_LIMIT,
    ULP, UNBOUNDED_SCHEMA_VERSION, VALUE_DTYPES, OUTPUT_KINDS, SCALAR_DTYPES, TENSOR_KIND, DimSpec, OpRef, SpecError, TensorSpec, Tolerance, ValueRange,
    fmt, malformed, tensor_label, tensor_names,
)

# What the runners do for a package from before the eager check was recorded.
_NO_EAGER_CHECK = "not recorded (--expected compares bitwise; --eager-reference uses torch.testing's defaults)"


@dataclass
class PackageSpec:
    """The facts export_compile records so a runner can check before it runs."""

    inputs: list[TensorSpec]
    device: str = "cpu"
    # The flat outputs (pytree order), for serving configs that declare them; a Python
    # int, float or bool the model returns is a 0-d tensor with its ``kind``. Empty when
    # not recorded: packages from before, or an output that is neither (None, a string).
    outputs: list[TensorSpec] = field(default_factory=list)
    # True when the model returns its outputs by name (a dict, or a ModelOutput), so
    # the recorded output names are its keys (key paths, for values nested deeper):
    # the runners then print and write the outputs by these names. False (not
    # written) for a tensor, a tuple, and packages from before it was recorded.
    outputs_by_name: bool = False
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
    # The intra-op thread count the package was compiled (and its weights laid out)
    # for; 0 in packages from before it was recorded, and in CUDA packages and ONNX files.
    intra_op_threads: int = 0
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
    # An export with optimize="tune": each candidate's {"name", "inductor_configs",
    # "p50_us" (null when it was not timed), "result"}, in the order tried. Read by
    # inspect; the C++ reader checks its form as this one does, and uses nothing else of it.
    tuning: list[dict[str, Any]] = field(default_factory=list)
    # An int8 export (quantize=): its mode, calibration calls, the quantized graph's
    # convolutions and linears against the int8 kernels in the compiled code, and its
    # drift from the fp32 model (spec_fields.quantization_of). Read by inspect.
    quantization: dict[str, Any] = field(default_factory=dict)
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
            # Only when true (as cpu_target): older readers ignore the key.
            **({"outputs_by_name": True} if self.outputs_by_name else {}),
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
            **({"intra_op_threads": self.intra_op_threads} if self.intra_op_threads else {}),
            "optimizations": self.optimizations,
            "cache_key": self.cache_key,
            "verified": self.verified,
            "onnx_mode": self.onnx_mode,
            **({} if self.eager_check is None else {"eager_check": self.eager_check.to_document()}),
            **({"constant_inputs": list(self.constant_inputs)} if self.constant_inputs else {}),
            **({"inductor_configs": dict(self.inductor_configs)} if self.inductor_configs else {}),
            **({"tuning": [dict(row) for row in self.tuning]} if self.tuning else {}),
            **({"quantization": dict(self.quantization)} if self.quantization else {}),
        }

    def named_outputs(self, count: int) -> list[str]:
        """The output names to print and write ``count`` outputs by: the recorded
        names when the model returns its outputs by name and ``count`` is their
        number, else [] (index them)."""
        return [t.name for t in self.outputs] if self.outputs_by_name and count == len(self.outputs) else []

    def to_metadata(self) -> dict[str, str]:
        """The package metadata entries: the document under SPEC_KEY."""
        return {SPEC_KEY: json.dumps(self.to_document(), sort_keys=True)}

    def describe(self) -> list[tuple[str, str]]:
        """The facts inspect prints, in the same order and words as aoti_runner --inspect."""
        rows = [
            (f"{name}[{i}]", (f"{spec.name}  " if spec.name else "") + spec.describe())
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
            ("intra-op threads", str(self.intra_op_threads) if self.intra_op_threads else "not recorded"),
            ("cpu isa", self.aoti.get("AOTI_CPU_ISA", "")),
            ("compute capability", self.aoti.get("AOTI_COMPUTE_CAPABILITY", "")),
        ]
        if self.onnx_mode:
            rows.append(("onnx mode", self.onnx_mode))
        if self.inductor_configs:
            settings = (f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in sorted(self.inductor_configs.items()))
            rows.append(("inductor configs", ", ".join(settings)))
        for row in self.tuning:
            timed = f"p50 {row['p50_us']:.0f} µs" if row["p50_us"] is not None else "not timed"
            rows.append((f"tuning: {row['name']}", f"{timed}; {row['result']}"))
        if self.quantization:
            rows.append(("quantization", describe_quantization(self.quantization)))
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
                document = parse_json_limited(metadata[SPEC_KEY], parse_constant=reject_constant)
            except ValueError as error:
                raise malformed(f"{SPEC_KEY} is not valid JSON ({error})") from None
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



def parse_document(document: Any) -> PackageSpec:
    """Validate a spec document and build the PackageSpec. Unknown keys are ignored
    (a newer minor addition); every known key is checked for type and consistency.

    Raises:
        SpecError: kind "malformed" or "unsupported_version".
    """
    if not isinstance(document, dict):
        raise malformed(f"the spec must be a JSON object, got {type_name_of(document)}")
    version = int_of(document.get("schema_version"), "schema_version", low=1)
    if version > SCHEMA_VERSION:
        raise SpecError(
            f"the package spec has schema version {version}, but this toolkit reads versions up to "
            f"{SCHEMA_VERSION}. Upgrade the toolkit, or re-export the package with this one.",
            kind="unsupported_version",
        )
    if "inputs" not in document:
        raise malformed("the spec has no 'inputs'")

    def get(key: str, default: Any) -> Any:
        return document[key] if key in document else default

    inputs = tensor_specs_of(document["inputs"], "inputs", version)
    outputs = tensor_specs_of(get("outputs", []), "outputs", version)

    shapes = []
    raw_shapes = list_of(get("example_shapes", []), "example_shapes")
    if raw_shapes and len(raw_shapes) != len(inputs):
        raise malformed(f"example_shapes: {len(raw_shapes)} shape(s) for {len(inputs)} input(s)")
    for i, raw in enumerate(raw_shapes):
        shape = tuple(int_of(size, f"example_shapes[{i}][{d}]") for d, size in enumerate(list_of(raw, f"example_shapes[{i}]")))
        dims = inputs[i].dims
        if len(shape) != len(dims) or any(not dim.contains(size) for size, dim in zip(shape, dims)):
            raise malformed(f"example_shapes[{i}]: {list(shape)} does not fit input {i}'s {inputs[i].shape_str()}")
        shapes.append(shape)

    groups = []
    for g, raw_group in enumerate(list_of(get("shared_dims", []), "shared_dims")):
        group = []
        for p, position in enumerate(list_of(raw_group, f"shared_dims[{g}]")):
            where = f"shared_dims[{g}][{p}]"
            pair = list_of(position, where)
            if len(pair) != 2:
                raise malformed(f"{where}: expected [input, dim], got {json.dumps(pair)}")
            i, d = int_of(pair[0], f"{where}[0]"), int_of(pair[1], f"{where}[1]")
            if i >= len(inputs) or d >= len(inputs[i].dims):
                raise malformed(f"{where}: input {i} dim {d} is not an input dim")
            group.append((i, d))
        if len(group) < 2:
            raise malformed(f"shared_dims[{g}]: a group needs two or more positions, got {len(group)}")
        groups.append(group)

    ops = []
    for k, op in enumerate(list_of(get("required_ops", []), "required_ops")):
        where = f"required_ops[{k}]"
        if not isinstance(op, dict):
            raise malformed(f"{where}: expected an object, got {type_name_of(op)}")
        overload = op.get("overload")
        ops.append(OpRef(qualified_of(op.get("name"), f"{where}.name"), None if overload is None else str_of(overload, f"{where}.overload")))

    def strings(key: str, qualified: bool = False) -> list[str]:
        check = qualified_of if qualified else str_of
        return [check(value, f"{key}[{k}]") for k, value in enumerate(list_of(get(key, []), key))]

    namespaces = get("op_library_namespaces", {})
    if not isinstance(namespaces, dict):
        raise malformed(f"op_library_namespaces: expected an object, got {type_name_of(namespaces)}")
    library_namespaces = {
        library: [str_of(name, f"op_library_namespaces.{library}[{k}]") for k, name in
                  enumerate(list_of(names, f"op_library_namespaces.{library}"))]
        for library, names in namespaces.items()
    }

    is_identity = get("is_identity", False)
    if not isinstance(is_identity, bool):
        raise malformed(f"is_identity: expected a boolean, got {type_name_of(is_identity)}")
    by_name = get("outputs_by_name", False)
    if not isinstance(by_name, bool):
        raise malformed(f"outputs_by_name: expected a boolean, got {type_name_of(by_name)}")
    if by_name and not (outputs and outputs[0].name):
        raise malformed("outputs_by_name: true, but the spec records no output names")
    return PackageSpec(
        inputs=inputs,
        outputs=outputs,
        outputs_by_name=by_name,
        device=str_of(get("device", "cpu"), "device"),
        required_ops=ops,
        required_classes=strings("required_classes", qualified=True),
        op_libraries=strings("op_libraries"),
        op_library_namespaces=library_namespaces,
        is_identity=is_identity,
        torch_version=str_of(get("torch_version", "unknown"), "torch_version"),
        example_shapes=shapes,
        cpu_flags=strings("cpu_flags"),
        cpu_target=str_of(get("cpu_target", ""), "cpu_target"),
        intra_op_threads=int_of(document["intra_op_threads"], "intra_op_threads", low=1)
        if "intra_op_threads" in document else 0,
        python_only_ops=strings("python_only_ops", qualified=True),
        fake_modules=strings("fake_modules"),
        optimizations=str_of(get("optimizations", ""), "optimizations"),
        shared_dims=groups,
        cache_key=str_of(get("cache_key", ""), "cache_key"),
        verified=list_of(get("verified", []), "verified"),
        onnx_mode=str_of(get("onnx_mode", ""), "onnx_mode"),
        eager_check=None if get("eager_check", None) is None else tolerance_of(document["eager_check"], "eager_check"),
        constant_inputs=constant_inputs_of(get("constant_inputs", [])),
        inductor_configs=inductor_configs_of(get("inductor_configs", {})),
        tuning=tuning_of(get("tuning", [])),
        quantization=quantization_of(get("quantization", {})),
        schema_version=version,
    )
