"""The export_compile job as one function: load ops, build the IdentityModel,
export, compile, then verify the package against eager bit-for-bit. Stages report
progress through an optional callback and never print."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .compile import compile_package
from .errors import ExportError, InputError
from .export import GraphCalls, export_model, graph_calls
from .model import IdentityModel
from .ops import LIBRARY_NAME, load_op_library
from .package import DTYPES, PackageSpec, TensorSpec, read_package_spec
from .runtime import load_package
from .verify import BitReport, compare_bits

STAGES = ("load op library", "build model", "export", "compile", "verify")


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


@dataclass
class BuildResult:
    package_path: Path
    spec: PackageSpec
    calls: GraphCalls
    graph: str
    example_input: torch.Tensor
    eager_output: torch.Tensor
    package_output: torch.Tensor
    report: BitReport
    op_library: Path
    timings: dict[str, float] = field(default_factory=dict)


def example_input(config: BuildConfig) -> torch.Tensor:
    """The seeded random input the package is exported and verified with."""
    if config.dtype not in DTYPES:
        raise InputError(f"unsupported dtype {config.dtype!r}; expected one of {', '.join(DTYPES)}")
    generator = torch.Generator().manual_seed(config.seed)
    shape = (config.batch, config.channels, config.height, config.width)
    return torch.randn(shape, generator=generator).to(DTYPES[config.dtype]).to(config.device)


def export_and_compile(config: BuildConfig, on_stage: Callable[[str], None] | None = None) -> BuildResult:
    """Run every stage of export_compile.

    Args:
        config: what to build.
        on_stage: called with each stage's name (from STAGES) as it starts.

    Returns:
        The BuildResult. ``report.identical`` says whether the package's output
        bits equal eager's; the caller decides what a difference means.

    Raises:
        OpLibraryError, ExportError, CompileError, PackageError, InputError: from
        the stages.
    """
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
        model = IdentityModel(config.channels).to(device=config.device, dtype=DTYPES[config.dtype]).eval()
        x = example_input(config)

    with stage("export"):
        with torch.no_grad():
            eager = model(x)
        program = export_model(model, (x,))
        calls = graph_calls(program)
        if "my_ops::IdentityConvClass" not in calls.classes or "my_ops::identity_conv_op" not in calls.ops:
            raise ExportError(
                f"the exported graph lost a custom layer: it calls ops {calls.ops} and classes "
                f"{calls.classes}, expected my_ops::identity_conv_op and my_ops::IdentityConvClass"
            )

    with stage("compile"):
        spec = PackageSpec(
            inputs=[TensorSpec.of(x)],
            device=config.device,
            required_ops=calls.ops,
            required_classes=calls.classes,
            op_libraries=[LIBRARY_NAME],
            is_identity=IdentityModel.is_identity,
        )
        package_path = compile_package(program, config.output, spec)

    with stage("verify"):
        spec = read_package_spec(package_path)
        (package_output,) = load_package(package_path, spec).run([x])
        report = compare_bits(package_output, eager)

    return BuildResult(
        package_path=package_path,
        spec=spec,
        calls=calls,
        graph=str(program.graph),
        example_input=x,
        eager_output=eager,
        package_output=package_output,
        report=report,
        op_library=library,
        timings=timings,
    )
