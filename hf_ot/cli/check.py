"""`hf-ot check [BASE]`: hf_ot.check; exits 1 when one Euler step does not give the base model."""

from __future__ import annotations

import argparse

from ..errors import FAILED, OK
from ._common import Outcome, add_ot_argument, local_or_hub

HELP = "convert and check: M=1 (Euler) equals the base, reg for several M"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", nargs="?", default=None, help="hub id or local folder (default: embedded MiniLM)")
    add_ot_argument(p, "ot_num_steps", "solver step counts M", "--steps", nargs="+", default=[1, 2, 4, 8])
    help = "solver of the reg-per-M table (the M = 1 check always uses one Euler step)"
    add_ot_argument(p, "ot_solver", help, "--solver", default="euler")


def run(args: argparse.Namespace) -> Outcome:
    from pathlib import Path

    import hf_ot

    from ..checkpoints import read_json
    from ..errors import UsageError

    base = local_or_hub(args.base, "BASE") if args.base else None
    config = read_json(Path(base, "config.json")) if base else None  # (a local folder's; None for a Hub id)
    if isinstance(config, dict) and str(config.get("model_type", "")).startswith("ot_"):  # (any mode: no base in it)
        raise UsageError(
            f"{base} holds an OT model ({config.get('ot_mode', 'residual')} mode): check converts a base checkpoint "
            "and compares the conversion with it. Give the base checkpoint a model was converted from."
        )
    report = hf_ot.check(base, ot_num_steps=args.ot_num_steps, ot_solver=args.ot_solver)
    return Outcome(report, exit_code=OK if report["m1_equals_base"] else FAILED)
