"""How to export, compile and check a model: ``ExportOptions``, one public type with
documented defaults, as ``aoti_deploy.export`` takes them. What model to export, and
with which example call, is not an option: see models/example.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..package.host import NATIVE
from ..verify.tolerance import Tolerance

# What an export writes, and how the ONNX target writes custom ops (onnx_export.py).
TARGETS = ("pt2", "onnx")
ONNX_MODES = ("portable", "custom-domain")
# optimize's value that asks for the tuner.
TUNE = "tune"
# The most intra-op threads an export takes: aoti_runner's --intra-op-threads limit, which
# the tuner's timings pass on.
MAX_THREADS = 1024


@dataclass
class ExportOptions:
    """The options of an export. Every field has a default; the defaults make a
    verified ``.pt2`` package for this host's CPU.

    Attributes:
        target: "pt2" (an AOTInductor package for the Python and C++ runners) or
            "onnx" (an ONNX file for onnxruntime, checked there).
        onnx_mode: the ONNX target's "portable" (custom ops become standard ONNX ops)
            or "custom-domain" (custom ops become nodes of their own domain).
        device: "cpu" or "cuda".
        op_libraries: op libraries (``.so`` paths) whose custom ops the model calls;
            loaded first and recorded in the package. None given: the built-in
            IdentityModel loads the project's library, any other model none.
        fake_modules: modules (names) that register fake kernels for those ops;
            imported after the libraries load.
        cpu_target: "native" (this host's every instruction) or a portable x86-64
            level (e.g. "x86-64-v3"); .pt2 only.
        check: compare the package with eager before writing it; with False the
            package records no checks.
        tolerance: the rule against eager: None (bitwise for identity models, else
            torch.testing's defaults per dtype) or a Tolerance; recorded.
        seed: seed of the random inputs of other sizes that prove a dynamic package
            is not specialised to the example.
        input_values: value ranges of integer inputs (tensor input index -> (min,
            max)) where export cannot see them; the runtimes refuse other values.
        allow_python_ops: write a package for the Python runtime only when the graph
            calls ops defined from Python.
        inductor_configs: Inductor settings to compile with (e.g. {"freezing":
            True}); .pt2 only, recorded and verified like everything else.
        optimize: True: export-time graph rewrites that keep eager's bits, and on the
            CPU the speed settings that measured fastest (compiler/speed.py: freezing,
            one-pixel convs as sums, zero pads folded into convs, conv SiLU in Inductor's
            loops), each dropped for a model it breaks; "tune": the same rewrites, then
            compile the candidate settings (compiler/tuner.py), verify each, time each in the
            C++ runner and keep the fastest verified package; False: the graph as
            exported, with Inductor's own defaults.
        tune_budget: seconds the tuner may spend compiling; a candidate not started
            by then is not tried (the first always is). Timing the verified ones
            after takes about 2 s each.
        threads: the intra-op thread count the package will run at (CPU .pt2 only):
            the compile, its checks and the tuner's timings run at it, and the
            package records it. With freezing, oneDNN lays convolution weights out
            for the compile's count, and at another count re-lays some of them out
            on every call (a ResNet-50 ran 2.3x slower). None: this process's count
            (torch.get_num_threads()).
        quantize: None (fp32 as the model is), "int8" (static: weights and
            activations int8, scales from the calibration calls; for convolutional
            models) or "int8-dynamic" (int8 weights, activations quantized per call;
            for linear-heavy models such as transformers). Through torchao's PT2E
            flow (the quant extra); CPU .pt2 packages only. The package is checked
            against the quantized model in eager, and records its drift from fp32.
        precision: "fp32", or "bf16": the model's weights and compute in bfloat16,
            its inputs and outputs in float32 as before (compiler/precision.py);
            only on a host with AVX512-BF16 or AMX-BF16, which the package then
            requires. Checked against the bf16 model in eager; records its drift.
        calibration: the calls the int8 scales are observed on (needed by "int8";
            "int8-dynamic" measures its drift on them): a list, each the model's
            positional args (a tuple, or one tensor), or a dict of keyword args.
        force: rebuild even if the output holds a package built from the same inputs.
        references: a folder to write the example inputs, the package's outputs and
            eager's to (inputs.pt, expected.pt, eager.pt), for the runners' checks; the
            outputs as the runners' --outputs writes them (by name for a model that
            returns a dict).
    """

    target: str = "pt2"
    onnx_mode: str = "portable"
    device: str = "cpu"
    op_libraries: list[Path] = field(default_factory=list)
    fake_modules: list[str] = field(default_factory=list)
    cpu_target: str = NATIVE
    check: bool = True
    tolerance: Tolerance | None = None
    seed: int = 0
    input_values: dict[int, tuple[int, int]] = field(default_factory=dict)
    allow_python_ops: bool = False
    inductor_configs: dict[str, Any] = field(default_factory=dict)
    optimize: bool | str = True
    tune_budget: float = 600.0
    threads: int | None = None
    quantize: str | None = None
    precision: str = "fp32"
    calibration: Any = None
    force: bool = False
    references: Path | None = None

    def validate(self, output: Path) -> None:
        """Raise InputError for options that cannot work together, or an output name
        that does not match the target (the runners tell .onnx files from .pt2
        packages by the suffix). Normalises ``inductor_configs``."""
        from .compile import check_inductor_configs
        from ..package.host import check_cpu_target

        if self.target not in TARGETS:
            raise InputError(f"unknown target {self.target!r}; expected one of {', '.join(TARGETS)}")
        if not (isinstance(self.optimize, bool) or self.optimize == TUNE):
            raise InputError(f"optimize must be True, False or {TUNE!r}; got {self.optimize!r}")
        if self.optimize == TUNE and (self.target != "pt2" or self.device != "cpu"):
            raise InputError(f"optimize={TUNE!r} tunes .pt2 packages for the CPU, but this export's target is "
                             f"{self.target} on {self.device}")
        if not 0 < self.tune_budget < float("inf"):
            raise InputError(f"tune_budget must be a positive number of seconds; got {self.tune_budget!r}")
        if self.threads is not None:
            if isinstance(self.threads, bool) or not isinstance(self.threads, int) or not 1 <= self.threads <= MAX_THREADS:
                raise InputError(f"threads must be an intra-op thread count from 1 to {MAX_THREADS}; got {self.threads!r}")
            if self.target != "pt2" or self.device != "cpu":
                raise InputError(f"threads sets the intra-op thread count a CPU .pt2 package is compiled for, but this "
                                 f"export's target is {self.target} on {self.device}; leave threads out")
        if self.quantize is not None:
            self._validate_quantize()
        elif self.calibration is not None:
            raise InputError("calibration is for quantize='int8' (or 'int8-dynamic'), and this export does not "
                             "quantize: pass quantize too, or drop calibration")
        if self.precision != "fp32":
            self._validate_precision()
        if self.inductor_configs:
            if self.target != "pt2":
                raise InputError("inductor_configs apply to .pt2 packages; an ONNX file is not compiled by Inductor")
            self.inductor_configs = check_inductor_configs(self.inductor_configs)
        is_onnx_name = output.suffix.lower() == ".onnx"
        if self.target == "pt2":
            check_cpu_target(self.cpu_target)
            if is_onnx_name:
                raise InputError(
                    f"package_path {output} names an ONNX file, but the target is a .pt2 package; export with "
                    "target='onnx' for an ONNX file, or name the package *.pt2"
                )
            return
        self._validate_onnx(output, is_onnx_name)

    def intra_op_threads(self) -> int:
        """The intra-op thread count the package is compiled for (``threads``, else
        this process's); 0 for an export that is not a CPU .pt2 package."""
        import torch

        if self.target != "pt2" or self.device != "cpu":
            return 0
        return self.threads or torch.get_num_threads()

    def _validate_quantize(self) -> None:
        from ..package.spec_fields import QUANTIZE_MODES
        from .quantize import require_torchao

        if self.quantize not in QUANTIZE_MODES:
            raise InputError(f"unknown quantize mode {self.quantize!r}; expected one of {', '.join(QUANTIZE_MODES)}")
        if self.target != "pt2" or self.device != "cpu":
            raise InputError(f"quantize makes int8 .pt2 packages for the CPU, but this export's target is "
                             f"{self.target} on {self.device}")
        if self.calibration is not None and not isinstance(self.calibration, (list, tuple)):
            raise InputError(
                "calibration must be a list of calls, each the model's positional args (a tuple, or one tensor) "
                f"or a dict of keyword args; got {type(self.calibration).__name__}. Wrap one batch as [batch]"
            )
        if self.quantize == "int8" and not self.calibration:
            raise InputError("quantize='int8' sets its activation scales from calibration calls, and none were given: "
                             "pass calibration=[args, ...] (a few typical batches; --calibration FILE on the command "
                             "line), or use quantize='int8-dynamic'")
        require_torchao()

    def _validate_precision(self) -> None:
        from .precision import PRECISIONS, bf16_flag

        if self.precision not in PRECISIONS:
            raise InputError(f"unknown precision {self.precision!r}; expected one of {', '.join(PRECISIONS)}")
        if self.target != "pt2" or self.device != "cpu":
            raise InputError(f"precision='bf16' makes .pt2 packages for the CPU, but this export's target is "
                             f"{self.target} on {self.device}")
        if self.quantize is not None:
            raise InputError(f"precision='bf16' and quantize={self.quantize!r} do not combine: an int8 package "
                             "computes in int8; pick one")
        bf16_flag()

    def _validate_onnx(self, output: Path, is_onnx_name: bool) -> None:
        from ..runtime.onnx_extra import require_onnx

        if self.onnx_mode not in ONNX_MODES:
            raise InputError(f"unknown ONNX mode {self.onnx_mode!r}; expected one of {', '.join(ONNX_MODES)}")
        if not is_onnx_name:
            raise InputError(
                f"package_path {output}: an ONNX file must end in .onnx (the runners tell it from a .pt2 "
                "package by the suffix)"
            )
        if self.device != "cpu":
            raise InputError(
                "the ONNX target exports on the CPU (device='cpu'): the file is device-independent, and "
                "onnxruntime picks its execution provider when it loads it"
            )
        if self.allow_python_ops:
            raise InputError("allow_python_ops applies to .pt2 packages; the ONNX target translates every op")
        if self.cpu_target != NATIVE:
            raise InputError(
                "cpu_target applies to .pt2 packages; an ONNX file holds no compiled code (onnxruntime picks "
                "its kernels for the host it runs on)"
            )
        require_onnx()
