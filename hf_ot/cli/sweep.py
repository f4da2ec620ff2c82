"""`hf-ot sweep CONFIG --param KEY --values ...`: hf_ot.recipes.sweep.sweep (one run per value and seed, plots)."""

from __future__ import annotations

import argparse

from ._common import Outcome, add_overrides, recipe

HELP = "train one recipe per value of a setting; writes sweep.json and PNG plots"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=recipe, help="a recipe YAML file or the name of a packaged config")
    p.add_argument("--param", default="model.ot.ot_lambda", help="dotted config key, e.g. model.ot.ot_num_steps")
    p.add_argument("--values", nargs="+", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    add_overrides(p)
    p.add_argument("--out", default="runs/sweep")
    p.add_argument("--overwrite", action="store_true", help="replace the runs of an earlier sweep in --out")


def run(args: argparse.Namespace) -> Outcome:
    from ..recipes import sweep
    from ..recipes.config import override_key, parse_override

    param = override_key(args.param)  # (an earlier spelling: warned about)
    values = [parse_override(param, v) for v in args.values]  # as --set reads them, by the key's type
    summary = sweep.sweep(args.config, param, values, args.seeds, args.set, args.out, overwrite=args.overwrite)
    return Outcome(summary)  # written (and recorded) into --out by the command itself
