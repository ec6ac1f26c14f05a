"""Every indirect index checked where an error can be caught. Inductor checks an
index inside the kernel that reads with it, often within ``#pragma omp parallel``,
where a C++ exception ends the process. Before each indexing op of the exported
graph this pass adds a check of all the op's indices: a reduction to one bool, then
``_assert_async`` with the toolkit's message, which Inductor compiles to a throw in
serial code between loops. The op itself gets ``where(valid, index, 0)``, so its own
kernel never meets a bad index, whichever order the compiled kernels run in; valid
indices pass unchanged, so the bits are eager's. ``check_guards_outside_parallel``
then proves, on the compiled kernels, that no guard's throw sits in a parallel region.
"""

from __future__ import annotations

import operator
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import CompileError

aten = torch.ops.aten

# Every guard's message starts with this: the runners and the backend know a guard's
# error by it (a bad request, not a failed run).
GUARD_PREFIX = "index out of range"


@dataclass(frozen=True)
class IndexRule:
    """Where an op's index arguments sit, and what they may hold (eager's rule)."""

    dim_arg: int | None  # the position of ``dim``; None: a list of indices, one per dim, or the flat tensor
    index_arg: int  # the index tensor's position (for a list: the list's)
    wraps: bool  # negative indices count from the end (-size..size-1), else 0..size-1
    table_arg: int = 0  # the indexed tensor


def _overloads(packet: object, *names: str) -> list[object]:
    return [getattr(packet, name) for name in names if hasattr(packet, name)]


_RULES: dict[object, IndexRule] = {}
for _op in _overloads(aten.embedding, "default"):
    _RULES[_op] = IndexRule(dim_arg=None, index_arg=1, wraps=False)
for _op in _overloads(aten.embedding_bag, "default", "padding_idx") + _overloads(aten._embedding_bag, "default"):
    _RULES[_op] = IndexRule(dim_arg=None, index_arg=1, wraps=False)
for _packet in (aten.index_select, aten.gather, aten.index_add, aten.index_copy, aten.index_reduce):
    for _op in _overloads(_packet, "default"):
        _RULES[_op] = IndexRule(dim_arg=1, index_arg=2, wraps=False)
for _packet in (aten.scatter, aten.scatter_add, aten.scatter_reduce):
    for _op in _overloads(_packet, "src", "value", "reduce", "value_reduce", "default", "two"):
        _RULES[_op] = IndexRule(dim_arg=1, index_arg=2, wraps=False)
for _op in _overloads(aten.index_fill, "int_Scalar", "int_Tensor"):
    _RULES[_op] = IndexRule(dim_arg=1, index_arg=2, wraps=True)
for _op in _overloads(aten.index, "Tensor") + _overloads(aten.index_put, "default") + _overloads(aten.index_put_,
                                                                                                   "default"):
    _RULES[_op] = IndexRule(dim_arg=None, index_arg=1, wraps=True)
for _op in _overloads(aten.take, "default") + _overloads(aten.put, "default"):
    _RULES[_op] = IndexRule(dim_arg=None, index_arg=1, wraps=True)

# Ops whose first argument's values pass through unchanged: an index that comes from
# an input through these alone is that input's values, not computed from them.
_SHAPE_ONLY = {
    aten.view, aten._unsafe_view, aten.reshape, aten.unsqueeze, aten.squeeze, aten.expand, aten.slice,
    aten.select, aten.permute, aten.transpose, aten.t, aten.clone, aten.contiguous, aten.alias,
    aten.flatten, aten.unflatten, aten.narrow, aten.detach, aten.lift_fresh_copy, aten.view_as,
    aten.expand_as, aten.reshape_as, aten._to_copy, aten.to,
}


_SIZE_OPS = {aten.sym_size.int, aten.sym_numel.default, aten.sym_stride.int, aten.sym_storage_offset.default}


@dataclass
class GuardReport:
    """One line per guarded index: the op, where its index comes from, the range."""

    guarded: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    # Of those, the ops Inductor runs as extern kernels (eager's own code), whose
    # indices are checked but not sanitised.
    extern: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return f"{len(self.guarded)} index check(s)" if self.guarded else "no indexing ops"


