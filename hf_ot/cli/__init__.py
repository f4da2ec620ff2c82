"""`hf-ot`: convert checkpoints to OT-Transformers, check them, train recipes, evaluate, sweep, push to the Hub.

Every command prints its result as JSON on stdout and writes it to a file (--result-file; train, sweep, robustness
and paper write into their output folder by default), printing its path on stderr; with --json stdout carries only
that JSON (logs and progress go to stderr). Exit codes: 0 done, 1 failed, 2 a usage error (bad arguments or config:
nothing was done), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM, handled as Ctrl-C).

Threads: torch runs with --threads N, else OMP_NUM_THREADS, else 1 per 4 usable cores (at most 4), the fastest for
small models such as the recipes' (`hf-ot env` says which and why).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from .. import errors
from . import calibrate, check, convert, env, evaluate, paper, push, robustness, sweep, train
from ._common import Outcome, is_main_process, positive_int

# One module per command, each a thin layer over a library function: HELP, add_arguments(parser), run(args).
COMMANDS: dict[str, ModuleType] = {
    "convert": convert,
    "check": check,
    "train": train,
    "evaluate": evaluate,
    "calibrate": calibrate,
    "sweep": sweep,
    "robustness": robustness,
    "paper": paper,
    "push": push,
    "env": env,
}


def build_parser() -> argparse.ArgumentParser:
    from ..env import package_version

    parser = argparse.ArgumentParser(
        prog="hf-ot", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--version", action="version", version=f"hf-ot {package_version('hf-ot') or 'unknown'}")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False, allow_abbrev=False)  # every command takes these
    common.add_argument("--json", action="store_true", help="print only the result JSON on stdout (logs to stderr)")
    common.add_argument(
        "--result-file",
        default=None,
        metavar="PATH",
        help="also write the result JSON here (train, sweep, robustness, paper: into their output folder by default)",
    )
    common.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        metavar="N",
        help="torch threads (default: OMP_NUM_THREADS, else 1 per 4 usable cores, at most 4: small models' fastest)",
    )
    for name, module in COMMANDS.items():
        command = sub.add_parser(
            name,
            help=module.HELP,
            description=module.HELP,
            epilog=getattr(module, "EPILOG", None),  # a command's advice beyond its options
            parents=[common],
            allow_abbrev=False,  # `train --out` is no --output-dir: a flag is spelt whole (then hinted, unrecognized)
        )
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


# commands that train: the tokenizers' thread pool would compete with training (and with DataLoader workers, forked
# after it started), so their parallelism is off unless TOKENIZERS_PARALLELISM says otherwise
TRAINING_COMMANDS = ("train", "sweep", "paper")


def set_threads(args: argparse.Namespace) -> None:
    """torch's intra-op threads as choose_threads says (--threads, OMP_NUM_THREADS, the default); args records why."""
    import os

    import torch

    from ..env import choose_threads

    n, args.threads_chosen_by = choose_threads(getattr(args, "threads", None))
    torch.set_num_threads(n)
    if args.command in TRAINING_COMMANDS:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# flags that name one thing in different commands (where the results go, the solver steps, the noise rates)
SAME_MEANING = (("--out", "--output-dir"), ("--ot-num-steps", "--steps", "--num-steps"), ("--rates", "--noise"))


def recipe_key(name: str) -> str | None:
    from ..recipes.config import _dotted, _schema

    return next((k for k in _dotted(_schema()) if k.rsplit(".", 1)[-1] == name), None)


def unrecognized(parser: argparse.ArgumentParser, name: str, unknown: list[str]) -> None:
    """argparse's usage error for what the command does not take, with, for each flag, the command's own spelling of
    it (SAME_MEANING) or the commands that take it."""
    from ..redaction import remember_secrets

    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    own, hints = commands[name]._option_string_actions, []
    for i, flag in enumerate(u.partition("=")[0] for u in unknown):
        if not flag.startswith("--"):
            continue
        same = [f for group in SAME_MEANING if flag in group for f in group if f in own]
        same = same or [f for f in [flag.replace("_", "-")] if f in own]  # transformers' spelling: --output_dir
        takers = [c for c, p in commands.items() if flag in p._option_string_actions]
        if same:
            hints.append(f"hf-ot {name} takes {same[0]}, not {flag}")
        elif takers:
            hints.append(f"{flag} is an option of hf-ot {', '.join(takers)}, not of {name}")
        elif "--set" in own and (key := recipe_key(flag[2:].replace("-", "_"))):  # a TrainingArguments flag
            value = unknown[i].partition("=")[2] or next((v for v in unknown[i + 1 : i + 2] if v[:2] != "--"), "VALUE")
            remember_secrets({key: value})  # (--hub_token hf_...: hidden in this message)
            hints.append(f"a recipe key here: --set {key}={value}")
    commands[name].error(f"unrecognized arguments: {' '.join(unknown)}" + "".join(f" ({h})" for h in hints))


