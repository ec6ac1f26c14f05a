"""Every indirect index checked where an error can be caught. Inductor checks an
index inside the kernel that reads with it, often within ``#pragma omp parallel``,
where a C++ exception ends the process. Before each indexing op of the exported graph
(and of the graph as Inductor decomposes it) this pass adds a check of all the op's
indices: a reduction to one bool, then ``_assert_async`` with the toolkit's message.
The op itself reads ``where(valid, index, 0)``, so its own kernel never meets a bad
index, whichever order the compiled kernels run in; valid indices pass unchanged, so
the bits are eager's. Inductor compiles the assert to a throw in serial code; the
compile stage reads the generated code before its C++ compile, and the kernels after it
(``guards_in_parallel_regions``), and where Inductor merged one into a parallel region,
compiles again with every assert a call from the wrapper (``asserts_outside_kernels``).
"""

from __future__ import annotations

import contextlib
import operator
import re
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import CompileError
from .compile import quiet_pytree_deprecation

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

_RULES_PACKETS = {op.overloadpacket for op in _RULES}

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
    # The indexing ops Inductor runs as extern kernels (eager's own code), which check
    # their own indices outside any parallel region, so they get no check of ours.
    extern: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if not self.guarded and not self.extern:
            return "no indexing ops"
        text = f"{len(self.guarded)} index check(s)"
        return text + (f", {len(self.extern)} op(s) checking their own (extern kernels)" if self.extern else "")


def guard_indices(program: torch.export.ExportedProgram) -> tuple[torch.export.ExportedProgram, GuardReport]:
    """A bounds check before every indexing op of ``program``: first on the graph as
    exported, by eager's rule for each op (``index_select`` refuses a negative index,
    though Inductor turns it into indexing that wraps); then on the graph decomposed
    as Inductor will decompose it, for what becomes indexing only there (e.g.
    ``cross_entropy``'s gather, ``max_unpool2d``'s index_put), skipping indices
    already checked. Returns the decomposed program and what was checked."""
    # Inductor's decompositions (max_pool2d's, for one) refer to torch._inductor.lowering,
    # which nothing imports before a compile: in a fresh process, without this import,
    # a model with max pooling fails here with "module 'torch._inductor' has no
    # attribute 'lowering'".
    import torch._inductor.lowering  # noqa: F401
    from torch._inductor.decomposition import select_decomp_table

    report = GuardReport()
    _guard_graph(program, report)
    # The int8 graph's quantize ops index nothing; decomposed here, choose_qparams
    # leaves a constant the program does not hold, and the export refuses it.
    table = {op: fn for op, fn in select_decomp_table().items() if "quantized_decomposed" not in str(op)}
    with quiet_pytree_deprecation():
        program = program.run_decompositions(table)
    report.extern.clear()  # counted on the graph Inductor compiles
    _guard_graph(program, report)
    return program, report


def _guard_graph(program: torch.export.ExportedProgram, report: GuardReport) -> None:
    graph = program.graph_module.graph
    user_inputs = [
        spec.arg.name
        for spec in program.graph_signature.input_specs
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT
    ]
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.select.int and _is_data_dependent(node.args[2]):
            if not _read_from_checked(node.args[2]):
                _guard_scalar_index(graph, node, user_inputs, report)
            continue
        if node.op != "call_function" or node.target not in _RULES:
            continue
        if _runs_as_extern_kernel(node.target):
            # Eager's own kernel checks the indices where its error can be caught; a check
            # of ours would add a parallel pass over them (an 8-table EmbeddingBag
            # recommender measured 1.086x its p50 with them, 1.0x without).
            report.extern.append(f"{node.name}: {_op_name(node)}")
            continue
        rule = _RULES[node.target]
        table = node.args[rule.table_arg] if len(node.args) > rule.table_arg else None
        if len(node.args) <= rule.index_arg or not isinstance(getattr(table, "meta", {}).get("val"), torch.Tensor):
            continue
        where = _op_name(node)
        if rule.dim_arg is None and isinstance(node.args[rule.index_arg], (list, tuple)):
            # Tensor indexing: one index per dim (None for a full slice).
            indices = list(node.args[rule.index_arg])
            dim = 0  # the table's dim the next index applies to: a k-dim bool mask covers k dims
            for position, index in enumerate(indices):
                if _is_index(index) and not _already_checked(index):
                    indices[position] = _guard(graph, node, table, dim, index, rule, where, user_inputs, report)
                fake = getattr(index, "meta", {}).get("val") if isinstance(index, torch.fx.Node) else None
                is_mask = isinstance(fake, torch.Tensor) and fake.dtype in (torch.bool, torch.uint8)
                dim += max(fake.dim(), 1) if is_mask else 1
            node.args = _replace(node.args, rule.index_arg, indices)
            continue
        index = node.args[rule.index_arg]
        if not _is_index(index) or _already_checked(index):
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


