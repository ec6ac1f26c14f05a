"""Dynamic dims that say what to do: torch.export's constraint failures turned into the
change to make, and the dims torch accepts as static although the model needs them to
follow a dynamic one. Fixes name (input, dim) positions only, so the CLI can word them
as ``--dynamic-dim`` and an API as ``torch.export.Dim``."""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..models.user import DynamicDim

Position = tuple[int, int]  # (input index, dim)

# How far sizes are tried against torch's guards when a dim has no upper bound.
_UNBOUNDED_SCAN = 4096


@dataclass(frozen=True)
class DimFix:
    """One change to the dynamic dims ``dim`` (as given), by position.

    kind:
        "range": only sizes ``min``..``max`` work (max None: no upper bound).
        "static": the model's code fixes the size to ``size``; it cannot be dynamic.
        "tie": the positions ``add`` must take the same size as ``dim``'s, in one
            dynamic dim (they were left static, or given a dim of their own).
        "expression": the size must be ``expression`` of other dims (torch's own
            words), which a dynamic-dim range cannot say.
    ``reason`` says why, naming positions as "input I dim D".
    """

    dim: DynamicDim
    kind: str
    reason: str
    min: int | None = None
    max: int | None = None
    size: int | None = None
    add: tuple[Position, ...] = ()
    expression: str = ""

    @property
    def positions(self) -> tuple[Position, ...]:
        """The positions of the fixed dynamic dim: ``dim``'s, with ``add`` for a tie."""
        return tuple(sorted(set(self.dim.positions) | set(self.add)))


def position_text(position: Position) -> str:
    return f"input {position[0]} dim {position[1]}"


def dynamic_dim_option(fix: DimFix) -> str:
    """The ``--dynamic-dim`` option that applies ``fix`` ("" for kinds it cannot say)."""
    where = ",".join(f"{i}.{d}" for i, d in fix.positions)
    if fix.kind == "range":
        return f"--dynamic-dim {where}={fix.min}:{'' if fix.max is None else fix.max}"
    if fix.kind == "tie":
        return f"--dynamic-dim {where}={fix.dim.min}:{'' if fix.dim.max is None else fix.dim.max}"
    return ""


# --- Translating torch's refusal ------------------------------------------------------

_GUARD = re.compile(
    r"Not all values of (?P<name>\w+) = (?P<source>\S+) in the specified range(?: .*?)? satisfy the generated guard "
    r"(?P<guard>.+?)\.?$"
)
_SPECIALIZED = re.compile(r"You marked (?P<name>\w+) as dynamic but your code specialized it to be a constant \((?P<size>-?\d+)\)")
_SUGGESTION = re.compile(r"^\s*(?P<name>\w+) = (?P<value>.+?)\s*$")
_DIM_CALL = re.compile(r"^Dim\('(?P<name>\w+)'(?P<args>(?:, \w+=-?\d+)*)\)$")
_SOURCE = re.compile(r"L\['(?P<arg>\w+)'\]\.size\(\)\[(?P<dim>\d+)\]")
# (1 + ((S - 1) // k)) != 1 (padded strided convs) or (S // k) != 1 (pools): layers that
# divide the size by k in all must leave more than 1 there, which small sizes do not.
_STRIDE_GUARD = re.compile(
    r"^(?:\(1 \+ \(\(\(-1\) \+ (?P<padded>input \d+ dim \d+)\) // (?P<k>\d+)\)\)"
    r"|\((?P<plain>input \d+ dim \d+) // (?P<plain_k>\d+)\)) != 1$"
)


