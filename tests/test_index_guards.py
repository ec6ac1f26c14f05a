"""Indices computed from inputs (``ids * 3 + 7``, ``picks * 2 + 1``...) before they
index: the package checks every index of every indexing op outside any parallel
region, so one bad value fails its run with one line and exit 2 in both runners (as
processes), where the compiled kernel used to abort the process. Good values keep
eager's bits. The pass and its scan of the compiled kernels are tested on their own
too."""

from __future__ import annotations

import contextlib
import resource
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT, Build, UserPackage, run_cli, run_cmd
from aoti_deploy.compiler.index_guards import GUARD_PREFIX, check_guards_outside_parallel, guard_indices
from aoti_deploy.errors import CompileError
from aoti_deploy.package.archive import read_package_spec
from aoti_deploy.runtime.tensor_files import save_tensors
from aoti_deploy.verify.bits import bit_view

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
from examples.index_models import (  # noqa: E402
    ComputedIndexModel, LateIndexModel, computed_index_inputs, late_index_inputs,
)


def _cpp_sources(package: Path | str) -> str:
    """Every generated C++ file of a package, joined."""
    with zipfile.ZipFile(package) as archive:
        return "\n".join(archive.read(n).decode() for n in archive.namelist() if n.endswith(".cpp"))


# input, position, bad value, what the one line says (which op, its range, the source).
BAD_VALUES = {
    "embedding of ids * 3 + 7, one past": (0, (1, 3), 331, "embedding in 'embedding' takes indices in 0..999 (its "
                                           "rows, 1000); an index computed from input[0] (ids) is outside it"),
    "embedding of ids * 3 + 7, negative": (0, (0, 5), -3, "embedding in 'embedding' takes indices in 0..999"),
    "take of picks * 2 + 1": (1, (0, 2), 2500, "take takes indices in -5000..4999 (its elements, 5000); an index "
                              "computed from input[1] (picks) is outside it"),
    "scatter and scatter_add at slots + 2": (2, (1, 1), 18, "takes indices in 0..19 (dim 1, 20); an index computed "
                                             "from input[2] (slots) is outside it"),
    "index_put at cells + 1": (3, (0, 0), -32, "index_put takes indices in -30..29 (dim 1, 30); an index computed "
                               "from input[3] (cells) is outside it"),
    "index_select at rows * 2": (4, (1, 1), 6, "index_select takes indices in 0..11 (dim 0, 12); an index computed "
                                 "from input[4] (rows) is outside it"),
    "tensor indexing at spots - 1": (5, (0, 3), -12, "index takes indices in -12..11 (dim 0, 12); an index "
                                     "computed from input[5] (spots) is outside it"),
    "gather at cols - 2": (6, (1, 2), 9, "gather takes indices in 0..6 (dim 1, 7); an index computed from input[6] "
                           "(cols) is outside it"),
}
# An op Inductor runs as an extern kernel (eager's code) checks its own indices, outside
# any parallel region, in ATen's words: exit 2 and one line all the same.
EXTERN_BAD_VALUES = {
    "embedding_bag at bags * 2": (7, (1, 0), 25, "Expected i < index_size to be true"),
}


def _no_core() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _same_bits(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and torch.equal(bit_view(x), bit_view(y)) for x, y in zip(a, b)
    )


def _run_both(build: Build, package: Path, tmp: Path, inputs: Path) -> tuple[object, object]:
    py = run_cli("run_inference", package, "--inputs", inputs, "--outputs", tmp / "py.pt", cwd=tmp, build=build)
    cpp = run_cmd(build.runner, package, "--inputs", inputs, "--outputs", tmp / "cpp.pt", preexec_fn=_no_core)
    return py, cpp


def _assert_both_give_eagers_bits(model: torch.nn.Module, inputs: list[torch.Tensor], package: UserPackage,
                                  build: Build, tmp_path: Path) -> None:
    with torch.no_grad():
        eager = list(model(*inputs))
    py, cpp = _run_both(build, package.path, tmp_path, save_tensors(tmp_path / "in.pt", inputs))
    assert py.returncode == 0, py.stdout + py.stderr
    assert cpp.returncode == 0, cpp.stdout + cpp.stderr
    assert _same_bits(torch.load(tmp_path / "py.pt"), eager)
    assert _same_bits(torch.load(tmp_path / "cpp.pt"), eager)


