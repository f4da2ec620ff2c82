"""`hf-ot calibrate MODEL --config RECIPE [--tolerance T] [--ot-solver S ...] [--ot-num-steps M] [--write]`:
hf_ot.recipes.evaluate.calibrate_folder."""

from __future__ import annotations

import argparse

from ..models.ot_solver import SOLVERS
from ._common import (
    Outcome,
    add_ot_argument,
    add_overrides,
    add_trust_remote_code,
    positive_int,
    recipe,
    run_on_model_folder,
)

HELP = "pick the cheapest solver setting (solver x M') within a tolerance of the trained setting's metric"


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")  # refused below, with the text
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"the tolerance must be a finite number >= 0, got {text!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a saved model folder (e.g. runs/quickstart/model)")
    p.add_argument(
        "--config",
        type=recipe,
        required=True,
        help="the recipe (YAML file or packaged name) whose validation data to use",
    )
    add_overrides(p)
    p.add_argument(
        "--tolerance",
        type=_tolerance,
        default=None,
        help="how much worse than the trained setting the choice may be: nats of task loss (default 0.01; without "
        "lambda * reg, which changes with the solver) for LMs and "
        "translation, a fraction of accuracy (default 0.005 = 0.5 points) for classifiers",
    )
    grid = "the solvers of the grid (fixed-grid ones; default all three)"
    add_ot_argument(p, "ot_solver", grid, nargs="+", choices=tuple(SOLVERS), metavar="{" + ",".join(SOLVERS) + "}")
    add_ot_argument(p, "ot_num_steps", "the largest M' of the grid (default twice the trained M)")
    p.add_argument("--max-batches", type=positive_int, default=None, help="evaluate on this many validation batches")
    p.add_argument(
        "--write",
        action="store_true",
        help="store the choice in the folder's config (the trained setting kept), add a table and figure to its card",
    )
    add_trust_remote_code(p)


def run(args: argparse.Namespace) -> Outcome:
    grid = dict(solvers=args.ot_solver, max_steps=args.ot_num_steps)
    return run_on_model_folder(
        args, "calibrate_folder", tolerance=args.tolerance, write=args.write, max_batches=args.max_batches, **grid
    )
