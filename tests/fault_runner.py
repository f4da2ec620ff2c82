"""Run `hf-ot ARGS...` in this process with a fault injected by monkeypatch (nothing in hf_ot reads a switch):

    python tests/fault_runner.py POINT[:SIGNAL] [--no-exchange] ARGS...

At POINT the process sends itself SIGKILL (or SIGTERM / SIGINT / SIGSTOP). --no-exchange: the filesystem has no
atomic exchange (the swap takes two renames). Points:
  run-locked            the run holds its folder's lock, before anything else
  training-step-N       before optimizer step N
  save-written          the new model folder is complete with its manifest (beside the old one)
  save-pending-written  results.json & co. for it wait beside their targets
  swap-between-renames  (with --no-exchange) the old folder is moved aside, the new one not yet in place
  swap-model-in-place   the new model is in place, its results not yet
  swap-before-cleanup   everything is in place; the earlier folder not yet deleted
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import sys


def main() -> int:
    point, _, sig = sys.argv[1].partition(":")
    args = sys.argv[2:]
    no_exchange = "--no-exchange" in args
    args = [a for a in args if a != "--no-exchange"]
    number = {"TERM": signal.SIGTERM, "INT": signal.SIGINT, "STOP": signal.SIGSTOP}.get(sig, signal.SIGKILL)

    def hit() -> None:
        os.kill(os.getpid(), number)

    import hf_ot.recipes.run as run
    import hf_ot.run_folders as run_folders
    import hf_ot.training as training

    if no_exchange:
        run_folders.exchange = lambda a, b: False  # type: ignore[assignment]
    if point == "run-locked":  # the first check the run makes once it holds its lock
        real_check_run_folder = run.check_run_folder

        def check_run_folder(*a, **k):
            hit()
            return real_check_run_folder(*a, **k)

        run.check_run_folder = check_run_folder  # type: ignore[assignment]
    elif point.startswith("training-step-"):
        step, real_step = int(point.rsplit("-", 1)[1]), training.StopOnNonFiniteLoss.training_step

        def training_step(self, *a, **k):
            if self.state.global_step + 1 == step:
                hit()
            return real_step(self, *a, **k)

        training.StopOnNonFiniteLoss.training_step = training_step  # type: ignore[method-assign]
    elif point == "save-written":
        real_manifest = run_folders.write_manifest

        def write_manifest(*a, **k):
            out = real_manifest(*a, **k)
            hit()
            return out

        run_folders.write_manifest = write_manifest  # type: ignore[assignment]
    elif point == "save-pending-written":
        real_check = run_folders.check_replaceable_model_folder

        def check(*a, **k):
            if k.get("final"):  # the check just before the swap
                hit()
            return real_check(*a, **k)

        run_folders.check_replaceable_model_folder = check  # type: ignore[assignment]
    elif point == "swap-between-renames":
        real_rename = pathlib.Path.rename

        def rename(self, target):
            out = real_rename(self, target)
            if ".old-" in pathlib.Path(target).name:
                hit()
            return out

        pathlib.Path.rename = rename  # type: ignore[method-assign]
    elif point == "swap-model-in-place":
        real_replace = pathlib.Path.replace

        def replace(self, target):
            if self.name.endswith(".pending"):
                hit()
            return real_replace(self, target)

        pathlib.Path.replace = replace  # type: ignore[method-assign]
    elif point == "swap-before-cleanup":
        real_rmtree = shutil.rmtree

        def rmtree(path, *a, **k):
            if ".tmp-" in str(path) or ".old-" in str(path):
                hit()
            return real_rmtree(path, *a, **k)

        shutil.rmtree = rmtree  # type: ignore[assignment]
    else:
        raise SystemExit(f"unknown fault point {point!r}")
    from hf_ot.cli import main as hf_ot_main

    return hf_ot_main(args)


if __name__ == "__main__":
    sys.exit(main())
