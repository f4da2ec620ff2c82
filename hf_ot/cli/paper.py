"""`hf-ot paper`: hf_ot.recipes.paper.paper (the paper's Shakespeare-char comparison, sweeps and report)."""

from __future__ import annotations

import argparse

from ._common import Outcome, add_overrides

HELP = "the paper's Shakespeare-char experiments: seeds, noise test, sweeps, plots"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scale", choices=["cpu", "full"], default="cpu", help="full: the official sizes (GPU)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    add_overrides(p, help="applied to every run")
    p.add_argument(
        "--sweep-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="applied to the lambda / M sweep runs only (e.g. training.max_steps=500)",
    )
    p.add_argument("--out", default="runs/paper")
    p.add_argument("--overwrite", action="store_true", help="replace the runs of an earlier paper run in --out")


def run(args: argparse.Namespace) -> Outcome:
    from ..recipes.paper import paper

    report = paper(
        args.out,
        scale=args.scale,
        seeds=args.seeds,
        extra=args.set,
        sweep_overrides=args.sweep_set,
        overwrite=args.overwrite,
    )
    return Outcome(report)  # written (and recorded) into --out by the command itself
