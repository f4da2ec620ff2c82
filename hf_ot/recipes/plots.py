"""Figures (matplotlib, files only): learning curves with min-max bands, lines with error bars."""

from __future__ import annotations

import statistics
from pathlib import Path


def _axes():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(6, 4))


def _finish(fig, ax, path: Path, xlabel: str, ylabel: str, title: str, legend: bool = True) -> Path:
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
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
            ax.fill_between(
                steps[: len(mean)], [min(c) for c in zip(*values)], [max(c) for c in zip(*values)], alpha=0.2
            )
    return _finish(fig, ax, path, "optimizer step", "training task loss", title)


def plot_xy(
    series: dict[str, list[tuple[float, float, float]]],
    path: Path,
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = False,
) -> Path:
    """Lines with error bars: series name -> [(x, mean, std)]."""
    fig, ax = _axes()
    for label, points in series.items():
        xs, ys, es = zip(*points)
        (line,) = ax.plot(xs, ys, marker="o", label=label)  # the legend shows the line, not error-bar artists
        if any(es):
            ax.errorbar(xs, ys, yerr=es, fmt="none", capsize=3, color=line.get_color())
    if logx:
        ax.set_xscale("symlog", linthresh=0.01)
    return _finish(fig, ax, path, xlabel, ylabel, title)


def plot_training_curves(history: list[dict], path: Path, task: str = "causal-lm") -> Path | None:
    """A run's curves from Trainer's log history: the training task loss (OTTrainer's `task_loss`, else `loss`), the
    validation task loss (`eval_task_loss`, else `eval_loss`) and, on a second axis, reg. None when nothing was
    logged."""

    def series(*keys: str) -> list[tuple[int, float]]:
        for key in keys:
            points = [(h["step"], h[key]) for h in history if key in h and "step" in h]
            if points:
                return points
        return []

    train, val, reg = series("task_loss", "loss"), series("eval_task_loss", "eval_loss"), series("reg")
    if not (train or val):
        return None
    fig, ax = _axes()
    for points, label in ((train, "training task loss"), (val, "validation task loss")):
        if points:
            ax.plot(*zip(*points), marker="." if len(points) < 20 else None, label=label)
    if reg:
        ax2 = ax.twinx()
        ax2.plot(*zip(*reg), color="tab:green", linestyle="--", label="reg (training)")
        ax2.set_ylabel("reg")
        handles, labels = ax.get_legend_handles_labels()
        more, more_labels = ax2.get_legend_handles_labels()
        ax.legend(handles + more, labels + more_labels, fontsize="small")
    ylabel = "task loss" if task == "sequence-classification" else "task loss (token cross-entropy)"
    return _finish(fig, ax, path, "optimizer step", ylabel, "training curves", legend=not reg)
