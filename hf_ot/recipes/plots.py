"""Figures (matplotlib, files only): learning curves with min-max bands, lines with error bars."""

from __future__ import annotations

import contextlib
from pathlib import Path

Point = tuple[float, float, float]  # (x, mean, std)


@contextlib.contextmanager
def _figure(path: Path, xlabel: str, ylabel: str, title: str):
    """Axes to draw on, saved to `path` on exit with one legend of every axis (a Figure of its own: no pyplot)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4), layout="tight")
    ax = fig.subplots(subplot_kw=dict(xlabel=xlabel, ylabel=ylabel, title=title))
    yield ax
    handles = [h for axes in fig.axes for h in axes.get_legend_handles_labels()[0]]  # (a twin axis's too)
    fig.axes[-1].legend(handles=handles, fontsize="small", loc="best")  # on top, where it hides the fewest points
    fig.savefig(path, dpi=120)


def curve(history: list[dict], *keys: str) -> list[tuple[int, float]]:
    """(step, value) of the first of `keys` that Trainer's log history holds with steps ([] when none does)."""
    for key in keys:
        if points := [(h["step"], h[key]) for h in history if key in h and "step" in h]:
            return points
    return []


def plot_curves(groups: dict[str, list[list[tuple[int, float]]]], path: Path, title: str) -> None:
    """Learning curves: one line per group (mean over its runs, as long as the shortest), a band from min to max."""
    import numpy as np

    with _figure(path, "optimizer step", "training task loss", title) as ax:
        for label, curves in groups.items():
            n = min(map(len, curves))
            steps = [s for s, _ in curves[0][:n]]
            values = np.array([[v for _, v in c[:n]] for c in curves], dtype=float)
            ax.plot(steps, values.mean(0), label=label)
            if len(curves) > 1:
                ax.fill_between(steps, values.min(0), values.max(0), alpha=0.2)


def plot_xy(series: dict[str, list[Point]], path: Path, xlabel: str, ylabel: str, title: str, logx=False) -> None:
    """Lines with error bars: series name -> [(x, mean, std)]."""
    with _figure(path, xlabel, ylabel, title) as ax:
        for label, points in series.items():
            xs, ys, es = zip(*points)  # the legend shows the line, with its error bar where there is one
            ax.errorbar(xs, ys, yerr=es if any(es) else None, marker="o", capsize=3, label=label)
        if logx:
            ax.set_xscale("symlog", linthresh=0.01)


def plot_training_curves(history: list[dict], path: Path, task: str = "causal-lm") -> Path | None:
    """A run's training and validation task loss and, on a second axis, reg; None when nothing was logged."""
    train, val = curve(history, "task_loss", "loss"), curve(history, "eval_task_loss", "eval_loss")
    reg = curve(history, "reg")
    if not (train or val):
        return None
    ylabel = "task loss" if task == "sequence-classification" else "task loss (token cross-entropy)"
    with _figure(path, "optimizer step", ylabel, "training curves") as ax:
        for points, label in ((train, "training task loss"), (val, "validation task loss")):
            if points:
                ax.plot(*zip(*points), marker="." if len(points) < 20 else None, label=label)
        if reg:  # on a second axis
            ax2 = ax.twinx()
            ax2.plot(*zip(*reg), color="tab:green", linestyle="--", label="reg (training)")
            ax2.set_ylabel("reg")
    return path