def _assert_both_fail_with_one_line(model: torch.nn.Module, inputs: list[torch.Tensor], package: UserPackage,
                                    build: Build, tmp_path: Path, words: str) -> list[object]:
    """Eager refuses ``inputs`` too; both runners exit 2 with one line that holds
    ``words``, and write no outputs. Returns both results, for what a test checks
    besides."""
    with pytest.raises((IndexError, RuntimeError)):
        model(*inputs)
    results = _run_both(build, package.path, tmp_path, save_tensors(tmp_path / "in.pt", inputs))
    for result in results:
        assert result.returncode == 2, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
        # One line, and no echo of it from the runtime.
        assert result.stderr.count("\n") == 1 and words in result.stderr, result.stderr
    assert not (tmp_path / "py.pt").exists() and not (tmp_path / "cpp.pt").exists()
    return list(results)


def test_the_package_records_its_checks(computed_index_package: UserPackage) -> None:
    # 9 indices: one for each op but embedding_bag (an extern kernel, which checks its
    # own), two for index_put (the batch rows and the cells).
    assert "; 9 index check(s), 1 op(s) checking their own (extern kernels); " in read_package_spec(
        computed_index_package.path).optimizations


def test_every_check_throws_outside_a_parallel_region(computed_index_package: UserPackage) -> None:
    """The compile refuses a package otherwise; this reads the kernels again, and finds
    every op's check in them."""
    kernels = _cpp_sources(computed_index_package.path)
    throws = [line for line in kernels.splitlines() if GUARD_PREFIX in line and "throw" in line]
    ops = ["embedding in 'embedding'", "take", "scatter", "scatter_add", "index_put", "index_select", "index",
           "gather"]
    for op in ops:
        assert any(f"{GUARD_PREFIX}: {op} takes" in line for line in throws), op
    check_guards_outside_parallel(computed_index_package.path, ["any"])


def test_good_values_at_every_bound_run_with_eagers_bits(computed_index_package: UserPackage, build: Build,
                                                        tmp_path: Path) -> None:
    _assert_both_give_eagers_bits(ComputedIndexModel(), list(computed_index_inputs(batch=3, seed=12)),
                                  computed_index_package, build, tmp_path)


@pytest.mark.parametrize("case", [*BAD_VALUES, *EXTERN_BAD_VALUES])
def test_a_computed_index_out_of_range_fails_with_one_line(case: str, computed_index_package: UserPackage,
                                                           build: Build, tmp_path: Path) -> None:
    """The package's own checks say which op, its range and the fix; an extern kernel's
    bad index fails in ATen's words, with no line of the package's checks."""
    checked = case in BAD_VALUES
    i, position, value, words = BAD_VALUES[case] if checked else EXTERN_BAD_VALUES[case]
    inputs = list(computed_index_inputs())
    inputs[i][position] = value
    for result in _assert_both_fail_with_one_line(ComputedIndexModel(), inputs, computed_index_package, build,
                                                  tmp_path, words):
        assert (f": {GUARD_PREFIX}: " in result.stderr) == checked, result.stderr
        assert ("Pass inputs whose indices fall in" in result.stderr) == checked, result.stderr


# input, position (None for a 0-d input), bad value, what the one line says.
LATE_BAD_VALUES = {
    "cross_entropy's target, after Inductor's decomposition": (
        1, (2,), 4, "gather (of nll_loss_forward) takes indices in 0..4 (dim 1, 5); an index computed from input[1] "
                    "(targets) is outside it"),
    "an index after a two-dim bool mask, checked against dim 2": (
        4, (1,), 5, "index_put takes indices in -9..8 (dim 2, 9); an index computed from input[4] (cols)"),
    "an index read with .item()": (
        5, None, 9, "select takes indices in -10..9 (dim 0, 10); an index computed from input[5] (row)"),
}


def test_late_indices_in_range_run_with_eagers_bits(late_index_package: UserPackage, build: Build,
                                                    tmp_path: Path) -> None:
    """Including a col of 4 (index 8), valid for dim 2 though not for the mask's dims."""
    _assert_both_give_eagers_bits(LateIndexModel(), list(late_index_inputs()), late_index_package, build, tmp_path)


