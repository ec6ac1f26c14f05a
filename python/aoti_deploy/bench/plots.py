"""The PNGs the benchmarks write: p50 latency bars per path, grouped by size or batch,
on a log scale, each bar labelled with its ratio."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def latency_figure() -> tuple[Any, Any]:
    """A new figure and its axes, drawn off screen (Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(10, 5.5))


def label_bar(axes: Any, bar: Any, text: str) -> None:
    """``text`` (a ratio) centred above ``bar``."""
    axes.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=7)


def save_latency_figure(figure: Any, axes: Any, path: Path, groups: list[str], title: str) -> Path:
    """Finish the bars on ``axes`` (log scale, ``groups`` as the x labels, ``title``,
    legend, grid) and write ``figure`` to ``path`` as a PNG; the figure is closed."""
    import matplotlib.pyplot as plt

    axes.set_yscale("log")
    axes.set_xticks(range(len(groups)), groups)
    axes.set_ylabel("p50 latency (µs, log scale)")
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8)
    axes.grid(axis="y", which="both", alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
