"""The export_compile job as one function: load ops, build the IdentityModel,
export (static or with dynamic dims), compile, then verify the package against
eager bit-for-bit. Stages report progress through an optional callback and never
print."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .compile import compile_package
from .errors import ExportError, InputError
from .host import instruction_set_flags
from .export import GraphCalls, export_model, graph_calls, input_specs
from .model import MODEL_VARIANTS, IdentityModel, IdentityOutModel
from .ops import LIBRARY_NAME, load_op_library
from .package import DTYPES, PackageSpec, read_package_spec
from .runtime import load_package
from .verify import BitReport, compare_bits

STAGES = ("load op library", "build model", "export", "compile", "verify")

# Input dims of the IdentityModel that may be dynamic, and their position in NCHW.
DYNAMIC_DIMS = {"batch": 0, "height": 2, "width": 3}
DEFAULT_RANGES = {"batch": (1, 64), "height": (1, 1024), "width": (1, 1024)}


@dataclass
class BuildConfig:
    channels: int = 3
    batch: int = 1
    height: int = 224
    width: int = 224
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    output: Path = Path("artifacts/model.pt2")
    op_lib: Path | None = None
    # Names from DYNAMIC_DIMS, and their inclusive (min, max) ranges.
    dynamic: tuple[str, ...] = ()
    ranges: dict[str, tuple[int, int]] = field(default_factory=lambda: dict(DEFAULT_RANGES))
    # "functional" (layer3 is identity_conv_op) or "out" (layer3 is identity_conv_op_out).
    variant: str = "functional"

    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.channels, self.height, self.width)

    def export_shape(self) -> tuple[int, ...]:
        """The shape to trace with. torch.export specialises a dim whose example
        size is 1, so a dynamic dim of size 1 is traced at 2 (the range keeps 1)."""
        shape = list(self.shape())
        for name in self.dynamic:
            if shape[DYNAMIC_DIMS[name]] == 1:
                shape[DYNAMIC_DIMS[name]] = 2
        return tuple(shape)

    def check(self) -> None:
        """Raise InputError for a dtype, dynamic dim or range that cannot work."""
        if self.dtype not in DTYPES:
            raise InputError(f"unsupported dtype {self.dtype!r}; expected one of {', '.join(DTYPES)}")
        if self.variant not in MODEL_VARIANTS:
            raise InputError(f"unknown model variant {self.variant!r}; expected one of {', '.join(MODEL_VARIANTS)}")
        for name in self.dynamic:
            if name not in DYNAMIC_DIMS:
                raise InputError(f"cannot make {name!r} dynamic; choose from {', '.join(DYNAMIC_DIMS)}")
            low, high = self.ranges[name]
            size = self.shape()[DYNAMIC_DIMS[name]]
            if not 1 <= low < high:
                raise InputError(f"--{name}-range {low}:{high} holds fewer than two sizes; expected 1 <= MIN < MAX")
            if not low <= size <= high:
                raise InputError(
                    f"--{name} {size} is outside --{name}-range {low}:{high}; the example input must lie in the range"
                )


@dataclass
class BuildResult:
    package_path: Path
    spec: PackageSpec
    calls: GraphCalls
    graph: str
    example_input: torch.Tensor
    # (what was compared, its report), e.g. ("eager vs package [1, 3, 224, 224]", ...)
    checks: list[tuple[str, BitReport]]
    op_library: Path
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(report.identical for _, report in self.checks)


def seeded_input(shape: tuple[int, ...], dtype: str, device: str, seed: int) -> torch.Tensor:
    """A standard-normal tensor, drawn in float32 on the CPU so every dtype and
    device sees the same values for a seed."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator).to(DTYPES[dtype]).to(device)


def second_shape(config: BuildConfig) -> tuple[int, ...] | None:
    """Another shape in the dynamic range, to prove the package is not specialised
    to the example: each dynamic dim at its minimum (or one above the example)."""
    if not config.dynamic:
        return None
    shape = list(config.shape())
    for name in config.dynamic:
        low, high = config.ranges[name]
        index = DYNAMIC_DIMS[name]
        shape[index] = low if low != shape[index] else min(shape[index] + 1, high)
    return tuple(shape) if tuple(shape) != config.shape() else None


def export_and_compile(
    config: BuildConfig,
    on_stage: Callable[[str], None] | None = None,
    model: IdentityModel | None = None,
) -> BuildResult:
    """Run every stage of export_compile.

    Args:
        config: what to build.
        on_stage: called with each stage's name (from STAGES) as it starts.
        model: an already built (e.g. trained) model to export instead of a new one
            of ``config.variant``; it is an identity only if its ``is_identity`` says so.

    Returns:
        The BuildResult. ``passed`` says whether the package's output bits equal
        eager's at every checked shape; the caller decides what a difference means.

    Raises:
        OpLibraryError, ExportError, CompileError, PackageError, InputError: from
        the stages.
    """
    config.check()
    timings: dict[str, float] = {}

    @contextmanager
    def stage(name: str) -> Iterator[None]:
        if on_stage:
            on_stage(name)
        start = time.perf_counter()
        yield
        timings[name] = time.perf_counter() - start

    with stage("load op library"):
        library = load_op_library(config.op_lib)

    with stage("build model"):
        if model is None:
            model = MODEL_VARIANTS[config.variant](config.channels)
        model = model.to(device=config.device, dtype=DTYPES[config.dtype]).eval()
        x = seeded_input(config.shape(), config.dtype, config.device, config.seed)

    with stage("export"):
        dynamic_dims = {DYNAMIC_DIMS[name]: (name, *config.ranges[name]) for name in config.dynamic}
        traced = x if config.export_shape() == config.shape() else seeded_input(
            config.export_shape(), config.dtype, config.device, config.seed
        )
        # Packages are for inference: tracing without autograd keeps the graph free of
        # training-only state (and lets out= ops, which refuse autograd, export).
        with torch.no_grad():
            program = export_model(model, (traced,), dynamic_dims)
        calls = graph_calls(program)
        custom_op = "my_ops::identity_conv_op_out" if isinstance(model, IdentityOutModel) else "my_ops::identity_conv_op"
        if "my_ops::IdentityConvClass" not in calls.classes or custom_op not in calls.ops:
            raise ExportError(
                f"the exported graph lost a custom layer: it calls ops {calls.ops} and classes "
                f"{calls.classes}, expected {custom_op} and my_ops::IdentityConvClass"
            )

    with stage("compile"):
        spec = PackageSpec(
            inputs=input_specs(program),
            device=config.device,
            required_ops=calls.ops,
            required_classes=calls.classes,
            op_libraries=[LIBRARY_NAME],
            is_identity=bool(getattr(model, "is_identity", False)),
            example_shapes=[config.shape()],
            cpu_flags=instruction_set_flags(),
        )
        package_path = compile_package(program, config.output, spec)

    with stage("verify"):
        spec = read_package_spec(package_path)
        package = load_package(package_path, spec)
        checks = []
        shapes = [config.shape()] + ([s] if (s := second_shape(config)) else [])
        for i, shape in enumerate(shapes):
            xi = x if i == 0 else seeded_input(shape, config.dtype, config.device, config.seed + i)
            with torch.no_grad():
                eager = model(xi)
            (package_output,) = package.run([xi])
            checks.append((f"eager vs package {list(shape)}", compare_bits(package_output, eager)))

    return BuildResult(
        package_path=package_path,
        spec=spec,
        calls=calls,
        graph=str(program.graph),
        example_input=x,
        checks=checks,
        op_library=library,
        timings=timings,
    )