@pytest.mark.parametrize("case", list(LATE_BAD_VALUES))
def test_a_late_index_out_of_range_fails_with_one_line(case: str, late_index_package: UserPackage, build: Build,
                                                       tmp_path: Path) -> None:
    i, position, value, words = LATE_BAD_VALUES[case]
    inputs = list(late_index_inputs())
    if position is None:
        inputs[i] = torch.tensor(value)
    else:
        inputs[i][position] = value
    _assert_both_fail_with_one_line(LateIndexModel(), inputs, late_index_package, build, tmp_path, words)


# --- the pass and the scan, without a compile --------------------------------------------

class _Lookups(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 2)

    def forward(self, ids: torch.Tensor, offset: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        return self.emb(ids.view(-1)).sum() + table[ids + offset].sum() + torch.gather(table, 1, ids).sum()


def test_the_pass_names_the_op_the_input_and_the_range() -> None:
    ids, offset, table = torch.tensor([[1, 2]]), torch.tensor([[0, 1]]), torch.randn(4, 5)
    model = _Lookups()
    program = torch.export.export(model, (ids, offset, table),
                                  dynamic_shapes=({}, {}, {0: torch.export.Dim("rows", min=2, max=9)}))
    program, report = guard_indices(program)
    assert len(report.messages) == 3, report.messages
    embedding, indexing, gather = report.messages
    assert "embedding in 'emb' takes indices in 0..9 (its rows, 10); an index of input[0] (ids) is outside" \
        in embedding
    # A table whose size is dynamic: the check reads the size at run time.
    assert "index takes indices in -N..N-1 (dim 0, N = the size of dim 0 at run time)" in indexing and "computed from input[0] (ids), input[1] (offset)" \
        in indexing
    assert "gather takes indices in 0..4 (dim 1, 5); an index of input[0] (ids)" in gather
    assert sum(1 for n in program.graph.nodes if n.target is torch.ops.aten._assert_async.msg) == 3
    # The program still runs, and refuses a bad index with the message.
    module = program.module()
    with torch.no_grad():
        assert _same_bits([module(ids, offset, table)], [model(ids, offset, table)])
    with pytest.raises(RuntimeError, match="index out of range: gather"):
        module(torch.tensor([[1, 7]]), torch.tensor([[0, 0]]), torch.randn(9, 5))


def _package_with_kernel(tmp: Path, source: str) -> Path:
    path = tmp / "model.pt2"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("model/data/aotinductor/model/kernel.cpp", source)
    return path


def test_the_scan_refuses_a_check_inside_a_parallel_region(tmp_path: Path) -> None:
    throw = f'(tmp1 ? 0 : (throw std::runtime_error("{GUARD_PREFIX}: gather ..."), 0));'
    inside = f"void k() {{\n    #pragma omp parallel\n    {{\n        {{\n            {throw}\n        }}\n    }}\n}}\n"
    with pytest.raises(CompileError, match="inside an OpenMP parallel region"):
        check_guards_outside_parallel(_package_with_kernel(tmp_path, inside), ["any"])
    between = f"void k() {{\n    #pragma omp parallel\n    {{\n    }}\n    {{\n        {throw}\n    }}\n}}\n"
    check_guards_outside_parallel(_package_with_kernel(tmp_path, between), ["any"])


def test_checks_called_from_the_wrapper_refuse_with_the_message(tmp_path: Path) -> None:
    """The compile's second way, taken when Inductor merges a check's kernel into a
    parallel region (a BERT did): every check a call from the wrapper, none in a kernel,
    and a bad index refused with the toolkit's message."""
    from aoti_deploy.compiler.index_guards import asserts_outside_kernels, guards_in_parallel_regions

    ids, offset, table = torch.tensor([[1, 2]]), torch.tensor([[0, 1]]), torch.randn(4, 5)
    model = _Lookups()
    program, report = guard_indices(torch.export.export(model, (ids, offset, table)))
    with asserts_outside_kernels():
        path = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "wrapper.pt2"))
    kernels = _cpp_sources(path)
    assert GUARD_PREFIX not in kernels and not guards_in_parallel_regions(path)
    compiled = torch._inductor.aoti_load_package(path)
    with torch.no_grad():  # compiled against eager: torch.testing's tolerance (sums reorder)
        torch.testing.assert_close(compiled(ids, offset, table), model(ids, offset, table))
    with pytest.raises(RuntimeError, match="^index out of range: gather takes indices in 0..4"):
        compiled(torch.tensor([[1, 5]]), torch.tensor([[0, -3]]), table)