def guard_indices(program: torch.export.ExportedProgram) -> GuardReport:
    """Add a bounds check before every indexing op of ``program``, in place."""
    report = GuardReport()
    graph = program.graph_module.graph
    user_inputs = [
        spec.arg.name
        for spec in program.graph_signature.input_specs
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT
    ]
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _RULES:
            continue
        rule = _RULES[node.target]
        table = node.args[rule.table_arg] if len(node.args) > rule.table_arg else None
        if len(node.args) <= rule.index_arg or not isinstance(getattr(table, "meta", {}).get("val"), torch.Tensor):
            continue
        where = _op_name(node)
        if rule.dim_arg is None and isinstance(node.args[rule.index_arg], (list, tuple)):
            # Tensor indexing: one index per dim (None for a full slice).
            indices = list(node.args[rule.index_arg])
            for dim, index in enumerate(indices):
                if _is_index(index):
                    indices[dim] = _guard(graph, node, table, dim, index, rule, where, user_inputs, report)
            node.args = _replace(node.args, rule.index_arg, indices)
            continue
        index = node.args[rule.index_arg]
        if not _is_index(index):
            continue
        if rule.dim_arg is not None:
            dim = node.args[rule.dim_arg] if len(node.args) > rule.dim_arg else node.kwargs.get("dim")
            if not isinstance(dim, int):
                continue
            dim %= max(table.meta["val"].dim(), 1)
        elif node.target in _overloads(aten.take, "default") + _overloads(aten.put, "default"):
            dim = None  # the flat tensor
        else:
            dim = 0  # embedding rows
        guarded = _guard(graph, node, table, dim, index, rule, where, user_inputs, report)
        node.args = _replace(node.args, rule.index_arg, guarded)
    graph.lint()
    program.graph_module.recompile()
    program.validate()
    return report


def _runs_as_extern_kernel(op: object) -> bool:
    """Inductor calls eager's kernel for this op (a fallback), which checks its indices
    in ATen's parallel_for, whose errors leave the parallel region (with a message
    such as "Expected i < index_size to be true", hence the check of ours first)."""
    from torch._inductor.lowering import fallbacks

    packet = getattr(op, "overloadpacket", None)
    return op in fallbacks or packet in (aten.embedding_bag, aten._embedding_bag)


def _guard(graph: torch.fx.Graph, node: torch.fx.Node, table: torch.fx.Node, dim: int | None,
           index: torch.fx.Node, rule: IndexRule, where: str, user_inputs: list[str],
           report: GuardReport) -> torch.fx.Node:
    """The check of one index before ``node``; returns the index the op should read."""
    fake_table, fake_index = table.meta["val"], index.meta["val"]
    size: object = fake_table.numel() if dim is None else (fake_table.shape[dim] if fake_table.dim() else 1)
    if isinstance(size, torch.SymInt) and size.node.expr.is_number:
        size = int(size.node.expr)
    new: list[torch.fx.Node] = []
    with graph.inserting_before(node):
        if isinstance(size, int):
            bound: object = size
            size_text = str(size)
            low: object = -size if rule.wraps else 0
        else:
            bound = graph.call_function(
                aten.sym_numel.default if dim is None else aten.sym_size.int,
                (table,) if dim is None else (table, dim))
            bound.meta["val"] = size
            new.append(bound)
            size_text = f"size {size}"
            if rule.wraps:
                low = graph.call_function(operator.neg, (bound,))
                low.meta["val"] = -size
                new.append(low)
            else:
                low = 0
        at_least = graph.call_function(aten.ge.Scalar, (index, low))
        below = graph.call_function(aten.lt.Scalar, (index, bound))
        valid = graph.call_function(aten.logical_and.default, (at_least, below))
        every = graph.call_function(aten.all.default, (valid,))
        message = _message(where, node, index, dim, size_text, rule, user_inputs)
        check = graph.call_function(aten._assert_async.msg, (every, message))
        # An extern kernel checks its indices itself, where an error can be caught:
        # it needs no sanitised copy (an EmbeddingBag recommender measured 1.078x its bare
        # p50 with one, 1.011x without: scripts/bench_index_guards.py).
        extern = _runs_as_extern_kernel(node.target)
        safe = None if extern else graph.call_function(aten.where.ScalarOther, (valid, index, 0))
    with fake_index.fake_mode:
        at_least.meta["val"] = aten.ge.Scalar(fake_index, 0)
        below.meta["val"] = aten.lt.Scalar(fake_index, 0)
        valid.meta["val"] = aten.logical_and.default(at_least.meta["val"], below.meta["val"])
        every.meta["val"] = aten.all.default(valid.meta["val"])
        check.meta["val"] = None
        if safe is not None:
            safe.meta["val"] = aten.where.ScalarOther(valid.meta["val"], fake_index, 0)
    for added in new + [at_least, below, valid, every, check] + ([safe] if safe is not None else []):
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in node.meta:
                added.meta[key] = node.meta[key]
    report.guarded.append(f"{node.name}: {where}")
    report.messages.append(message)
    if extern:
        report.extern.append(node.name)
    return index if safe is None else safe


