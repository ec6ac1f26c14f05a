"""The Inductor settings a CPU package gets by default because they measured fastest
on real models (docs/performance-real-models.md has the table and the command that made it), and
the rule that keeps them honest: a setting that makes a model's compile fail, or its
package fail the check against eager, is dropped for that model and the package
compiled again without it. The export says what it dropped and why; no package ships
unverified.

A setting the user gave, either way (``inductor_configs={"freezing": False}``), is
theirs: the defaults never override it, and it is never dropped.

A setting may also rewrite the exported graph before the compile (``rewrite``). Such a
rewrite changes bits against eager, so it applies only where it finds something to
rewrite and the export's rule is a tolerance (CLOSE), not bits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..package.host import target_cpu_flags
from ..package.spec import CLOSE, PackageSpec, Tolerance
from . import conv_padding, conv_silu, linear_activations, pixel_convs
from .options import ExportOptions

Program = torch.export.ExportedProgram


@dataclass(frozen=True)
class SpeedSetting:
    name: str
    configs: dict[str, Any]
    # A graph rewrite before the compile: how many places it finds in a program, and
    # the program's rewritten copy.
    finds: Callable[[Program], int] | None = None
    rewrite: Callable[[Program], Program] | None = None
    # A rewrite that only pays in a frozen package (it undoes a fusion of freezing's),
    # and so applies only where freezing does.
    needs_freezing: bool = False
    # Where it pays only on some CPUs: whether it applies to a package compiled for a
    # CPU with these flags (the cpu_target's, or this host's for a native package).
    for_cpu: Callable[[set[str]], bool] | None = None


def without_avx512(flags: set[str]) -> bool:
    """An x86 CPU with no AVX-512: AVX2 at most, where oneDNN's activation post-ops
    measured dear (docs/performance-real-models.md, "The transformers on an AVX2 host")."""
    return "sse2" in flags and "avx512f" not in flags


# In order of importance: when one must go, the last one still applied goes first.
CPU_DEFAULTS: tuple[SpeedSetting, ...] = (
    # Weights become constants: oneDNN gets them prepacked in its own layout,
    # convolutions and linears fuse with their activations, constant subgraphs fold.
    SpeedSetting("freezing", {"freezing": True}),
    # Squeeze-and-excitation's one-pixel convs as fused reductions, not oneDNN calls.
    SpeedSetting("one-pixel convs as sums", {}, pixel_convs.count, pixel_convs.as_sums),
    # Zero pads before convolutions (TensorFlow's "SAME" by hand) as the convs' own
    # padding, not a copy of each activation.
    SpeedSetting("zero pads folded into convs", {}, conv_padding.count, conv_padding.into_convs),
    # SiLU after a convolution in Inductor's loops, not oneDNN's dearer swish post-op.
    SpeedSetting("conv SiLU in Inductor's loops", {}, conv_silu.count, conv_silu.unfused, needs_freezing=True),
    # GELU and SiLU after a linear in Inductor's loops, not oneDNN's post-ops, which
    # are dear on AVX2 (on AVX-512 they measured as fast as the loops, or faster).
    SpeedSetting("linear GELU and SiLU in Inductor's loops", {}, linear_activations.count, linear_activations.unfused,
                 needs_freezing=True, for_cpu=without_avx512),
)


def default_settings(options: ExportOptions) -> list[SpeedSetting]:
    """The speed settings this export starts with: the CPU defaults for a .pt2 package
    with ``optimize`` on, less any whose configs the user set, and less those that
    need freezing where it is off, and those that do not pay on the CPU the package
    is compiled for. An int8 export gets no graph rewrite: its convs
    are quantized by Inductor's patterns, which a rewritten conv would no longer
    match."""
    if options.target != "pt2" or options.device != "cpu" or not options.optimize:
        return []
    given = set(options.inductor_configs)
    settings = [setting for setting in CPU_DEFAULTS
                if not given & set(setting.configs) and not (options.quantize and setting.rewrite is not None)]
    frozen = options.inductor_configs.get("freezing", any(s.configs.get("freezing") for s in settings))
    flags = set(target_cpu_flags(options.cpu_target)) if any(s.for_cpu for s in settings) else set()
    return [setting for setting in settings if (frozen or not setting.needs_freezing)
            and (setting.for_cpu is None or setting.for_cpu(flags))]


def applicable(settings: list[SpeedSetting], program: Program, tolerance: Tolerance) -> list[SpeedSetting]:
    """``settings`` less the rewrites that find nothing in ``program`` as the rewrites
    before them leave it (one-pixel convs summed are no longer convs), and all
    rewrites when the package is held to its bits (they change them). A rewrite that
    raises here is kept, for ``rewritten`` to report."""
    kept = []
    for setting in settings:
        if setting.rewrite is None:
            kept.append(setting)
        elif tolerance.rule == CLOSE and setting.finds(program) > 0:
            kept.append(setting)
            try:
                program = setting.rewrite(program)
            except Exception:  # noqa: BLE001  (reported by rewritten(), which drops the setting)
                pass
    return kept


class RewriteFailed(Exception):
    """A setting's graph rewrite raised on this program: the setting is dropped, like
    one whose compile fails, rather than failing the export."""

    def __init__(self, setting: SpeedSetting, error: Exception) -> None:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        super().__init__(f"the graph rewrite failed: {type(error).__name__}: {first}")
        self.setting = setting


def rewritten(settings: list[SpeedSetting], program: Program) -> Program:
    """``program`` as the settings' rewrites leave it (a copy if any applies); raises
    RewriteFailed naming the setting whose rewrite failed."""
    for setting in settings:
        if setting.rewrite is not None:
            try:
                program = setting.rewrite(program)
            except Exception as error:  # noqa: BLE001  (any failure of our rewrite drops it)
                raise RewriteFailed(setting, error) from error
    return program


_SUMMARY_HEAD = "speed settings: "


def recorded_settings(spec: PackageSpec, options: ExportOptions) -> list[str]:
    """The names of the defaults a package compiled with (a reused package's, whose
    compile is not repeated): from the Inductor settings it records, and for a
    rewrite, from its optimizations record (``settings_summary``'s line)."""
    summary = next((part.removeprefix(_SUMMARY_HEAD) for part in spec.optimizations.split("; ")
                    if part.startswith(_SUMMARY_HEAD)), "")
    listed = summary.split(", ")
    return [setting.name for setting in default_settings(options)
            if all(spec.inductor_configs.get(key) == value for key, value in setting.configs.items())
            and (setting.rewrite is None or setting.name in listed)]


def records_rewrite(spec: PackageSpec, options: ExportOptions) -> bool:
    """Whether a package was compiled with a graph rewrite. Whether one applies
    depends on the export's rule, so such a package is compiled again, not
    reverified, when re-exported under another rule."""
    rewrites = {setting.name for setting in CPU_DEFAULTS if setting.rewrite is not None}
    return bool(rewrites & set(recorded_settings(spec, options)))


def _packed_per_call(node: torch.fx.Node) -> bool:
    """Whether Inductor packs this convolution's weights on every call: a 2-d or 3-d
    convolution (4-d or 5-d weights; others are never packed) whose own input has a
    dynamic size (mkldnn_fusion's packable-convolution rule)."""
    if node.op != "call_function" or node.target is not torch.ops.aten.convolution.default:
        return False
    data, weight = (getattr(arg, "meta", {}).get("val") for arg in node.args[:2])
    return (getattr(weight, "ndim", 0) in (4, 5)
            and any(isinstance(size, torch.SymInt) for size in getattr(data, "shape", ())))


def dynamic_shape_cost(program: Program, inductor_configs: dict[str, Any]) -> str:
    """What a dynamic shape costs a frozen CPU package, or "": freezing packs
    convolution weights for one shape, and a convolution whose input is dynamic in size
    gets them reordered by oneDNN on every call (docs/performance-real-models.md, "A
    dynamic batch"). ``program`` is decomposed, as the compile gets it."""
    if not inductor_configs.get("freezing"):
        return ""
    convolutions = sum(1 for node in program.graph.nodes if _packed_per_call(node))
    if not convolutions:
        return ""
    return (f"this package is dynamic in shape, so oneDNN cannot keep the weights of {convolutions} "
            f"convolution{'s' if convolutions > 1 else ''} packed and reorders them on every call (a ResNet-50 "
            "measured 1.22x slower at batch 1, 1.01x at batch 8); for speed at small batches, export one static "
            "package per batch you serve")


def compile_configs(settings: list[SpeedSetting], options: ExportOptions) -> dict[str, Any]:
    """The Inductor configs of one compile: the settings applied, under the user's."""
    configs: dict[str, Any] = {}
    for setting in settings:
        configs.update(setting.configs)
    return {**configs, **options.inductor_configs}


def settings_summary(applied: list[SpeedSetting], dropped: list[tuple[SpeedSetting, str]]) -> str:
    """One line for the package's optimizations record and the export's summary."""
    parts = [f"{_SUMMARY_HEAD}{', '.join(s.name for s in applied) if applied else 'none'}"]
    parts += [f"dropped {setting.name} ({reason})" for setting, reason in dropped]
    return "; ".join(parts)
