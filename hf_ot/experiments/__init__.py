"""Experiments: evaluation of saved models (optionally under test-time noise), seeds, lambda / M sweeps, plots, and
the paper's Shakespeare-char comparison (`hf-ot paper`). One concern per module: evaluate, sweeps, plots, paper."""

from .evaluate import evaluate_folder, lm_eval_dataset, load_for_eval, set_solver
from .paper import PAPER_FULL, paper, report_markdown
from .plots import plot_curves, plot_xy
from .sweeps import robustness, run_grid, set_key, summarize, sweep

__all__ = ["PAPER_FULL", "evaluate_folder", "lm_eval_dataset", "load_for_eval", "paper", "plot_curves", "plot_xy",
           "report_markdown", "robustness", "run_grid", "set_key", "set_solver", "summarize", "sweep"]
