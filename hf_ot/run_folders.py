"""What hf_ot writes to disk, and when it may replace it: only folders it wrote itself, only when asked.

A folder of someone's own files (a thesis, a base checkpoint) is never deleted, with or without --overwrite.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

from .errors import UsageError

# Files that save_pretrained / tokenizer.save_pretrained / save_model write into a model folder.
MODEL_FILE_PATTERNS = (
    "config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json", "*.py", "README.md",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.*",
    "merges.txt", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model", "*.spm", "chat_template.*",
    ".gitattributes",
)
# What a recipe writes into its output_dir (safe_save's temporary siblings start with ".model.").
RUN_ENTRIES = ("model", "trainer", "results.json", "log_history.json", "training_curves.png")


def _foreign_files(folder: Path, allowed) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and not any(fnmatch.fnmatch(p.name, pattern) for pattern in allowed)
                  and "__pycache__" not in p.parts)


def model_type_of(folder: Path) -> str | None:
    try:
        return json.loads((folder / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def hf_ot_model_types() -> set[str]:
    from .registry import BY_OT_TYPE

    return set(BY_OT_TYPE)


def check_replaceable_model_folder(folder, overwrite: bool, ot_only: bool = True, flag: str = "--overwrite") -> None:
    """Refuse to write into `folder` unless it is new, empty, or (with overwrite) a model folder hf_ot wrote:
    config.json (an hf_ot model_type when ot_only) and nothing but model files. Anything else is refused even with
    overwrite, and the message does not suggest it."""
    out = Path(folder)
    if not out.exists():
        return
    if not out.is_dir():
        raise UsageError(f"{out} exists and is not a folder: choose a new or empty folder.")
    if not any(out.iterdir()):
        return
    model_type = model_type_of(out)
    foreign = _foreign_files(out, MODEL_FILE_PATTERNS)
    ours = model_type is not None and (model_type in hf_ot_model_types() or not ot_only)
    if not ours or foreign:
        shown = foreign or sorted(p.name for p in out.iterdir())
        listing = ", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")
        what = "an hf_ot model" if ot_only else "a model"
        raise UsageError(
            f"{out} is not empty and does not hold only {what} ({listing}): hf_ot never replaces such a folder, "
            "not even with --overwrite. Choose a new or empty folder."
        )
    if not overwrite:
        raise UsageError(f"{out} already holds a model (model_type {model_type!r}): choose another folder, or pass "
                         f"{flag} to replace it.")


def check_run_folder(output_dir, trainer_dir, overwrite: bool, resume: bool) -> str | None:
    """Check a recipe's output folder before anything runs; returns the checkpoint to resume from (or None).

    - new or empty: fine;
    - files a recipe did not write (or a model/ folder holding other files): refused, even with --overwrite;
    - a finished or started run: refused unless --overwrite (start over: its old checkpoints go too) or --resume
      (continue from the last checkpoint in trainer_dir; refused when there is none)."""
    from transformers.trainer_utils import get_last_checkpoint

    if overwrite and resume:
        raise UsageError("--overwrite starts over and deletes the run's checkpoints, --resume continues from them: "
                         "pass one of them, not both.")
    out = Path(output_dir)
    trainer = Path(trainer_dir)
    checkpoint = get_last_checkpoint(str(trainer)) if trainer.is_dir() else None
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        if resume:
            raise UsageError(f"--resume: {out} holds no run to continue. Run without --resume to start one.")
        return None
    if not out.is_dir():
        raise UsageError(f"output_dir {out} exists and is not a folder: choose another output_dir.")
    started = checkpoint is not None or any((out / name).exists() for name in ("model", "results.json",
                                                                               "log_history.json"))
    foreign = sorted(p.name for p in out.iterdir() if p.name not in RUN_ENTRIES and not p.name.startswith(".model."))
    if foreign:
        raise UsageError(
            f"output_dir {out} holds files a recipe did not write ({', '.join(foreign[:5])}): a recipe writes only "
            f"{', '.join(RUN_ENTRIES)} there, and never replaces other files, not even with --overwrite. Choose a new "
            "or empty output_dir."
        )
    if (out / "model").exists():
        check_replaceable_model_folder(out / "model", overwrite=True, ot_only=False)
    if not started:  # only an empty trainer/ of a run that stopped before its first checkpoint
        if resume:
            raise UsageError(f"--resume: {out} holds no checkpoint to continue from. Run without --resume.")
        return None
    if resume:
        if checkpoint is None:
            raise UsageError(
                f"--resume: no checkpoint in {trainer} to continue from (recipes save none unless "
                "training.save_strategy is 'steps' or 'epoch'). Nothing was changed. To train again from scratch and "
                "replace this run, pass --overwrite instead."
            )
        return checkpoint
    if not overwrite:
        held = model_type_of(out / "model")
        what = f"a model ({held})" if held else "an earlier run"
        raise UsageError(
            f"{out} already holds {what}. Choose another output_dir, pass --overwrite to replace it, or --resume "
            "to continue from its last checkpoint."
        )
    return None


def remove_checkpoints(trainer_dir) -> list[str]:
    """Delete the checkpoint-* folders an earlier run left (an --overwrite run must not resume them later)."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    trainer = Path(trainer_dir)
    removed = []
    if trainer.is_dir():
        for path in sorted(trainer.glob(f"{PREFIX_CHECKPOINT_DIR}-*")):
            if path.is_dir():
                shutil.rmtree(path)
                removed.append(str(path))
    return removed