class _PooledRows(torch.nn.Module):
    """Embedding, LayerNorm, Linear, then one row per example: Inductor merges the
    row index's check into the parallel region of the loops around it (as in a BERT)."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding, self.norm, self.linear = torch.nn.Embedding(100, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 32)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(ids.shape[0])
        return self.linear(self.norm(self.embedding(ids)))[rows, 0] * 2


def test_a_check_merged_into_a_parallel_region_costs_one_cpp_compile(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The export reads the code Inductor generated before its C++ compile: where a
    check's throw sits in a parallel region, that compile stops there, and only the
    compile with the checks outside kernels runs the C++ compiler. The package has no
    throw in a parallel region, and a bad id is refused with the range it breaks."""
    import aoti_deploy as ad
    from aoti_deploy.compiler.index_guards import guards_in_parallel_regions
    from torch._inductor.codecache import AotCodeCompiler

    cpp_compiles = []
    real = AotCodeCompiler.__dict__["compile"]

    def counted(cls: type, *args: object, **kwargs: object) -> object:
        cpp_compiles.append(kwargs.get("device_type"))
        return real.__func__(cls, *args, **kwargs)

    monkeypatch.setattr(AotCodeCompiler, "compile", classmethod(counted))
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 16))
    package = ad.export(_PooledRows().eval(), (ids,), package_path=tmp_path / "rows.pt2")
    assert package.report.passed, package.report
    assert cpp_compiles == ["cpu"]
    # The one C++ compile is the second way's: no check is a throw in a kernel.
    kernels = _cpp_sources(package.path)
    assert GUARD_PREFIX not in kernels and not guards_in_parallel_regions(package.path)
    with pytest.raises(Exception, match=r"value 100 at \[0, 1\] is outside \[0, 99\]"):
        package(torch.tensor([[1, 100] + [0] * 14, [0] * 16]))


def test_threads_first_compiles_stop_only_their_own_and_restore_inductor() -> None:
    """Exports in threads, their first compiles overlapping: a compile of a thread that
    asked for no stop is not stopped while another's stop is in place; of two that
    asked, the one that enters first leaves first and the other's compile still stops;
    after both, Inductor's compile is its own again."""
    import threading

    from aoti_deploy.compiler.index_guards import _stop_before_the_cpp_compile_on_a_parallel_throw
    from torch._inductor.codecache import AotCodeCompiler

    original = AotCodeCompiler.__dict__["compile"]
    parallel = f"#pragma omp parallel\n{{\n    throw std::runtime_error(\"{GUARD_PREFIX}: x\");\n}}\n"
    stopped: dict[str, bool] = {}
    steps = {name: threading.Event() for name in ("a in", "b in", "c done", "a out")}

    def compile_once(name: str) -> None:
        try:
            AotCodeCompiler.compile(None, parallel, "", None, device_type="cpu", additional_files=[])
        except Exception as error:  # noqa: BLE001 - which one is the point
            stopped[name] = type(error).__name__ == "_ThrowInParallelRegion"

    def a() -> None:
        with _stop_before_the_cpp_compile_on_a_parallel_throw():
            steps["a in"].set()
            assert steps["b in"].wait(30) and steps["c done"].wait(30)
            compile_once("a")
        steps["a out"].set()

    def b() -> None:
        assert steps["a in"].wait(30)
        with _stop_before_the_cpp_compile_on_a_parallel_throw():
            steps["b in"].set()
            assert steps["a out"].wait(30)
            compile_once("b")

    def c() -> None:  # no stop asked: Inductor's own compile runs, and fails on the bare strings
        assert steps["b in"].wait(30)
        compile_once("c")
        steps["c done"].set()

    threads = [threading.Thread(target=f) for f in (a, b, c)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert stopped == {"a": True, "b": True, "c": False}
    assert AotCodeCompiler.__dict__["compile"] is original


def test_max_pooling_decomposes_in_a_fresh_process() -> None:
    """The guards decompose the graph as Inductor will, before anything has imported
    Inductor's lowerings; max_pool2d's decomposition needs them (a ResNet failed to
    export from a fresh script)."""
    code = (
        "import torch\n"
        "from aoti_deploy.compiler.index_guards import guard_indices\n"
        "m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.MaxPool2d(3, 2, 1)).eval()\n"
        "with torch.no_grad():\n"
        "    program = torch.export.export(m, (torch.randn(1, 3, 16, 16),))\n"
        "    guarded, report = guard_indices(program)\n"
        "print('decomposed', report.summary())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("decomposed ")
