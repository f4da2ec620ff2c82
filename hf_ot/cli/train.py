"""`hf-ot train [CONFIG]`: hf_ot.recipes.run_recipe on a recipe config; Ctrl-C says how to continue."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import exit_code, require
from ._common import Outcome, add_overrides, end_distributed, recipe

HELP = "run a recipe: convert or build, train, evaluate, save model + card"


class RecipeHelp(argparse.Action):
    """-h / --help: the options, then every recipe key of CONFIG (type, default, help; its value in CONFIG)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:
        from ..errors import UsageError
        from ..recipes.config import config_help, load_config

        name = getattr(namespace, "config", None) or "quickstart"
        try:
            config = load_config(name, getattr(namespace, "set", None) or [])
        except UsageError as err:
            config = None
            print(f"({err})\n", file=sys.stderr)
        print(parser.format_help())
        print(config_help(config))
        parser.exit()


def add_arguments(p: argparse.ArgumentParser) -> None:
    # argparse's own -h gives way to the one that also lists the recipe keys
    p.conflict_handler = p._optionals.conflict_handler = "resolve"
    p.add_argument("-h", "--help", action=RecipeHelp, help="show this help and every recipe key of CONFIG")
    p.add_argument(
        "config",
        type=recipe,
        nargs="?",
        default="quickstart",
        help="a recipe YAML file or the name of a packaged config (default: quickstart, offline, a few minutes on "
        "CPU). A recipe's task: causal-lm, sequence-classification or translation, or the transformers pipeline "
        "name text-generation, text-classification / sentiment-analysis, translation / summarization / "
        "text2text-generation",
    )
    add_overrides(p, help="override a config entry, e.g. --set training.max_steps=100 (repeatable)")
    p.add_argument("--output-dir", default=None, help="where the run goes (default: the config's output_dir)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start over in an output folder that holds an earlier run: replaces its model and results and "
        "deletes its checkpoints (never files hf_ot did not write)",
    )
    p.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        metavar="CHECKPOINT",
        help="continue the run from its newest complete checkpoint in OUTPUT_DIR/trainer, or from the checkpoint "
        "folder given, with the tokenizer, settings and data it was trained with (refused when there is none, or "
        "when they changed)",
    )


def interrupted_message(args: argparse.Namespace, output_dir: Path, trainer_dir: Path, started: float = 0.0) -> str:
    """Ctrl-C (or SIGTERM) during training: where the last complete checkpoint is and how to continue from it; or,
    when the signal came during the final save (it waits until the swap commits), that the new model is in place."""
    import shlex

    from ..checkpoints import last_complete_checkpoint, read_json
    from ..redaction import is_secret_key
    from ..run_folders import save_id_of

    model, results = Path(output_dir) / "model", Path(output_dir) / "results.json"
    # the final save committed (Ctrl-C and SIGTERM wait for its renames): results.json written by this command names
    # the model in place
    written = results.is_file() and started > 0 and results.stat().st_mtime >= started - 1  # (coarse mtimes)
    if written and (saved := save_id_of(model)) and (read_json(results) or {}).get("model_save_id") == saved:
        return (
            f"hf-ot train: interrupted after the run finished: the new model is complete and in place in {model}, "
            f"with {Path(output_dir) / 'results.json'} describing it. Nothing needs to be run again."
        )
    last = last_complete_checkpoint(trainer_dir)[0]
    if last:
        # a credential is not shown (it would print as <redacted>, and a pasted command would then resume with that)
        secret = [s for s in args.set if is_secret_key(s.partition("=")[0].strip())]
        again = [
            "hf-ot",
            "train",
            *([args.config] if args.config else []),
            *(arg for s in args.set if s not in secret for arg in ("--set", s)),
            *(["--output-dir", str(args.output_dir)] if args.output_dir else []),
            "--resume",
        ]
        keys = ", ".join(dict.fromkeys(s.partition("=")[0].strip() for s in secret))
        add = f"\n  (and your {keys} setting, not shown here: add it as you gave it)" if secret else ""
        command = shlex.join(again)
        return f"hf-ot train: interrupted. The last checkpoint is {last}; continue from it with:\n  {command}{add}"
    return (
        "hf-ot train: interrupted before its first checkpoint (one is saved at each training.save_steps, a step "
        "count or a fraction of the run, or each epoch; none when training.save_strategy is 'no'); no finished "
        "model was replaced. Run the same command again to start over (with --overwrite if the folder holds an "
        "earlier run)."
    )


def run(args: argparse.Namespace) -> Outcome:
    require("train", "accelerate", "datasets")
    from ..recipes import load_config, run_recipe

    if isinstance(args.resume, str) and args.resume.endswith((".yaml", ".yml")) and args.config == "quickstart":
        args.config, args.resume = args.resume, True  # `hf-ot train --resume CONFIG.yaml`: a config, not a checkpoint
    config = load_config(args.config, args.set)
    if args.output_dir:
        config.output_dir = args.output_dir
    started = time.time()  # (what an interrupt finds written after it is this run's)
    try:
        results = run_recipe(config, overwrite=args.overwrite, resume=args.resume)
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (Slurm preemption, docker stop, systemd): Terminated
        output_dir = config.resolved_output_dir()
        print(interrupted_message(args, output_dir, config.trainer_dir(output_dir), started), file=sys.stderr)
        return Outcome(None, exit_code=exit_code(err) or 130)
    end_distributed()
    return Outcome(results, result_file=Path(config.output_dir or f"runs/{config.task}") / "results.json")