def constraint_fixes(
    message: str,
    model: nn.Module,
    example_inputs: Sequence[torch.Tensor],
    dynamic_dims: Sequence[DynamicDim],
) -> list[DimFix]:
    """The fixes for torch.export's "Constraints violated" ``message``, one per
    dynamic dim it names: the size the code fixes, the dim another must equal, or the
    range of sizes where every guard torch generated for it holds (each guard is tried
    over the given range, with every other size as in the example), with the guards
    that fail just outside it as the reason.

    Args:
        message: the text of torch.export's error.
        model: the exported module (its forward's parameter names are the guards').
        example_inputs: the inputs traced with.
        dynamic_dims: the dynamic dims as given (named by ``DynamicDim.name``).
    """
    by_name = {dynamic.name: dynamic for dynamic in dynamic_dims}
    names = _argument_names(model, len(example_inputs))
    guards: dict[str, list[str]] = {}
    fixes: dict[str, DimFix] = {}
    for line in message.splitlines():
        if (match := _GUARD.search(line)) and match["name"] in by_name:
            guards.setdefault(match["name"], []).append(match["guard"])
        elif (match := _SPECIALIZED.search(line)) and match["name"] in by_name:
            dynamic = by_name[match["name"]]
            fixes[dynamic.name] = DimFix(
                dynamic, "static", f"the model's code fixes {_positions_text(dynamic)} to {match['size']}",
                size=int(match["size"]),
            )
    suggested = _suggested_fixes(message)
    for name, value in suggested.items():
        dynamic = by_name.get(name)
        if dynamic is None or name in fixes:
            continue
        if re.fullmatch(r"-?\d+", value):
            fixes[name] = DimFix(dynamic, "static", f"the model's code fixes {_positions_text(dynamic)} to {value}",
                                 size=int(value))
        elif value in by_name:
            other = by_name[value]
            fixes[name] = DimFix(
                dynamic, "tie", f"the model needs {_positions_text(dynamic)} equal to {_positions_text(other)}",
                add=other.positions,
            )
        elif not _DIM_CALL.match(value):
            expression = _rename_dims(value, by_name)
            fixes[name] = DimFix(
                dynamic, "expression", f"the model needs {_positions_text(dynamic)} to be {expression}",
                expression=expression,
            )
    for name, texts in guards.items():
        if name in fixes:
            continue
        dynamic = by_name[name]
        bounds = _suggested_range(suggested.get(name, ""), dynamic)
        fix = _range_fix(dynamic, texts, bounds, names, example_inputs)
        if fix is not None:
            fixes[name] = fix
    for name, value in suggested.items():
        if name in by_name and name not in fixes and (bounds := _suggested_range(value, by_name[name])):
            low, high = bounds
            fixes[name] = DimFix(by_name[name], "range", "torch.export's own suggestion", min=low, max=high)
    return [fixes[dynamic.name] for dynamic in dynamic_dims if dynamic.name in fixes]


def _suggested_fixes(message: str) -> dict[str, str]:
    """torch's "Suggested fixes:" block: Dim name -> what it suggests, as text."""
    _, found, block = message.partition("Suggested fixes:")
    fixes = {}
    for line in block.splitlines()[1:] if found else []:
        if not line.strip():
            break
        if match := _SUGGESTION.match(line):
            fixes[match["name"]] = match["value"]
    return fixes


def _suggested_range(value: str, dynamic: DynamicDim) -> tuple[int, int | None] | None:
    """``Dim('x', min=16, max=1024)`` -> (16, 1024), a bound not given as the dim's own."""
    match = _DIM_CALL.match(value)
    if not match:
        return None
    bounds = dict(re.findall(r"(\w+)=(-?\d+)", match["args"]))
    return int(bounds.get("min", dynamic.min)), int(bounds["max"]) if "max" in bounds else dynamic.max