# What a check is made of, between an index and its assert.
_CHECK_OPS = {aten.ge, aten.lt, aten.logical_and, aten.bitwise_and, aten.all, aten.any, aten.logical_not}


def _already_checked(index: torch.fx.Node) -> bool:
    """``index`` is one a check of ours covers: it feeds the check itself (an extern
    kernel's index), or it is the ``where(valid, index, 0)`` of one (after the
    decompositions, which keep the check's nodes)."""
    starts = [index]
    if getattr(index.target, "overloadpacket", None) is aten.where and index.args:
        starts.append(index.args[0])
    frontier = [n for n in starts if isinstance(n, torch.fx.Node)]
    for _ in range(8):
        following = []
        for node in frontier:
            for user in node.users:
                if user.target is aten._assert_async.msg and str(user.args[1]).startswith(GUARD_PREFIX):
                    return True
                if getattr(user.target, "overloadpacket", None) in _CHECK_OPS:
                    following.append(user)
        frontier = following
    return False


def _read_from_checked(index: torch.fx.Node) -> bool:
    """A scalar index read (``.item()``) from a tensor a check of ours covers: the
    first pass's select, seen again after the decompositions."""
    source = index.args[0] if index.op == "call_function" and index.args else None
    return isinstance(source, torch.fx.Node) and _already_checked(source)


def _is_data_dependent(value: object) -> bool:
    """A graph value that is an integer read from a tensor (``.item()``) or computed
    from one: no export-time bound holds it, and the compiled code reads with it
    unchecked (a select's offset)."""
    fake = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
    if not isinstance(fake, torch.SymInt):
        return False
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    return bool(free_unbacked_symbols(fake))


def _guard_scalar_index(graph: torch.fx.Graph, node: torch.fx.Node, user_inputs: list[str],
                        report: GuardReport) -> None:
    """``select(table, dim, k)`` with ``k`` read from a tensor: the same check on ``k``
    as a 0-d tensor, and the select reads ``where(valid, k, 0).item()``, so that no
    kernel reads with ``k`` before the check ran (eager's rule: negatives wrap)."""
    table, dim, index = node.args[0], node.args[1], node.args[2]
    fake_table = table.meta["val"]
    dim %= max(fake_table.dim(), 1)
    size = fake_table.shape[dim]
    if not isinstance(size, int) and not size.node.expr.is_number:
        return  # a dynamic table: rare with a data-dependent index; Inductor's own code then runs
    size = int(size)
    where = _op_name(node)
    message = _message(where, node, index, dim, str(size), _SELECT_RULE, user_inputs)
    with graph.inserting_before(node):
        as_tensor = graph.call_function(aten.scalar_tensor.default, (index,), {"dtype": torch.int64})
        at_least = graph.call_function(aten.ge.Scalar, (as_tensor, -size))
        below = graph.call_function(aten.lt.Scalar, (as_tensor, size))
        valid = graph.call_function(aten.logical_and.default, (at_least, below))
        check = graph.call_function(aten._assert_async.msg, (valid, message))
        safe = graph.call_function(aten.where.ScalarOther, (valid, as_tensor, 0))
        read = graph.call_function(aten.item.default, (safe,))
    fake_index = index.meta["val"]
    shape_env = fake_index.node.shape_env
    with fake_table.fake_mode:
        as_tensor.meta["val"] = torch.empty((), dtype=torch.int64)
        for added in (at_least, below, valid):
            added.meta["val"] = torch.empty((), dtype=torch.bool)
        check.meta["val"] = None
        safe.meta["val"] = torch.empty((), dtype=torch.int64)
        # The read's value is a new unbacked symbol; bound here, as export binds its own.
        read.meta["val"] = aten.item.default(safe.meta["val"])
    from torch.fx.experimental.symbolic_shapes import compute_unbacked_bindings

    read.meta["unbacked_bindings"] = compute_unbacked_bindings(shape_env, read.meta["val"])
    for added in (as_tensor, at_least, below, valid, check, safe, read):
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in node.meta:
                added.meta[key] = node.meta[key]
    node.args = (table, node.args[1], read)
    report.guarded.append(f"{node.name}: {where}")
    report.messages.append(message)


_SELECT_RULE = IndexRule(dim_arg=1, index_arg=2, wraps=True)


