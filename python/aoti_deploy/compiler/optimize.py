"""Export-time graph optimizations, on by default (``export_compile --no-optimize``
turns them off). Each is general, for any model, and keeps eager's bits.

- Pointwise convs to multiplies: a conv2d whose kernel is 1x1, depthwise (one
  channel per group), with no bias, stride 1, no padding and dilation 1 is a
  per-channel scale. Inductor would wrap it in NCHW<->NHWC layout conversions around
  a mkldnn call; as ``m = x * w.view(1, C, 1, 1); where(m == 0, +0.0, m)`` it becomes
  one fused loop. The ``where`` keeps the conv's bits where a bare multiply would
  not: the conv accumulates from +0.0, so a -0.0 product comes out as +0.0. (Not as
  ``m + 0.0``: Inductor may drop an addition of zero, as torch 2.14 does.) The conv is
  not always that, though (it may fuse the multiply and the add, which differs where a
  product rounds to zero), so each rewrite is probed first, in eager on this host, against
  the real weight: every channel sees special values (NaN payloads, +-0, +-inf,
  subnormals) and random bit patterns, and a conv whose probe differs by a single
  bit is kept. So are bfloat16 convs (they flush subnormals) and convs of packages
  for other devices than the CPU (the probe runs on the CPU).
- Whole-input average pools to the input's size: an avg_pool2d with no padding whose
  window covers the whole (static) input, and so makes one value per channel, gets the
  input's height and width as its window. Eager clips the window to the input either
  way, so the sum (and its order) and the divisor are the same; Inductor does not
  clip, and loops over the whole window, masked. transformers' EfficientNet pools its
  7x7 map with a 1280x1280 window (``nn.AvgPool2d(hidden_dim, ceil_mode=True)``):
  1280 x 1280 x 1280 masked steps, 224 ms of a 225 ms call, against 3 ms in ONNX
  Runtime. Each rewrite is probed in eager, on special values and random bits, and
  kept only if every bit is the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..verify.special_values import INT_TWIN, special_values

_aten = torch.ops.aten
# conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)
_CONV2D_DEFAULTS = (None, None, None, [1, 1], [0, 0], [1, 1], 1)


@dataclass
class OptimizeReport:
    """What the passes did: one line per rewrite or kept node."""

    lowered: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    pools: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if not self.lowered and not self.kept:
            parts = ["no pointwise convs found"]
        else:
            parts = [f"{len(self.lowered)} pointwise conv(s) lowered to a multiply"]
            parts += [f"kept {line}" for line in self.kept]
        if self.pools:
            parts.append(f"{len(self.pools)} whole-input average pool(s) given the input's size as window "
                         f"({', '.join(self.pools)})")
        return "; ".join(parts)


def optimize_program(program: torch.export.ExportedProgram) -> OptimizeReport:
    """Apply every pass to ``program`` in place and say what changed."""
    report = OptimizeReport()
    _lower_pointwise_convs(program, report)
    _shrink_whole_input_pools(program, report)
    return report


# avg_pool2d(input, kernel_size, stride=[], padding=0, ceil_mode=False,
#            count_include_pad=True, divisor_override=None)
_POOL_DEFAULTS = (None, None, [], [0, 0], False, True, None)


def _pair(value: object) -> list[int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return values * 2 if len(values) == 1 else values


def _shrink_whole_input_pools(program: torch.export.ExportedProgram, report: OptimizeReport) -> None:
    graph = program.graph_module.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not _aten.avg_pool2d.default:
            continue
        args = list(node.args) + list(_POOL_DEFAULTS[len(node.args):])
        x, kernel, stride, padding, ceil_mode, count_include_pad, divisor = args[:7]
        x_val, out_val = x.meta.get("val"), node.meta.get("val")
        if x_val is None or out_val is None or x_val.dim() != 4 or x_val.device.type != "cpu":
            continue
        height, width = x_val.shape[2], x_val.shape[3]
        if not isinstance(height, int) or not isinstance(width, int) or tuple(out_val.shape[2:]) != (1, 1):
            continue
        kernel, padding = _pair(kernel), _pair(padding)
        if padding != [0, 0] or kernel[0] < height or kernel[1] < width or kernel == [height, width]:
            continue
        new_args = (x, [height, width], [height, width], [0, 0], ceil_mode, count_include_pad, divisor)
        if not _same_pool_bits(x_val, args[:7], new_args):
            continue
        node.args = new_args
        report.pools.append(f"{node.name}: {kernel[0]}x{kernel[1]} to {height}x{width}")
        changed = True
    if changed:
        graph.lint()
        program.graph_module.recompile()


def _same_pool_bits(x_val: torch.Tensor, old: list[object], new: tuple[object, ...]) -> bool:
    """Whether eager's avg_pool2d gives the same bits with both arguments, on special
    values and random bits in the input's shape (batch 1) and dtype, both layouts."""
    dtype = x_val.dtype
    if dtype not in INT_TWIN:
        return False
    shape = (1, *x_val.shape[1:])
    twin = INT_TWIN[dtype]
    for seed in (0, 1):
        probe = special_values(tuple(shape), dtype, seed=seed)
        for layout in (torch.contiguous_format, torch.channels_last):
            sample = probe.contiguous(memory_format=layout)
            with torch.no_grad():
                before = _aten.avg_pool2d.default(sample, *old[1:])
                after = _aten.avg_pool2d.default(sample, *new[1:])
            if before.shape != after.shape or not torch.equal(before.view(twin), after.view(twin)):
                return False
    return True


