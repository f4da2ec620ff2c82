"""`hf-ot robustness --models NAME=FOLDER ... --config RECIPE`: hf_ot.recipes.evaluate.robustness (noise test), on
every process of torchrun / accelerate launch (each run split across them; the main process writes)."""

from __future__ import annotations

import argparse

from ._common import (
    Outcome,
    add_overrides,
    add_trust_remote_code,
    check_data_of,
    end_distributed,
    local_or_hub,
    name_equals_folder,
    noise_rate,
    recipe,
)

HELP = "evaluate saved models under test-time token noise, side by side"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", type=name_equals_folder, nargs="+", required=True, metavar="NAME=FOLDER")
    p.add_argument(
        "--config", type=recipe, required=True, help="the recipe (YAML file or packaged name) whose data to use"
    )
    p.add_argument("--rates", type=noise_rate, nargs="+", default=[0.05, 0.1, 0.2], help="noise rates (fractions 0-1)")
    add_trust_remote_code(p)
    add_overrides(p)
    p.add_argument("--out", default="runs/robustness")


def run(args: argparse.Namespace) -> Outcome:
    from ..errors import UsageError
    from ..recipes import evaluate
    from ..run_folders import lock_outputs

    names = [name for name, _ in args.models]
    if len(set(names)) < len(names):
        raise UsageError(
            f"--models: the name {next(n for n in names if names.count(n) > 1)!r} is given twice; each "
            "model needs its own name (its row in the table)."
        )
    models = {name: local_or_hub(folder, f"--models {name}") for name, folder in args.models}
    cfg = evaluate.load_config(args.config, args.set)
    for model in models.values():
        check_data_of(model, cfg, args.set)
    with lock_outputs(args.out, "hf-ot robustness"):  # (the main process holds it; a refusal there ends the launch)
        table = evaluate.robustness(
            models, cfg, args.rates, args.set, args.out, trust_remote_code=args.trust_remote_code
        )
    end_distributed()  # under torchrun / accelerate launch: every run was split across the processes
    return Outcome(table)  # written (and recorded) into --out by the command itself