def _runs_as_extern_kernel(op: object) -> bool:
    """Inductor calls eager's kernel for this op (a fallback), which checks its indices
    in ATen's parallel_for, whose errors leave the parallel region (with ATen's words,
    e.g. "Expected i < index_size to be true")."""
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
            size_text = "its size at run time" if dim is None else f"the size of dim {dim} at run time"
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
        safe = graph.call_function(aten.where.ScalarOther, (valid, index, 0))
    with fake_index.fake_mode:
        at_least.meta["val"] = aten.ge.Scalar(fake_index, 0)
        below.meta["val"] = aten.lt.Scalar(fake_index, 0)
        valid.meta["val"] = aten.logical_and.default(at_least.meta["val"], below.meta["val"])
        every.meta["val"] = aten.all.default(valid.meta["val"])
        check.meta["val"] = None
        safe.meta["val"] = aten.where.ScalarOther(valid.meta["val"], fake_index, 0)
    for added in new + [at_least, below, valid, every, check, safe]:
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in node.meta:
                added.meta[key] = node.meta[key]
    report.guarded.append(f"{node.name}: {where}")
    report.messages.append(message)
    return safe


def _message(where: str, node: torch.fx.Node, index: torch.fx.Node, dim: int | None, size: str,
             rule: IndexRule, user_inputs: list[str]) -> str:
    """One line: the op, the valid range, where the index comes from, the fix. It is
    compiled into a C++ string literal, so it holds printable ASCII without quotes."""
    if size.isdigit():
        n = int(size)
        valid = f"{-n}..{n - 1}" if rule.wraps else f"0..{n - 1}"
    else:
        valid = "-N..N-1" if rule.wraps else "0..N-1"
        size = f"N = {size}"
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
            and node.target.overloadpacket in _SHAPE_ONLY and node.args and _keeps_integers(node):
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


def _keeps_integers(node: torch.fx.Node) -> bool:
    """The op's input holds integers too: a conversion from a float computes values."""
    source = node.args[0]
    fake = getattr(source, "meta", {}).get("val") if isinstance(source, torch.fx.Node) else None
    return isinstance(fake, torch.Tensor) and not fake.dtype.is_floating_point and not fake.dtype.is_complex


def _op_name(node: torch.fx.Node) -> str:
    """The op and, where it sits in a submodule, the module's path: ``embedding in
    'encoder.embed'``."""
    name = node.target.overloadpacket.__name__.strip("_")
    original = node.meta.get("original_aten")
    packet = getattr(original, "overloadpacket", None)
    if packet is not None and packet is not node.target.overloadpacket and packet not in _RULES_PACKETS:
        name += f" (of {packet.__name__.strip('_')})"
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


@contextlib.contextmanager
def asserts_outside_kernels() -> Iterator[None]:
    """Compile every ``_assert_async`` as a call from the wrapper (through AOTI's proxy
    executor, to eager's kernel, which raises the message), not as Inductor's
    lowering: that one puts the throw in a generated kernel, which Inductor may merge
    with parallel loops into one ``#pragma omp parallel`` region (seen in a BERT),
    where the throw ends the process."""
    import logging

    from torch._inductor import lowering

    op = aten._assert_async.msg
    saved = lowering.lowerings.get(op)
    lowering.lowerings[op] = lowering.fallback_handler(op, add_to_fallback_set=False)
    # Inductor warns that the op has no C shim and goes through the proxy executor: that
    # is the point here.
    ir_log = logging.getLogger("torch._inductor.ir")
    level = ir_log.level
    ir_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        ir_log.setLevel(level)
        if saved is None:
            lowering.lowerings.pop(op, None)
        else:
            lowering.lowerings[op] = saved


def guards_in_parallel_regions(package_path: str | Path) -> list[str]:
    """The lines of the package's generated kernels where a check's throw sits inside
    an OpenMP parallel region (there it would end the process, not fail the run)."""
    with zipfile.ZipFile(package_path) as archive:
        sources = [archive.read(name).decode("utf-8", "replace") for name in archive.namelist()
                   if name.endswith(".cpp")]
    found = []
    for source in sources:
        lines = source.splitlines()
        found += [lines[n].strip() for n in _lines_in_parallel_regions(lines)
                  if GUARD_PREFIX in lines[n] and "throw" in lines[n]]
    return found


_STOPPED = "the generated code throws an index check's error inside an OpenMP parallel region"


class _ThrowInParallelRegion(Exception):
    """Raised from inside Inductor's compile, before its C++ compile, when the code it
    generated throws a check's error inside a parallel region."""

    def __init__(self) -> None:
        super().__init__(_STOPPED)


