"""`hf-ot env`: hf_ot.environment() (versions, device, threads), as a list to paste into a bug report."""

from __future__ import annotations

import argparse

from ._common import Outcome

HELP = "versions of Python and the libraries, device and threads (for bug reports)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> Outcome:
    from ..env import environment

    info = environment(getattr(args, "threads_chosen_by", None))
    if not args.json:
        print("\n".join(f"- {key}: {value}" for key, value in info.items()))
    return Outcome(info, print_result=args.json)
