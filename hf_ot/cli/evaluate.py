"""`hf-ot evaluate MODEL --config RECIPE`: hf_ot.recipes.evaluate_folder (every recipe task, optionally under noise)."""

from __future__ import annotations

import argparse

from ._common import (
    Outcome,
    add_ot_argument,
    add_overrides,
    add_trust_remote_code,
    noise_rate,
    recipe,
    run_on_model_folder,
)

HELP = "evaluate a saved model on a recipe's validation data"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a saved model folder (e.g. runs/quickstart/model)")
    p.add_argument(
        "--config", type=recipe, required=True, help="the recipe (YAML file or packaged name) whose data to use"
    )
    add_overrides(p)
    p.add_argument(
        "--noise",
        type=noise_rate,
        nargs="*",
        default=[],
        help="test-time token noise rates (fractions 0-1), e.g. 0.05 0.1",
    )
    add_ot_argument(p, "ot_num_steps", "evaluate at this many solver steps M (set on the model's config)", "--steps")
    add_ot_argument(p, "ot_solver", "evaluate with this solver (set on the loaded model's config)", "--solver")
    add_trust_remote_code(p)


def run(args: argparse.Namespace) -> Outcome:
    return run_on_model_folder(
        args, "evaluate_folder", noise_rates=args.noise, ot_num_steps=args.ot_num_steps, ot_solver=args.ot_solver
    )