def holds_hf_ot_model(folder) -> bool:
    """True if `folder` has a config.json of an hf_ot model (model_type ot_*): a folder hf_ot wrote."""
    config = Path(folder) / "config.json"
    try:
        return str(json.loads(config.read_text()).get("model_type", "")).startswith("ot_")
    except (OSError, ValueError, AttributeError):
        return False

def _default_folder_mode() -> int:
    """The mode a folder made with os.makedirs gets (what save_pretrained makes): 0o777 less the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o777 & ~umask

def safe_save(save, out_dir, overwrite: bool = False) -> Path:
    """Run save(tmp_dir) beside out_dir and move the result into place only once complete: a failure loses nothing.

    An existing non-empty out_dir is refused, unless overwrite=True and it holds an hf_ot model and nothing else
    (check_replaceable_model_folder, the rule the CLI and recipes use): only what hf_ot wrote is replaced, and
    only after the new save succeeded.
    """
    out = Path(out_dir)
    check_replaceable_model_folder(out, overwrite, ot_only=True, flag="overwrite=True (--overwrite)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        save(tmp)
        tmp.chmod(_default_folder_mode())  # mkdtemp makes 0700; a saved model folder is readable as usual
        if out.exists():
            backup = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            backup.rmdir()
            out.rename(backup)
            tmp.rename(out)
            shutil.rmtree(backup)
        else:
            tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def replace_model_folder(save, folder) -> Path:
    """save(path) into a recipe's model/ folder (checked by check_run_folder first): the earlier model is moved
    aside and deleted only once the new one is in place; if saving fails it is put back."""
    folder = Path(folder)
    backup = None
    if folder.exists():
        backup = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=folder.parent))
        backup.rmdir()
        folder.rename(backup)
    try:
        safe_save(save, folder)
    except BaseException:
        if backup is not None:
            shutil.rmtree(folder, ignore_errors=True)
            backup.rename(folder)
        raise
    if backup is not None:
        shutil.rmtree(backup)
    return folder


def json_safe(value):
    """NaN and infinities become null: the file stays valid JSON (json.dumps would write NaN / Infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def dumps(value, indent=2) -> str:
    return json.dumps(json_safe(value), indent=indent, allow_nan=False, default=str)


def write_json(path, value, indent=2) -> Path:
    """Written whole or not at all (a temporary file renamed over the old one): a crash leaves no half a file."""
    path = Path(path)
    text = dumps(value, indent=indent)  # fails (NaN, ...) before anything is written
    target = path.resolve() if path.is_symlink() else path  # a linked results file stays a link
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # one per writer
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "w") as f:  # the umask's mode
            f.write(text)
        if target.exists():
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))  # the mode of the file it replaces
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return path
