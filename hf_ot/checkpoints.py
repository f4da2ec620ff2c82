"""Model folders and Trainer checkpoints checked before they are used: readable config, intact weights, the same run.

Errors name the file, the field and the fix before transformers reads anything. A `checkpoint-N` is complete once
Trainer wrote its `trainer_state.json` (the last file it writes): a resume takes the newest complete one (one cut short
by a kill is passed over, with a note) or the one named (`--resume PATH`), checked.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import zipfile
from pathlib import Path

from safetensors import SafetensorError, safe_open

from .errors import UsageError
from .models.ot_config import SETTING_OF_FIELD, check_ot_value

logger = logging.getLogger(__name__)

TRAINER_STATE = "trainer_state.json"
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
# torch.save files a checkpoint may hold (zip archives): a truncated one fails deep in torch.load otherwise
_TORCH_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth", "training_args.bin", "pytorch_model.bin")


class CheckpointError(UsageError):
    """A model folder or checkpoint that cannot be used as it is; the message names it, the problem and the fix."""


# Bounds of the JSON hf_ot reads from folders and paths it does not own: a tokenizer.json of a large vocabulary is
# tens of MB and transformers' configs nest a few levels; anything past these is not a file hf_ot or transformers wrote.
MAX_JSON_BYTES = 256 << 20
MAX_JSON_DEPTH = 100


def _depth(value) -> int:
    """How deep lists and dicts nest in value (walked without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def read_bounded(path, fix: str | None = None, max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of `path`, a regular file of at most max_bytes: a device (/dev/zero), a pipe or a larger file is
    refused (CheckpointError naming it and `fix`) before anything is read."""
    st = os.stat(path)
    refuse = fix or "Move it away, or give another path."
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(
            f"{path} is not a regular file (a device, pipe or folder): hf_ot does not read it. {refuse}"
        )
    if st.st_size > max_bytes:
        raise CheckpointError(
            f"{path} is {st.st_size:,} bytes, more than the {max_bytes:,} hf_ot reads from such a file: it is not a "
            f"file hf_ot or transformers wrote. {refuse}"
        )
    with open(path, "rb") as f:
        return f.read(max_bytes + 1)  # (a file growing meanwhile: cut, and refused as invalid)


def read_json(path, fix: str | None = None, obj: bool = True):
    """The JSON object (obj=False: value) in `path`; else None, or with fix an error naming the file and the fix.

    Bounded: a file that is not a regular file (a device, a pipe), larger than MAX_JSON_BYTES or nesting deeper than
    MAX_JSON_DEPTH is refused (CheckpointError, also without fix) before it is read, or parsed further.
    """
    try:
        text = read_bounded(path, fix)
    except CheckpointError:
        raise
    except OSError:
        if fix is None:
            return None
        raise
    try:
        value = json.loads(text)
        if _depth(value) > MAX_JSON_DEPTH:
            raise RecursionError
        if obj and not isinstance(value, dict):
            raise CheckpointError(f"{path} holds {type(value).__name__}, not a JSON object. {fix}")
    except RecursionError:
        raise CheckpointError(
            f"{path} nests values more than {MAX_JSON_DEPTH} deep: it is not a file hf_ot or transformers wrote. "
            f"{fix or 'Move it away, or give another path.'}"
        ) from None
    except ValueError as err:  # (a UnicodeDecodeError is a ValueError, and so is a CheckpointError)
        if fix is None:
            return None
        if isinstance(err, CheckpointError):
            raise
        raise CheckpointError(f"{path} is not valid JSON ({err}): it is corrupt or cut short. {fix}") from None
    return value


def check_weight_files(folder, fix: str) -> list[Path]:
    """Every *.safetensors in `folder` whole, every shard its index names present, torch files readable."""
    folder, files = Path(folder), sorted(Path(folder).glob("*.safetensors"))
    for index in sorted(folder.glob("*.safetensors.index.json")):
        weight_map = read_json(index, fix).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index} has no weight_map: the index is corrupt. {fix}")
        for shard in sorted(set(map(str, weight_map.values()))):
            if "/" in shard or ".." in shard or not (folder / shard).is_file():
                raise CheckpointError(f"{index} names the shard {shard!r}, which is not in {folder}. {fix}")
    for path in files:
        try:
            safe_open(str(path), "pt")  # reads the header, and checks it against the file's size
        except SafetensorError as err:
            raise CheckpointError(
                f"Weights file {path} ({path.stat().st_size:,} bytes) cannot be read ({err}): it was cut short (an "
                f"interrupted copy, download or save) or is corrupt. {fix}"
            ) from None
    for p in (folder / name for name in _TORCH_FILES):
        if p.is_file() and not zipfile.is_zipfile(p):
            raise CheckpointError(f"{p} is not a complete torch file (no zip directory: cut short or corrupt). {fix}")
    return files


_MODULE_RE = re.compile(r"^(?:[A-Za-z0-9][\w.\-]*/[\w.\-]+--)?([A-Za-z_]\w*)\.([A-Za-z_]\w*)$")


def check_auto_map(path: Path, config: dict, fix: str) -> None:
    """auto_map maps Auto classes to 'module.Class' (or 'repo--module.Class'), the module a .py file in the folder."""
    auto_map = config.get("auto_map")
    entries = auto_map.items() if isinstance(auto_map, dict) else [] if auto_map is None else [("", auto_map)]
    for key, value in entries:
        listed = isinstance(value, (list, tuple)) and key != ""  # (tokenizers: [slow, fast], one may be None)
        for ref in [r for r in value if r is not None] if listed else [value]:
            m = _MODULE_RE.match(ref) if isinstance(ref, str) and key != "" else None
            if m is None or ("--" not in str(ref) and not (path.parent / f"{m.group(1)}.py").is_file()):
                why = f": {m.group(1)}.py is not in {path.parent}" if m else " ('..', '/' and other paths are refused)"
                raise CheckpointError(
                    f"{path}: field auto_map{f'[{key!r}]' if key else ''} = {value!r} must map Auto class names to "
                    f"'module.ClassName', the module a Python file inside the folder{why}. {fix}"
                )


def check_model_files(folder, fix: str | None = None) -> None:
    """A local model folder checked before transformers reads it (nothing happens for a Hub id)."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    if not (folder / "config.json").exists() and (folder / "model" / "config.json").is_file():  # a run folder
        raise CheckpointError(f"{folder} is a run folder, not a model: give the model it saved, {folder / 'model'}.")
    fix = fix or "Save the model again, or copy the folder again from its source."
    for path in sorted(folder.glob("*.json")):  # config.json, generation_config.json, tokenizer.json, ...
        if path.is_file():
            value = read_json(path, fix, obj=path.name in ("config.json", "tokenizer_config.json", TRAINER_STATE))
            if path.name in ("config.json", "tokenizer_config.json"):
                check_auto_map(path, value, fix)
            # the OT fields within their bounds before anything loads (ot_num_steps 1e9 would run for hours)
            for field in (f for f in SETTING_OF_FIELD if path.name == "config.json" and f in value):
                try:
                    check_ot_value(field, value[field])
                except ValueError as err:
                    raise CheckpointError(f"{path}: {err} Correct that field in the file. {fix}") from None
    check_weight_files(folder, fix)


def list_checkpoints(trainer_dir) -> list[Path]:
    """checkpoint-N folders, newest first."""
    found = [p for p in Path(trainer_dir).glob("checkpoint-*") if _CHECKPOINT_RE.match(p.name) and p.is_dir()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]), reverse=True)