def _throws_in_parallel_regions(source: str) -> bool:
    lines = source.splitlines()
    return any(GUARD_PREFIX in lines[n] and "throw" in lines[n] for n in _lines_in_parallel_regions(lines))


# AotCodeCompiler.compile is replaced while any thread's first compile runs (a count,
# under the lock), and the replacement stops only the compiles of the threads that
# asked (a thread's flag): exports in two threads neither stop each other's compiles
# nor leave the replacement in place.
_HOOK_LOCK = threading.Lock()
_HOOK_USERS = 0
_HOOK_ORIGINAL: classmethod | None = None  # type: ignore[type-arg]
_THIS_THREAD = threading.local()


def _compile_unless_a_throw_is_parallel(cls: type, *args: object, **kwargs: object) -> object:
    if getattr(_THIS_THREAD, "stopping", False) and any(
            isinstance(code, str) and _throws_in_parallel_regions(code) for code in (*args, *kwargs.values())):
        raise _ThrowInParallelRegion
    assert _HOOK_ORIGINAL is not None
    return _HOOK_ORIGINAL.__func__(cls, *args, **kwargs)


@contextlib.contextmanager
def _stop_before_the_cpp_compile_on_a_parallel_throw() -> Iterator[None]:
    """Read the C++ Inductor generated before AOTInductor's C++ compiler runs on it
    (``AotCodeCompiler.compile``, given the wrapper's and the kernels' code), and end
    this thread's compile there with ``_ThrowInParallelRegion`` when a check throws
    inside a parallel region: the compile again with the checks outside kernels then
    follows without a C++ compile in between (a transformer's first C++ compile is
    ~half its export). The package's own code is still read after the compile; where
    Inductor has no such hook, nothing is stopped early."""
    global _HOOK_USERS, _HOOK_ORIGINAL
    try:
        from torch._inductor.codecache import AotCodeCompiler
    except ImportError:
        yield
        return
    with _HOOK_LOCK:
        if _HOOK_USERS:
            _HOOK_USERS += 1
        elif isinstance(original := AotCodeCompiler.__dict__.get("compile"), classmethod):
            _HOOK_ORIGINAL, _HOOK_USERS = original, 1
            AotCodeCompiler.compile = classmethod(_compile_unless_a_throw_is_parallel)  # type: ignore[method-assign,assignment]
        hooked = _HOOK_USERS > 0
    if not hooked:
        yield
        return
    _THIS_THREAD.stopping = True
    try:
        yield
    finally:
        _THIS_THREAD.stopping = False
        with _HOOK_LOCK:
            _HOOK_USERS -= 1
            if _HOOK_USERS == 0:
                # _HOOK_ORIGINAL stays: a compile of another thread may be inside the
                # replacement still, and calls through it.
                AotCodeCompiler.compile = _HOOK_ORIGINAL  # type: ignore[method-assign,assignment]


def _stopped_for_a_parallel_throw(error: BaseException) -> bool:
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, _ThrowInParallelRegion) or _STOPPED in str(cause):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def compile_with_checks_outside_parallel(compile: Callable[[], Path], messages: list[str]) -> Path:
    """Run ``compile`` (which writes a package and returns its path); where Inductor
    merged a check's throw into a parallel region, run it again with every check a call
    from the wrapper (a proxy call each, about 2 us). The first compile stops at the
    generated code when that shows such a throw, before its C++ compile.

    Raises:
        CompileError: a check's throw still inside a parallel region.
    """
    if not messages:
        return compile()
    try:
        with _stop_before_the_cpp_compile_on_a_parallel_throw():
            path = compile()
    except CompileError as error:
        if not _stopped_for_a_parallel_throw(error):
            raise
    else:
        if not guards_in_parallel_regions(path):
            return path
    with asserts_outside_kernels():
        path = compile()
    check_guards_outside_parallel(path, messages)
    return path


def check_guards_outside_parallel(package_path: str | Path, messages: list[str]) -> None:
    """Refuse a package in whose compiled kernels a check's throw sits inside an
    OpenMP parallel region.

    Raises:
        CompileError: a check's message inside ``#pragma omp parallel``.
    """
    if not messages:
        return
    found = guards_in_parallel_regions(package_path)
    if found:
        raise CompileError(
            f"an index check was compiled inside an OpenMP parallel region of a generated kernel, where its error "
            f"would end the process: {found[0][:200]}. This torch ({torch.__version__}) compiles checks in a way "
            "the toolkit does not support; report it with the model.")


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
