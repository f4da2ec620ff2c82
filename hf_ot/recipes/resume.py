"""What `--resume` must find unchanged: the run's settings (but those marked resumable), data, tokenizer and batch.

The run record (`hf_ot_run.json` beside the checkpoints) holds the settings, the data's fingerprint, the tokenizer's
vocabulary hash and the processes the run was started on. A recipe key that a resumed run may change (how long it
runs, how it logs, saves and evaluates; not what it trains) is marked on its dataclass field in config.py with
`metadata={"resume": ...}`; the `training` section holds TrainingArguments' fields, listed here instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from transformers import AutoTokenizer
from transformers.utils import flatten_dict  # {"a": {"b": 1}} -> {"a.b": 1}

from ..checkpoints import CheckpointError
from ..redaction import is_secret_key, redact_secrets
from ..run_folders import RUN_RECORD, TOKENIZER_FILES, listing, read_run_record, write_json
from .config import SECTIONS, RecipeConfig, old_keys

# training.* keys a resumed run may change (TrainingArguments' fields carry no recipe metadata)
RESUMABLE_TRAINING = (
    *("max_steps", "num_train_epochs", "run_name", "report_to", "output_dir", "disable_tqdm"),
    *("save_steps", "save_strategy", "save_total_limit", "logging_steps", "logging_strategy", "logging_first_step"),
    *("eval_steps", "eval_strategy", "eval_accumulation_steps", "per_device_eval_batch_size"),
    *("load_best_model_at_end", "metric_for_best_model", "greater_is_better", "push_to_hub", "hub_model_id"),
    "dataloader_num_workers",
)
BATCH_KEYS = ("training.per_device_train_batch_size", "training.gradient_accumulation_steps")  # (as the global batch)


def resumable_keys() -> set[str]:
    """Dotted recipe keys marked resumable (a section's mark covers the keys under it)."""
    keys = {f"training.{k}" for k in RESUMABLE_TRAINING}
    for cls, where in ((RecipeConfig, ""), *((c, f"{name}.") for name, c in SECTIONS.items())):
        keys |= {where + f.name for f in dataclasses.fields(cls) if f.metadata.get("resume")}
    return keys


def _compared(key: str, resumable: set[str]) -> bool:
    parts = key.split(".")
    return not is_secret_key(key) and not any(".".join(parts[:i]) in resumable for i in range(1, len(parts) + 1))


def global_batch(args) -> dict:
    """The processes and the global batch of TrainingArguments `args` (what a resume must keep)."""
    batch, n, steps = args.per_device_train_batch_size, args.world_size, args.gradient_accumulation_steps
    return {"world_size": n, "global_batch": batch * n * steps, "per_device": batch, "accumulation": steps}


def write_run_record(trainer_dir, output_dir, cfg: dict, data_fp: dict, tokenizer, batch: dict | None = None) -> None:
    """The record of the run that owns trainer_dir's checkpoints: what a later --resume must find unchanged."""
    Path(trainer_dir).mkdir(parents=True, exist_ok=True)
    fingerprint = tokenizer_fingerprint(tokenizer) if tokenizer is not None else None
    record = {"output_dir": str(Path(output_dir).resolve()), "settings": cfg, "data": data_fp, **(batch or {})}
    write_json(Path(trainer_dir) / RUN_RECORD, {**record, "tokenizer_sha256": fingerprint})


def tokenizer_fingerprint(tokenizer) -> str:
    vocab = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()


def _changes(then: dict, now: dict, keys, defaults: dict | None = None) -> list[str]:
    """'key: value then, value now' for each of `keys` whose value differs (a key not given: its default)."""
    then, now = ({k: d.get(k, (defaults or {}).get(k, "<unset>")) for k in keys} for d in (then, now))
    return [f"{k}: {then[k]!r} then, {now[k]!r} now" for k in sorted(keys) if then[k] != now[k]]


def check_batch(checkpoint, record: dict, batch: dict) -> None:
    """The global batch the run was started with (per device x processes x accumulation) is this run's."""
    if record.get("global_batch") in (None, batch["global_batch"]):
        return
    then, now = record, batch
    keep = then["global_batch"] // (now["per_device"] * now["world_size"])
    fix = f"resume on {then['world_size']} process(es) (as it was started)"
    if keep * now["per_device"] * now["world_size"] == then["global_batch"]:
        fix += f", or set training.gradient_accumulation_steps={keep} to keep the global batch"
    raise CheckpointError(
        f"--resume: {checkpoint} was trained on {then['world_size']} process(es) with a global batch of "
        f"{then['global_batch']} ({then.get('per_device')} per device x {then['world_size']} x "
        f"{then.get('accumulation')} accumulation steps); this run has {now['world_size']} process(es) and a global "
        f"batch of {now['global_batch']}, which would change the run midway. {fix[0].upper() + fix[1:]}."
    )


def _current_names(settings: dict) -> dict:
    """A record written before the OT settings took their one names (model.ot.num_steps, training.ot_lambda), in
    today's names (the recipes' table of them): a run started before an upgrade resumes."""
    out: dict = {}
    for key, value in settings.items():
        if key == "training.ot_lambda" and value is None:  # (unset: the model config's lambda applied)
            continue
        out.setdefault(old_keys().get(key, key), value)
    return out


def check_resume_settings(
    checkpoint, cfg: dict, data_fp: dict, defaults: dict | None = None, batch: dict | None = None
) -> dict | None:
    """The record of the checkpoint's run (returned) compared with this run: settings, data by content, batch."""
    if (record := read_run_record(Path(checkpoint).parent)) is None:
        return None
    # the record holds no secret: compared with this run's settings redacted alike
    settings = (record.get("settings") or {}, redact_secrets(cfg))
    then, now = (flatten_dict(json.loads(json.dumps(v, default=str))) for v in settings)
    then = _current_names(then)
    resumable = resumable_keys() | (set(BATCH_KEYS) if batch and "global_batch" in record else set())
    compared = {key for key in set(then) | set(now) if _compared(key, resumable)}
    changed, saved = _changes(then, now, compared, defaults), record.get("data") or {}
    for key in sorted(set(saved) | set(data_fp)):  # one file, or the files of a folder or glob: file by file
        before, after = ([v] if isinstance(v, dict) else v or [] for v in (saved.get(key), data_fp.get(key)))
        if [f.get("sha256") for f in before] != [f.get("sha256") for f in after]:
            earlier = {f.get("path"): f.get("sha256") for f in before}
            paths = [str(f["path"]) for f in after if f.get("path") and earlier.get(f["path"]) != f.get("sha256")]
            changed.append(f"{key} ({listing(paths or ['files added or removed'], 3)}) changed since the run started")
    if changed:
        raise CheckpointError(
            f"--resume: {checkpoint} was trained with other settings or data than this run's: {listing(changed, 8)}. "
            "Resume with the settings and data the run was started with, or start a new run (--overwrite, or another "
            "output folder)."
        )
    if batch:
        check_batch(checkpoint, record, batch)
    return record


def load_checkpoint_tokenizer(checkpoint, record: dict | None):
    """The tokenizer saved with the checkpoint (None if it holds none), checked against the run record."""
    path = Path(checkpoint)
    if not any((path / n).is_file() for n in TOKENIZER_FILES if n.startswith(("tokenizer", "vocab", "spiece"))):
        return None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    except Exception as err:
        raise CheckpointError(
            f"The tokenizer saved in checkpoint {path} cannot be read ({type(err).__name__}: {err}). Resume from an "
            "earlier checkpoint (--resume PATH)."
        ) from None
    if (expected := (record or {}).get("tokenizer_sha256")) and tokenizer_fingerprint(tokenizer) != expected:
        raise CheckpointError(
            f"The tokenizer saved in checkpoint {path} is not the one its run started with (its vocabulary differs). "
            "Resume from another checkpoint, or start a new run (--overwrite)."
        )
    return tokenizer