def run_command(args: argparse.Namespace) -> int:
    """Run the command; write its result as JSON (--result-file or the command's default) and print it."""
    from ..run_folders import check_result_file, dumps, write_json

    check_result_file(args.result_file)  # before the command runs: a user's file there is never replaced
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with quiet:  # --json: whatever the libraries print (Trainer's log dicts) goes to stderr
        outcome: Outcome = args.run(args)
    if outcome.result is None:
        return outcome.exit_code
    # train writes results.json into its run folder; sweep, paper and robustness write their own files into --out
    # (recorded as theirs); the others when asked, so that running them leaves no stray file in the current folder
    path = args.result_file or outcome.result_file
    if is_main_process():
        text = dumps(outcome.result)
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            write_json(path, outcome.result, result=bool(args.result_file))  # whole or not at all (and marked ours)
            print(f"hf-ot {args.command}: result written to {path}", file=sys.stderr)
        if outcome.print_result:
            print(text)
    return outcome.exit_code


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (Slurm preemption, `docker stop`, systemd) is handled as Ctrl-C: errors.Terminated, a
    KeyboardInterrupt (exit 143)."""
    import signal
    import threading
    from types import FrameType

    def terminated(signum: int, frame: FrameType | None) -> None:
        raise errors.Terminated("terminated (SIGTERM)")

    install = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
        signal.SIG_DFL,
        None,
    )
    previous = signal.signal(signal.SIGTERM, terminated) if install else None
    try:
        yield
    finally:
        if install:
            signal.signal(signal.SIGTERM, previous)


class _HidingSecrets:
    """A text stream writing through to `stream` with every secret hf_ot knows hidden (redaction.hide_secrets)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        from ..redaction import hide_secrets

        self._stream.write(hide_secrets(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def secrets_hidden(args: argparse.Namespace) -> Iterator[None]:
    """Nothing the command prints (results, logs, progress, errors) shows HF_TOKEN's value or a --set *token* value,
    wherever it appears (a path, a dataset name, the command line of a resume hint)."""
    import logging

    from ..redaction import remember_secrets

    for key, _, value in (item.partition("=") for item in getattr(args, "set", None) or []):
        for text in (value, value.strip().strip("'\"")):  # as given, and as YAML reads it
            remember_secrets({key.strip(): text})
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _HidingSecrets(sys.stdout), _HidingSecrets(sys.stderr)
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]  # (and PlaceHolders: no handlers)
    handlers = [h for lg in loggers for h in getattr(lg, "handlers", []) if type(h) is logging.StreamHandler]
    handlers = [h for h in handlers if h.stream in saved]
    streams = [h.setStream(_HidingSecrets(h.stream)) for h in handlers]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        for handler, stream in zip(handlers, streams):
            handler.setStream(stream)


def main(argv: list[str] | None = None) -> int:
    from ..redaction import hide_secrets

    parser = build_parser()
    with contextlib.redirect_stderr(_HidingSecrets(sys.stderr)):  # a usage error repeats what was typed
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # (argparse would name them only)
            unrecognized(parser, args.command, unknown)
    try:
        with terminate_as_interrupt(), secrets_hidden(args):
            set_threads(args)
            return run_command(args)
    except (KeyboardInterrupt, Exception) as err:
        code = errors.exit_code(err)
        if code is None:
            raise  # a bug: keep its traceback
        # train says more on Ctrl-C (its last checkpoint); any command: a message, not a traceback
        message = "interrupted." if isinstance(err, KeyboardInterrupt) else f"error: {err}"
        print(hide_secrets(f"hf-ot {args.command}: {message}"), file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