def is_complete(checkpoint) -> bool:
    return read_json(Path(checkpoint) / TRAINER_STATE) is not None  # Trainer writes it last


def last_complete_checkpoint(trainer_dir) -> tuple[str | None, list[str]]:
    """(the newest complete checkpoint or None, the newer incomplete ones a kill cut short, passed over)."""
    found = list_checkpoints(trainer_dir)
    n = next((i for i, p in enumerate(found) if is_complete(p)), len(found))
    return (str(found[n]) if n < len(found) else None), [str(p) for p in found[:n]]


def check_checkpoint(checkpoint, trainer_dir=None) -> None:
    """Everything a resume reads, checked first: trainer_state.json, config.json, weights, torch files."""
    path = Path(checkpoint)
    step = int(m.group(1)) if (m := _CHECKPOINT_RE.match(path.name)) else 0
    earlier = [p for p in list_checkpoints(trainer_dir or path.parent) if int(p.name[11:]) < step and is_complete(p)]
    fix = f"Resume from an earlier checkpoint (--resume {earlier[0]})" if earlier else ""
    fix = fix or "No earlier complete checkpoint is there: start the run again (--overwrite)"
    fix += f", or delete {path} if it is of no use."
    if not path.is_dir():
        raise CheckpointError(
            f"--resume: no checkpoint folder {path}. Give a checkpoint-N folder of the run, or --resume alone for its "
            "newest complete one."
        )
    if not (path / TRAINER_STATE).is_file():
        raise CheckpointError(
            f"Checkpoint {path} is incomplete: it has no {TRAINER_STATE}, which Trainer writes last (the save was cut "
            f"short, e.g. by a kill). {fix}"
        )
    if not any(path.glob("*.safetensors")) and not [*path.glob("pytorch_model.bin"), *path.glob("adapter_model.*")]:
        raise CheckpointError(f"Checkpoint {path} holds no model weights (*.safetensors). {fix}")
    check_model_files(path, fix)


def choose_checkpoint(trainer_dir, resume) -> str | None:
    """resume=True: the newest complete checkpoint (newer incomplete ones set aside); a path: that one. Checked."""
    if isinstance(resume, (str, Path)):
        check_checkpoint(path := Path(resume).expanduser().resolve())
        return str(path)
    last, skipped = last_complete_checkpoint(trainer_dir)
    for partial in skipped:
        note = "hf_ot: %s is incomplete (its %s is missing or damaged: a save cut short) and is passed over%s."
        logger.warning(note, partial, TRAINER_STATE, f"; resuming from {last}" if last else "")
    if last is None:
        return None
    check_checkpoint(last, trainer_dir)
    for partial in skipped if int(os.environ.get("RANK", "0")) == 0 else []:
        aside = Path(partial).with_name(f".incomplete-{Path(partial).name}")
        if not aside.exists():
            Path(partial).rename(aside)
            logger.warning("hf_ot: moved the incomplete %s to %s (delete it when you like).", partial, aside)
    return last
