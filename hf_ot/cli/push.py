"""`hf-ot push FOLDER REPO_ID`: hf_ot.push_to_hub (a dry run needs no network)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from ..errors import PushError, UsageError
from ._common import Outcome, no_local_folder

HELP = "upload a saved OT model folder to the Hugging Face Hub"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder")
    p.add_argument("repo_id", help="e.g. your-name/ot-gpt2")
    p.add_argument("--message", default=None, help="commit message")
    p.add_argument("--private", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="show what would be uploaded, where; no network")


def run(args: argparse.Namespace) -> Outcome:
    from ..hub import check_repo_id, push_to_hub

    try:  # usage errors, before the folder is read
        check_repo_id(args.repo_id)
    except PushError as err:
        raise UsageError(str(err)) from None
    from ..run_folders import interrupted_save_note

    note = interrupted_save_note(args.folder)  # a push writes nothing locally: it repairs nothing either
    if note:
        raise UsageError(note)
    if not Path(args.folder).is_dir():
        raise no_local_folder(args.folder, "FOLDER", hub=False)
    from ..checkpoints import check_model_files

    # a corrupt config, OT values out of bounds, a cut-short shard: a usage error naming the file, before any upload
    check_model_files(args.folder, fix="Save the model again (hf_ot.save_model) before pushing.")
    plan = push_to_hub(
        args.folder, args.repo_id, commit_message=args.message, private=args.private, dry_run=args.dry_run
    )
    return Outcome({"dry_run": args.dry_run, **asdict(plan)})