def _message(where: str, node: torch.fx.Node, index: torch.fx.Node, dim: int | None, size: str,
             rule: IndexRule, user_inputs: list[str]) -> str:
    """One line: the op, the valid range, where the index comes from, the fix. It is
    compiled into a C++ string literal, so it holds printable ASCII without quotes."""
    if size.isdigit():
        n = int(size)
        valid = f"{-n}..{n - 1}" if rule.wraps else f"0..{n - 1}"
    else:
        valid = f"-{size}..{size} - 1" if rule.wraps else f"0..{size} - 1"
    if dim is None:
        of = "its elements"
    elif node.target in _overloads(aten.embedding, "default") or rule.table_arg != 0 or (
            rule.dim_arg is None and not rule.wraps):
        of = "its rows"
    else:
        of = f"dim {dim}"
    source = _source(index, user_inputs)
    text = (f"{GUARD_PREFIX}: {where} takes indices in {valid} ({of}, {size}); an index {source} is outside it. "
            f"Pass inputs whose indices fall in {valid}.")
    return re.sub(r'["\\]|[^ -~]', "?", text)


def _source(index: torch.fx.Node, user_inputs: list[str]) -> str:
    """Where an index comes from: an input as given, computed from inputs, or the
    model's own tensors."""
    node = index
    while node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
            and node.target.overloadpacket in _SHAPE_ONLY and node.args:
        node = node.args[0]
    if node.op == "placeholder" and node.name in user_inputs:
        return f"of input[{user_inputs.index(node.name)}] ({node.name})"
    found: set[int] = set()
    seen: set[torch.fx.Node] = set()
    stack = [index]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        if current.op == "placeholder" and current.name in user_inputs:
            found.add(user_inputs.index(current.name))
        if current.op == "call_function" and current.target in _SIZE_OPS:
            continue  # a size, not the input's values
        stack.extend(current.all_input_nodes)
    if not found:
        return "that the model computes from its own tensors"
    return "computed from " + ", ".join(f"input[{i}] ({user_inputs[i]})" for i in sorted(found))


def _op_name(node: torch.fx.Node) -> str:
    """The op and, where it sits in a submodule, the module's path: ``embedding in
    'encoder.embed'``."""
    name = node.target.overloadpacket.__name__.strip("_")
    stack = node.meta.get("nn_module_stack") or {}
    path = next(reversed(stack.values()))[0] if stack else ""
    path = re.sub(r"^L\['self'\]\.?|^L__self___?", "", str(path))
    return f"{name} in '{path}'" if path else name


def _is_index(value: object) -> bool:
    """A graph tensor of integer indices (a bool mask selects, it does not index)."""
    fake = getattr(value, "meta", {}).get("val") if isinstance(value, torch.fx.Node) else None
    return isinstance(fake, torch.Tensor) and not fake.dtype.is_floating_point and not fake.dtype.is_complex \
        and fake.dtype not in (torch.bool, torch.uint8)


def _replace(args: tuple, position: int, value: object) -> tuple:
    return tuple(value if i == position else arg for i, arg in enumerate(args))


def check_guards_outside_parallel(package_path: str | Path, messages: list[str]) -> None:
    """Refuse a package in whose compiled kernels a guard's throw sits inside an
    OpenMP parallel region, where it would end the process instead of failing the run.

    Raises:
        CompileError: a guard's message inside ``#pragma omp parallel``.
    """
    if not messages:
        return
    with zipfile.ZipFile(package_path) as archive:
        sources = [archive.read(name).decode("utf-8", "replace") for name in archive.namelist()
                   if name.endswith(".cpp")]
    for source in sources:
        lines = source.splitlines()
        for number in _lines_in_parallel_regions(lines):
            if GUARD_PREFIX in lines[number] and "throw" in lines[number]:
                raise CompileError(
                    f"an index check was compiled inside an OpenMP parallel region (line {number + 1} of a "
                    f"generated kernel), where its error would end the process: {lines[number].strip()[:200]}. "
                    f"This torch ({torch.__version__}) schedules kernels in a way the toolkit does not support; "
                    "report it with the model.")


def _lines_in_parallel_regions(lines: list[str]) -> list[int]:
    """The numbers (from 0) of the lines inside ``#pragma omp parallel`` blocks: from
    the pragma to the brace that closes the block it opens."""
    inside: list[int] = []
    region_depths: list[int] = []  # the brace depth at which each open region started
    depth = 0
    pending = False  # a pragma seen, its block's brace not yet
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("#pragma omp parallel"):
            pending = True
        if pending or region_depths:
            inside.append(number)
        if stripped.startswith(("//", "#")):
            continue
        for char in stripped:
            if char == "{":
                if pending:
                    region_depths.append(depth)
                    pending = False
                depth += 1
            elif char == "}":
                depth -= 1
                if region_depths and depth == region_depths[-1]:
                    region_depths.pop()
    return inside