def _pointwise_conv_args(node: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node, int] | None:
    """(input, weight, channels) if ``node`` is a conv2d that is a per-channel scale."""
    if node.op != "call_function" or node.target is not _aten.conv2d.default:
        return None
    args = list(node.args) + list(_CONV2D_DEFAULTS[len(node.args):])
    x, weight, bias, stride, padding, dilation, groups = args[:7]
    x_val, w_val = x.meta.get("val"), weight.meta.get("val")
    if x_val is None or w_val is None or x_val.dim() != 4 or bias is not None:
        return None
    channels = x_val.shape[1]
    if not isinstance(channels, int) or groups != channels:
        return None
    if tuple(w_val.shape) != (channels, 1, 1, 1) or w_val.dtype != x_val.dtype:
        return None
    if list(stride) != [1, 1] or list(padding) != [0, 0] or list(dilation) != [1, 1]:
        return None
    return x, weight, channels


def _weight_value(program: torch.export.ExportedProgram, weight: torch.fx.Node) -> torch.Tensor | None:
    """The real tensor behind a parameter, buffer or constant placeholder."""
    signature = program.graph_signature
    name = (
        signature.inputs_to_parameters.get(weight.name)
        or signature.inputs_to_buffers.get(weight.name)
        or signature.inputs_to_lifted_tensor_constants.get(weight.name)
    )
    if name is None:
        return None
    return program.state_dict.get(name, program.constants.get(name))


def _positive_zero(product: torch.Tensor) -> torch.Tensor:
    """``product`` with -0.0 made +0.0, as a conv that accumulates from +0.0 gives it."""
    return _aten.where.ScalarSelf(_aten.eq.Scalar(product, 0), 0.0, product)


def _probe_differences(weight: torch.Tensor, channels: int) -> int:
    """How many elements differ between the conv and its rewrite on a probe of
    special values and random bits in every channel (0: the rewrite keeps every
    bit)."""
    dtype = weight.dtype
    if dtype not in INT_TWIN:
        return -1
    weight = weight.detach().cpu()
    # Each channel its own block of special values and random bits, so every weight
    # meets every special value.
    probe = torch.stack([special_values((4, 8, 16), dtype, seed=c) for c in range(channels)], dim=1)
    with torch.no_grad():
        conv = torch.nn.functional.conv2d(probe, weight, groups=channels)
        rewrite = _positive_zero(_aten.mul.Tensor(probe, weight.view(1, channels, 1, 1)))
    twin = INT_TWIN[dtype]
    return int((conv.view(twin) != rewrite.view(twin)).sum())


def _lower_pointwise_convs(program: torch.export.ExportedProgram, report: OptimizeReport) -> None:
    graph = program.graph_module.graph
    for node in list(graph.nodes):
        matched = _pointwise_conv_args(node)
        if matched is None:
            continue
        x, weight, channels = matched
        value = _weight_value(program, weight)
        dtype = str(x.meta["val"].dtype).removeprefix("torch.")
        if x.meta["val"].device.type != "cpu":
            report.kept.append(f"{node.name} ({dtype}): on {x.meta['val'].device.type}, and the probe runs on the CPU")
            continue
        if value is None:
            report.kept.append(f"{node.name} ({dtype}): its weight is not a parameter, buffer or constant")
            continue
        differ = _probe_differences(value, channels)
        if differ != 0:
            report.kept.append(f"{node.name} ({dtype}): the multiply would change {differ} probe values")
            continue
        with graph.inserting_before(node):
            view = graph.call_function(_aten.view.default, (weight, [1, channels, 1, 1]))
            mul = graph.call_function(_aten.mul.Tensor, (x, view))
            is_zero = graph.call_function(_aten.eq.Scalar, (mul, 0))
            result = graph.call_function(_aten.where.ScalarSelf, (is_zero, 0.0, mul))
        # Fake values for the new nodes, from the originals', so later passes see shapes.
        fake_x, fake_w = x.meta["val"], weight.meta["val"]
        with fake_x.fake_mode:
            view.meta["val"] = fake_w.view(1, channels, 1, 1)
            mul.meta["val"] = fake_x * view.meta["val"]
            is_zero.meta["val"] = _aten.eq.Scalar(mul.meta["val"], 0)
            result.meta["val"] = _positive_zero(mul.meta["val"])
        for new in (view, mul, is_zero, result):
            for key in ("stack_trace", "nn_module_stack"):
                if key in node.meta:
                    new.meta[key] = node.meta[key]
        name = node.name
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        # A conv that was a graph output keeps its place in the program's signature.
        for spec in program.graph_signature.output_specs:
            if getattr(spec.arg, "name", None) == name:
                spec.arg = type(spec.arg)(name=result.name)
        report.lowered.append(f"{name} ({dtype})")
    graph.lint()
    program.graph_module.recompile()
    program.validate()
