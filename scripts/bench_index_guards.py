"""What the index checks (compiler/index_guards.py) cost: each model is exported once,
compiled twice, without and with the checks, and both packages run in this process
in alternating rounds on the same inputs. Prints each round's p50s and the median
ratio (checked / bare), with the host's CPU and its flags.

    .venv/bin/python scripts/bench_index_guards.py [--rounds 7] [--runs 300]

Models: a tiny BERT (transformers config, random weights, 1 x 128 tokens); an
embedding-heavy recommender (8 EmbeddingBag tables of 20000 x 32 at hashed ids, batch
64 x 20 ids per table, then an MLP); and a bare embedding lookup (8 x 64 ids into
1000 x 128), the worst case, since it does nothing but index.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "python"))

from aoti_deploy.compiler.index_guards import (  # noqa: E402
    GUARD_PREFIX, compile_with_checks_outside_parallel, guard_indices,
)

modes: dict[int, str] = {}  # how each model's checks were compiled, where not in its kernels


class Recommender(nn.Module):
    """Hashed ids into EmbeddingBag tables, concatenated, then an MLP: the shape of a
    recommendation model's sparse part."""

    def __init__(self, tables: int = 8, rows: int = 20000, width: int = 32) -> None:
        super().__init__()
        self.rows = rows
        self.bags = nn.ModuleList(nn.EmbeddingBag(rows, width, mode="sum") for _ in range(tables))
        self.mlp = nn.Sequential(nn.Linear(tables * width, 128), nn.ReLU(), nn.Linear(128, 1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pooled = [bag((ids[:, t] * 2654435761) % self.rows) for t, bag in enumerate(self.bags)]
        return self.mlp(torch.cat(pooled, dim=1))


def models() -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    from examples.hf_models import bert
    from examples.index_models import EmbeddingModel

    torch.manual_seed(0)
    bert_model, bert_inputs = bert(batch=1, sequence=128)
    recommender = Recommender().eval()
    ids = torch.randint(0, 1 << 30, (64, 8, 20))
    lookup = EmbeddingModel(1000, 128).eval()
    return {
        "BERT tiny, 1 x 128 tokens": (bert_model.eval(), tuple(bert_inputs)),
        "recommender, 8 EmbeddingBag tables, batch 64": (recommender, (ids,)),
        "embedding lookup only, 8 x 64 ids": (lookup, (torch.randint(0, 1000, (8, 64)),)),
    }


def compile_both(model: nn.Module, inputs: tuple[torch.Tensor, ...], folder: Path) -> tuple[object, object, int]:
    packages = []
    checks = 0
    for guarded in (False, True):
        with torch.no_grad():
            program = torch.export.export(model, inputs)
        if guarded:
            program, report = guard_indices(program)
            checks = len(report.guarded)
        target = str(folder / f"{id(model)}_{guarded}.pt2")
        path = compile_with_checks_outside_parallel(  # as the toolkit's compile does
            lambda: Path(torch._inductor.aoti_compile_and_package(program, package_path=target)),
            report.messages if guarded else [])
        if guarded and report.messages and not guards_in_kernels(path):
            modes[id(model)] = "called from the wrapper"
        packages.append(torch._inductor.aoti_load_package(path))
    return packages[0], packages[1], checks


def guards_in_kernels(path: Path) -> bool:
    """Whether the package's generated kernels hold the checks (else the wrapper calls them)."""
    with zipfile.ZipFile(path) as archive:
        return any(GUARD_PREFIX in archive.read(n).decode("utf-8", "replace")
                   for n in archive.namelist() if n.endswith(".cpp") and "wrapper" not in n)


def p50(package: object, inputs: tuple[torch.Tensor, ...], runs: int) -> float:
    times = []
    with torch.no_grad():
        for _ in range(runs):
            start = time.perf_counter()
            package(*inputs)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def cpu_text() -> str:
    model, flags = "unknown CPU", set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name") and model == "unknown CPU":
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags") and not flags:
            flags = set(line.split(":", 1)[1].split())
    wanted = ["avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_bf16"]
    return f"{model}; {' '.join(f for f in wanted if f in flags)}; {torch.get_num_threads()} threads"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=300)
    options = parser.parse_args()
    print(f"host: {cpu_text()}; torch {torch.__version__}")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, (model, inputs) in models().items():
            bare, checked, checks = compile_both(model, inputs, Path(folder))
            with torch.no_grad():
                leaves = [torch.utils._pytree.tree_leaves(package(*inputs)) for package in (bare, checked)]
            if any(a.contiguous().view(torch.uint8).ne(b.contiguous().view(torch.uint8)).any()
                   for a, b in zip(*leaves) if isinstance(a, torch.Tensor)):
                raise SystemExit(f"{name}: the checked package's bits differ from the bare one's")
            for package in (bare, checked):  # warm up
                p50(package, inputs, 20)
            ratios, bare_times, checked_times = [], [], []
            for _ in range(options.rounds):
                b = p50(bare, inputs, options.runs)
                c = p50(checked, inputs, options.runs)
                bare_times.append(b)
                checked_times.append(c)
                ratios.append(c / b)
            rows.append((f"{name} ({modes.get(id(model), 'checks in the kernels')})", checks,
                         statistics.median(bare_times), statistics.median(checked_times), statistics.median(ratios)))
            print(f"{name}: {checks} checks; rounds' ratios " + " ".join(f"{r:.3f}" for r in ratios), flush=True)
    print("\n| model | checks | p50 bare | p50 checked | checked / bare (median of rounds) |")
    print("|---|---:|---:|---:|---:|")
    for name, checks, b, c, ratio in rows:
        print(f"| {name} | {checks} | {b * 1e6:.0f} µs | {c * 1e6:.0f} µs | {ratio:.3f}× |")


if __name__ == "__main__":
    main()