def _range_fix(
    dynamic: DynamicDim,
    guards: list[str],
    bounds: tuple[int, int | None] | None,
    names: list[str],
    example_inputs: Sequence[torch.Tensor],
) -> DimFix | None:
    """The sizes around the example's where every guard holds, and why the next ones fail."""
    i, d = dynamic.positions[0]
    example = example_inputs[i].shape[d]
    low, high = bounds or (dynamic.min, dynamic.max)
    low = max(low, dynamic.min)
    if dynamic.max is not None:
        high = dynamic.max if high is None else min(high, dynamic.max)
    limit = high if high is not None else max(_UNBOUNDED_SCAN, 4 * example)

    def failing(size: int) -> list[str] | None:
        """The guards that fail at ``size``; None if one cannot be read."""
        sizes = [list(x.shape) for x in example_inputs]
        for j, e in dynamic.positions:
            sizes[j][e] = size
        verdicts = [_evaluate(guard, names, sizes) for guard in guards]
        return None if None in verdicts else [guard for guard, holds in zip(guards, verdicts) if not holds]

    if failing(example) != []:
        return None  # torch's guards hold at the example; if not, this misreads them
    first, last = example, example
    while first - 1 >= low and failing(first - 1) == []:
        first -= 1
    while last + 1 <= limit and failing(last + 1) == []:
        last += 1
    top = None if high is None and last == limit else last
    if (first, top) == (dynamic.min, dynamic.max):
        return None
    reasons = []
    if first > dynamic.min:
        below = failing(first - 1) or []
        reasons += [_guard_reason(guard, names, f"sizes below {first}") for guard in below]
        reasons += [] if below else [f"torch.export asks for sizes from {first}"]
    if top is not None and (dynamic.max is None or top < dynamic.max):
        above = failing(top + 1) or []
        reasons += [_guard_reason(guard, names, f"sizes above {top}") for guard in above]
        reasons += [] if above else [f"torch.export asks for sizes up to {top}"]
    return DimFix(dynamic, "range", "; ".join(dict.fromkeys(reasons)), min=first, max=top)


def _evaluate(guard: str, names: list[str], sizes: list[list[int]]) -> bool | None:
    """A guard as torch prints it (Python, over ``L['arg'].size()[d]``) at these sizes;
    None when it names something else or does not evaluate."""
    unknown = False

    def size(match: re.Match[str]) -> str:
        nonlocal unknown
        arg, dim = match["arg"], int(match["dim"])
        if arg not in names or dim >= len(sizes[names.index(arg)]):
            unknown = True
            return "0"
        return str(sizes[names.index(arg)][dim])

    expression = _SOURCE.sub(size, guard)
    # Only sizes, operators and these words may remain: eval sees nothing else.
    words = set(re.findall(r"[A-Za-z_]\w*", expression))
    if unknown or not words <= {"and", "or", "not", "Max", "Min", "True", "False"}:
        return None
    try:
        return bool(eval(expression, {"__builtins__": {}}, {"Max": max, "Min": min}))
    except (ArithmeticError, SyntaxError, TypeError, ValueError):
        return None


def _guard_reason(guard: str, names: list[str], where: str) -> str:
    """One failing guard in the user's terms: "sizes below 9 fail: ..."."""

    def source(match: re.Match[str]) -> str:
        arg = match["arg"]
        return position_text((names.index(arg), int(match["dim"]))) if arg in names else match[0]

    text = _SOURCE.sub(source, guard)
    if stride := _STRIDE_GUARD.match(text):
        return (
            f"{where} fail: layers that divide {stride['padded'] or stride['plain']} by {stride['k'] or stride['plain_k']} in all (e.g. "
            "stride-2 convs or pools) leave a size of 1 there, which the model's code treats apart"
        )
    return f"{where} fail torch's guard {text}"


def _argument_names(model: nn.Module, count: int) -> list[str]:
    """The names torch.export gives the first ``count`` positional inputs in its guards
    (the forward's parameters: L['input_ids'])."""
    try:
        parameters = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return []
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return positional[:count]


def _rename_dims(text: str, by_name: dict[str, DynamicDim]) -> str:
    return re.sub(r"\b\w+\b", lambda m: _positions_text(by_name[m[0]]) if m[0] in by_name else m[0], text)


