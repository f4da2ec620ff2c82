"""Saving a model folder complete on its own (weights, code, tokenizer, card) and pushing it to the Hub
(huggingface_hub does the work)."""

from __future__ import annotations

import contextlib
import difflib
import inspect
import logging
import os
import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi, ModelCard, get_token
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from transformers import PreTrainedModel

from .adapters import mark_saved
from .cards import render_model_card
from .checkpoints import read_json
from .errors import PushError
from .run_folders import MANIFEST, safe_save
from .tokenizers import check_tokenizer

logger = logging.getLogger(__name__)


def check_repo_id(repo_id) -> str:
    """huggingface_hub's own repo id check, with the fix in the message."""
    try:
        validate_repo_id(repo_id)
    except (HFValidationError, TypeError) as err:
        raise PushError(
            f"Invalid Hub repo id {repo_id!r}: {err} Use 'name' or 'namespace/name' (letters, digits, '-', '_', "
            "'.'; at most 96 characters), e.g. 'my-user/ot-gpt2'."
        ) from None
    return repo_id


def save_model(
    model, output_dir, *, tokenizer=None, card: ModelCard | None = None, overwrite: bool = False, **kwargs
) -> Path:
    """Write a folder complete on its own: config with auto_map, safetensors, the model code, the generation config,
    the tokenizer when given, README.md (the model card) and hf_ot_manifest.json (what hf_ot wrote, with hashes).
    Written beside output_dir, then swapped into place in one step (safe_save).

    Other keywords go to the model card (render_model_card: license, eval_results, ...) or to the model's
    save_pretrained (max_shard_size, variant, ...). overwrite=True replaces a folder holding an hf_ot model that hf_ot
    saved and nothing else; a folder with any file hf_ot did not write (or changed since) is refused, naming the files.
    An empty (made-up) tokenizer is refused."""

    check_tokenizer(tokenizer)  # before anything is written
    card_keys = set(inspect.signature(render_model_card).parameters) - {"model"}
    # transformers' signature (hf_ot wraps the OT classes' save_pretrained); a PEFT model's keywords go unchecked
    save_keys = set(inspect.signature(PreTrainedModel.save_pretrained).parameters)
    save_keys -= {"self", "save_directory", "push_to_hub", "kwargs"}
    unknown = [k for k in kwargs if k not in card_keys | save_keys]
    if unknown and isinstance(model, PreTrainedModel):
        close = difflib.get_close_matches(unknown[0], card_keys | save_keys, n=1)
        raise TypeError(
            f"hf_ot.save_model got an unknown keyword {unknown[0]!r}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f": it takes the model card's {sorted(card_keys)} and save_pretrained's {sorted(save_keys)}."
        )
    card_kwargs = {k: v for k, v in kwargs.items() if k in card_keys}
    save_kwargs = {k: v for k, v in kwargs.items() if k not in card_keys}

    def save(folder):
        model.save_pretrained(folder, **save_kwargs)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
        (card or render_model_card(model, **card_kwargs)).save(Path(folder) / "README.md")

    from .run_folders import in_progress

    folder = Path(output_dir)
    if in_progress(folder) and not any(folder.iterdir()):  # the new folder of a safe_save in progress (a recipe's)
        save(folder)
        mark_saved(model, folder)
        return folder
    saved = safe_save(save, output_dir, overwrite=overwrite)
    mark_saved(model, saved)  # PEFT adapters of this model now name this folder as their base (hf_ot.adapters)
    return saved


@dataclass
class PushPlan:
    repo_id: str
    folder: str
    files: list[str] = field(default_factory=list)
    commit_message: str = ""
    private: bool = False
    skipped: list[str] = field(default_factory=list)  # 'path (why)': links out of the folder, hidden files


def _folder_files(path: Path) -> tuple[list[str], list[str]]:
    """(files to upload, entries skipped with why). A link is followed only where it stays inside the folder: a link
    to a file or folder outside it (or a broken one) is skipped, so a push never uploads what lies elsewhere on the
    machine. Hidden files and folders (.git, .cache) are not uploaded: one entry names them (hf_ot's .hf_ot* aside)."""
    root = path.resolve()
    files, skipped, hidden = [], [], []
    for current, dirs, names in os.walk(path, followlinks=False):
        here = Path(current)
        for name in sorted(list(dirs)):
            entry = here / name
            rel = str(entry.relative_to(path))
            if name.startswith("."):
                dirs.remove(name)
                hidden.append(f"{rel}/")
            elif entry.is_symlink():
                dirs.remove(name)
                target = entry.resolve()
                if target != root and root not in target.parents:
                    skipped.append(f"{rel}/ (a link to {target}, outside the folder)")
                else:
                    skipped.append(
                        f"{rel}/ (a link to a folder inside the folder: its files are uploaded where they are)"
                    )
        for name in sorted(names):
            entry = here / name
            rel = str(entry.relative_to(path))
            if name.startswith(".") or name == MANIFEST:  # (and hf_ot's local record of what it wrote)
                hidden += [rel] if name.startswith(".") and not name.startswith(".hf_ot") else []
                continue
            if entry.is_symlink():
                target = entry.resolve()
                if not target.is_file():
                    skipped.append(f"{rel} (a broken link)")
                    continue
                if root not in target.parents:
                    skipped.append(f"{rel} (a link to {target}, outside the folder)")
                    continue
            elif not entry.is_file():
                continue
            files.append(rel)
    return sorted(files), skipped + [f"{', '.join(sorted(hidden))} (hidden files)"] * bool(hidden)


