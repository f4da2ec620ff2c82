"""Figures (matplotlib, files only): learning curves with min-max bands, lines with error bars."""

from __future__ import annotations

import statistics
from pathlib import Path


def _axes():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(6, 4))


def _finish(fig, ax, path: Path, xlabel: str, ylabel: str, title: str) -> Path:
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_curves(groups: dict[str, list[list[tuple[int, float]]]], path: Path, title: str) -> Path:
    """Learning curves: one line per group (mean over its runs), the band is min..max over runs."""
    fig, ax = _axes()
    for label, curves in groups.items():
        steps = [s for s, _ in curves[0]]
        values = [[v for _, v in c][: len(steps)] for c in curves]
        mean = [statistics.mean(col) for col in zip(*values)]
        ax.plot(steps[: len(mean)], mean, label=label)
        if len(values) > 1:
            ax.fill_between(steps[: len(mean)], [min(c) for c in zip(*values)], [max(c) for c in zip(*values)],
                            alpha=0.2)
    return _finish(fig, ax, path, "optimizer step", "training loss (task + lambda * reg)", title)


def plot_xy(series: dict[str, list[tuple[float, float, float]]], path: Path, xlabel: str, ylabel: str, title: str,
            logx: bool = False) -> Path:
    """Lines with error bars: series name -> [(x, mean, std)]."""
    fig, ax = _axes()
    for label, points in series.items():
        xs, ys, es = zip(*points)
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=label)
    if logx:
        ax.set_xscale("symlog", linthresh=0.01)
    return _finish(fig, ax, path, xlabel, ylabel, title)