def _positions_text(dynamic: DynamicDim) -> str:
    return " and ".join(position_text(position) for position in dynamic.positions)


# --- Dims left static that must follow a dynamic one -----------------------------------


def untied_static_dims(
    model: nn.Module, example_inputs: Sequence[torch.Tensor], dynamic_dims: Sequence[DynamicDim]
) -> list[DimFix]:
    """Dims torch.export accepted as static (or as a dynamic dim of their own) that the
    model needs at the same size as a dynamic dim: a "tie" fix for each such dynamic dim.

    torch.export cannot see these. BERT's attention mask, for instance, is read by
    advanced indexing with ``arange(batch)`` of the input ids' batch; an index is data,
    so tracing adds no guard, and the mask's batch stays what the example had. The
    package then takes that batch only (and a kernel would index past the mask).

    Found by running the model in eager, each dynamic dim in turn at another size in
    its range (one above the example where the range allows): the example resized
    there (its first entries repeated, or cut), every other dim as in the example. If
    eager fails, the dims of the example's size that it runs with once they follow are
    the ones to tie (the smallest such set). A dynamic dim whose probe fails with no
    such set gets no fix here; the check against eager reports it.
    """
    fixes = []
    for dynamic in dynamic_dims:
        i, d = dynamic.positions[0]
        example = example_inputs[i].shape[d]
        probe = example + 1 if dynamic.max is None or example < dynamic.max else example - 1
        if probe < max(dynamic.min, 1) or probe == example:
            continue
        if _runs(model, _resized(example_inputs, dynamic.positions, probe)):
            continue
        candidates = [
            (j, e)
            for j, x in enumerate(example_inputs)
            for e in range(x.dim())
            if x.shape[e] == example and (j, e) not in dynamic.positions
        ]
        tied = _smallest_tie(model, example_inputs, dynamic.positions, candidates, probe)
        if tied:
            where = ", ".join(position_text(position) for position in tied)
            fixes.append(DimFix(
                dynamic, "tie",
                f"with {_positions_text(dynamic)} at {probe} (in its range) the model fails in eager unless {where} "
                f"{'is' if len(tied) == 1 else 'are'} {probe} too. It reads {where} at that size (e.g. by indexing "
                "with an arange), which torch.export does not see, so it kept the example's size "
                f"{example} there, and the package would take only that",
                add=tuple(tied),
            ))
    return fixes


def _smallest_tie(
    model: nn.Module,
    example_inputs: Sequence[torch.Tensor],
    positions: tuple[Position, ...],
    candidates: list[Position],
    probe: int,
) -> list[Position]:
    """The fewest candidates that, resized with ``positions``, let the model run."""
    if not candidates:
        return []
    if _runs(model, _resized(example_inputs, positions + tuple(candidates), probe)):
        needed = list(candidates)
        for candidate in candidates:
            fewer = [c for c in needed if c != candidate]
            if _runs(model, _resized(example_inputs, positions + tuple(fewer), probe)):
                needed = fewer
        return needed
    return [c for c in candidates if _runs(model, _resized(example_inputs, positions + (c,), probe))][:1]


def _resized(inputs: Sequence[torch.Tensor], positions: Sequence[Position], size: int) -> list[torch.Tensor]:
    """The inputs with each position at ``size``: the example's own values, its first
    entries repeated to grow (so ids, masks and indices stay valid), or cut."""
    resized = list(inputs)
    for i, d in positions:
        x = resized[i]
        while x.shape[d] < size:
            x = torch.cat([x, x.narrow(d, 0, min(x.shape[d], size - x.shape[d]))], dim=d)
        resized[i] = x.narrow(d, 0, size).contiguous()
    return resized


def _runs(model: nn.Module, inputs: Sequence[torch.Tensor]) -> bool:
    try:
        with torch.no_grad():
            model(*inputs)
    except Exception:  # any failure at a size the package would take is the finding
        return False
    return True