def plan_push(folder, repo_id: str, commit_message: str | None = None, private: bool = False) -> PushPlan:
    """What a push would upload, where, with which commit message; checks the repo id and that the folder is a
    loadable OT model (config.json, its auto_map and whole weights, file by file). Links that point outside the
    folder, and hidden files (one entry), are skipped and listed in `skipped` (with a warning)."""
    from .checkpoints import check_model_files

    check_repo_id(repo_id)
    path = Path(folder)
    if not (path / "config.json").is_file() and (path / "adapter_config.json").is_file():
        raise PushError(
            f"{path} holds a PEFT adapter, not a model: push its OT base with hf-ot push, point the adapter at it "
            f"(hf_ot.adapters.set_adapter_base({str(path)!r}, 'you/ot-model')), then push the adapter with PEFT's "
            "push_to_hub (PeftModel.push_to_hub, or huggingface_hub's `hf upload`)."
        )
    if not (path / "config.json").is_file():
        raise PushError(f"{path} has no config.json: save the model first (hf_ot.save_model or save_pretrained).")
    files, skipped = _folder_files(path)
    for line in skipped:
        logger.warning("hf_ot push: not uploading %s.", line)
    if "config.json" not in files:
        raise PushError(f"{path}/config.json is a link to a file outside the folder: copy the file into the folder.")
    try:
        check_model_files(path, fix="Save the model again (hf_ot.save_model) before pushing.")
    except ValueError as err:
        raise PushError(str(err)) from None
    if not any(f.endswith(".safetensors") for f in files):
        raise PushError(
            f"{path} has no .safetensors weights"
            + (" inside it (links to files outside the folder are not uploaded)" if skipped else "")
            + "."
        )
    if not any(f.endswith(".py") for f in files):
        model_type = (read_json(path / "config.json") or {}).get("model_type")
        if not str(model_type).startswith("ot_"):  # (a recipe's baseline, model.ot: null)
            raise PushError(
                f"{path} holds a plain transformers model (model_type {model_type!r}), not an OT model: upload it "
                f"with huggingface_hub (`hf upload REPO_ID {path}`)."
            )
        raise PushError(f"{path} has no model code (*.py): it would not load with trust_remote_code.")
    token = get_token() or ""  # HF_TOKEN, or the token `hf auth login` stored
    text = (".md", ".json", ".txt", ".yaml", ".yml", ".py", ".jinja", ".csv")

    def leaks(f: str) -> bool:
        content = (path / f).read_text("latin-1") if f.endswith((*text, "training_args.bin")) else ""
        # Trainer pickles its arguments into training_args.bin: a hub_token given to them (any token) stays there
        pickled = f.endswith("training_args.bin") and re.search(r"hf_[A-Za-z0-9]{30,}", content)
        return bool(pickled) or (len(token) >= 8 and token in content)

    if leaked := [f for f in files if leaks(f)]:
        raise PushError(
            f"{', '.join(leaked)} in {path} hold a Hugging Face token: a push would publish it. Remove it from "
            "there (hf_ot writes no token into a folder), then push again."
        )
    message = commit_message or f"Upload OT-Transformer ({len(files)} files) with hf_ot"
    return PushPlan(
        repo_id=repo_id, folder=str(path), files=files, commit_message=message, private=private, skipped=skipped
    )


def push_to_hub(
    folder,
    repo_id: str,
    *,
    commit_message: str | None = None,
    private: bool = False,
    token: str | None = None,
    dry_run: bool = False,
    api: HfApi | None = None,
) -> PushPlan:
    """Upload a saved OT model folder to the Hub repo `repo_id` (created if needed). The local folder is only read.
    Exactly the files of the plan are uploaded (links out of the folder and hidden files: plan.skipped).

    dry_run=True returns the plan without any network access. Without a token or network: PushError with the fix.
    """
    plan = plan_push(folder, repo_id, commit_message, private)
    if dry_run:
        return plan
    token = token or get_token()
    if not token:
        raise PushError(
            "No Hugging Face token found: run `hf auth login` or set HF_TOKEN, then push again. "
            f"Nothing was uploaded; {plan.folder} is unchanged."
        )
    api = api or HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        with contextlib.ExitStack() as stack:  # opened in the folder as it is now: one save's files, if one swaps it
            stack.callback(os.close, where := os.open(plan.folder, os.O_RDONLY))
            opened = [stack.enter_context(open(f, "rb", opener=partial(os.open, dir_fd=where))) for f in plan.files]
            adds = [CommitOperationAdd(path_in_repo=f, path_or_fileobj=o) for f, o in zip(plan.files, opened)]
            api.create_commit(repo_id, adds, commit_message=plan.commit_message, repo_type="model")
    except Exception as err:  # network, auth, permission: one readable message
        raise PushError(
            f"Push to {repo_id} failed: {type(err).__name__}: {err}. "
            f"Check your network and token; {plan.folder} is unchanged."
        ) from err
    return plan
