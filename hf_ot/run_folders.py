"""What hf_ot writes to disk, and when it may replace it: only folders it wrote itself, only when asked.

A folder of someone's own files (a thesis, a base checkpoint) is never deleted, with or without --overwrite.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import shutil
from pathlib import Path

from . import ownership
from .errors import SaveError, UsageError
from .locks import LOCK_NAME, FolderLock, _describe, lock_holder

# What may be replaced, and how: hf_ot.ownership (manifests, the atomic swap, repair of interrupted saves).
from .ownership import (  # noqa: F401  (re-exported: the names callers use)
    MANIFEST,
    REDACTED,
    TOKENIZER_FILE_PATTERNS,
    check_replaceable_model_folder,
    file_digest,
    foreign_entries,
    hf_ot_model_types,
    is_secret_key,
    listing,
    model_code_files,
    model_type_of,
    read_json,
    redact_secrets,
    repair_interrupted_save,
    save_id_of,
    write_text_atomic,
)

# What a recipe writes into its output_dir (safe_save's hidden siblings and waiting files start with ".model." and
# ".results.json." / ".log_history.json."; the run's lock is .hf_ot.lock).
RUN_ENTRIES = ("model", "trainer", "results.json", "log_history.json", "training_curves.png")


def _hidden_run_entry(name: str) -> bool:
    return name == LOCK_NAME or name.startswith(
        (".model.", ".results.json.", ".log_history.json.", ".training_curves.")
    )


RESULT_MARKER = "hf_ot_result"  # every result file hf-ot writes holds this key: the proof a later run may replace it


def results_are_ours(path, model_folder=None) -> bool:
    """A results file hf-ot wrote: a JSON object holding hf-ot's marker, or (results.json of a run) the
    model_save_id of the model beside it (its hf_ot_manifest.json's save id)."""
    value = read_json(path)
    if not isinstance(value, dict):
        return False
    if value.get(RESULT_MARKER) is not None:
        return True
    model_folder = Path(model_folder) if model_folder is not None else Path(path).parent / "model"
    save_id = save_id_of(model_folder) if model_folder.is_dir() else None
    return save_id is not None and value.get("model_save_id") == save_id


def _history_is_ours(path: Path, results_ours: bool) -> bool:
    """log_history.json of a run: Trainer's log history (a list of {step: ...} records) beside hf-ot's results."""
    value = read_json(path)
    return results_ours and isinstance(value, list) and all(isinstance(h, dict) and "step" in h for h in value)


def run_summary_foreign(out: Path) -> list[str]:
    """The run's summary files (results.json, log_history.json, training_curves.png) there that hf-ot cannot show it
    wrote, each with why."""
    foreign = []
    results_ours = results_are_ours(out / "results.json")
    if (out / "results.json").exists() and not results_ours:  # (the files beside it cannot be shown hf-ot's either)
        return ["results.json, which is not a result hf-ot wrote (no hf_ot_result key, no model_save_id of model/)"]
    if (out / "log_history.json").exists() and not _history_is_ours(out / "log_history.json", results_ours):
        foreign.append("log_history.json, which is not the log history of hf-ot's results.json there")
    curves = out / "training_curves.png"
    if curves.exists() or curves.is_symlink():
        ours = results_ours and curves.is_file() and not curves.is_symlink()
        if ours:
            claimed = read_json(out / "results.json").get("training_curves_sha256")
            # the figure's hash is in the results.json swapped in with it; written before hf-ot recorded it: a
            # matplotlib figure beside hf-ot's results
            ours = file_digest(curves) == claimed if claimed else b"matplotlib" in curves.read_bytes()[:4096]
        if not ours:
            foreign.append("training_curves.png, which is not the figure of hf-ot's results.json there")
    return foreign


def check_trainer_folder(output_dir, trainer_dir, overwrite: bool, resume) -> None:
    """The checkpoint folder belongs to one run. OUTPUT_DIR/trainer is the run's by place; a training.output_dir
    elsewhere is the run's that its record (hf_ot_run.json) names. One holding another run's checkpoints is refused,
    even with --overwrite (they are that run's to resume); one holding checkpoints of an unknown run too, unless
    resuming it."""
    from .checkpoints import list_checkpoints, read_run_record

    out, trainer = Path(output_dir).resolve(), Path(trainer_dir).resolve()
    if trainer == out or out in trainer.parents:
        return
    if trainer.is_dir() and (
        any((trainer / name).exists() for name in ("model", "results.json")) or lock_holder(trainer)
    ):
        raise UsageError(
            f"training.output_dir {trainer} is the output folder of another run (it holds its model or "
            "results): its checkpoints would mix with that run's files. Choose another "
            f"training.output_dir (or leave it unset: {out / 'trainer'})."
        )
    checkpoints = list_checkpoints(trainer)
    record = read_run_record(trainer)
    owner = Path(record["output_dir"]) if record and record.get("output_dir") else None
    if owner is not None and owner.resolve() != out:
        if checkpoints or not overwrite:
            raise UsageError(
                f"training.output_dir {trainer} belongs to another run (output_dir {owner}; "
                f"{len(checkpoints)} checkpoint(s)): a resume of that run would take this run's weights. Choose "
                f"another training.output_dir (or leave it unset: {out / 'trainer'}), or resume that run with "
                f"--output-dir {owner} --resume."
            )
    elif owner is None and checkpoints and not resume:
        raise UsageError(
            f"training.output_dir {trainer} holds checkpoints of another run "
            f"({', '.join(p.name for p in checkpoints[:3])}): hf_ot cannot tell whose they are, so it neither mixes "
            "this run's with them nor deletes them. Choose another training.output_dir (or leave it unset), or move "
            "them away yourself."
        )


def check_run_folder(output_dir, trainer_dir, overwrite: bool, resume) -> str | None:
    """Check a recipe's output folder before anything runs; returns the checkpoint to resume from (or None).

    - new or empty: fine;
    - files a recipe did not write (or a model/ folder holding files hf_ot did not write): refused, even with
      --overwrite;
    - a finished or started run: refused unless --overwrite (start over: its old checkpoints go too) or --resume
      (continue from the newest complete checkpoint in trainer_dir, or the checkpoint named by resume=PATH; refused
      when there is none);
    - a leftover of a save a kill interrupted is finished or removed first (ownership.repair_interrupted_save)."""
    from .checkpoints import choose_checkpoint, list_checkpoints

    if overwrite and resume:
        raise UsageError(
            "--overwrite starts over and deletes the run's checkpoints, --resume continues from them: "
            "pass one of them, not both."
        )
    out = Path(output_dir)
    trainer = Path(trainer_dir)
    if out.is_dir():
        repair_interrupted_save(out / "model")
    check_trainer_folder(out, trainer, overwrite, resume)
    explicit = resume if isinstance(resume, (str, Path)) and not isinstance(resume, bool) else None
    has_checkpoints = bool(list_checkpoints(trainer))
    if not out.exists() or (out.is_dir() and not [p for p in out.iterdir() if not _hidden_run_entry(p.name)]):
        if not resume:
            return None
        checkpoint = choose_checkpoint(trainer, resume) if explicit or has_checkpoints else None
        if checkpoint is None:
            raise UsageError(f"--resume: {out} holds no run to continue. Run without --resume to start one.")
        return checkpoint
    if out.exists() and not out.is_dir():
        raise UsageError(f"output_dir {out} exists and is not a folder: choose another output_dir.")
    started = has_checkpoints or any((out / name).exists() for name in ("model", "results.json", "log_history.json"))
    foreign = (
        sorted(p.name for p in out.iterdir() if p.name not in RUN_ENTRIES and not _hidden_run_entry(p.name))
        if out.is_dir()
        else []
    )
    if foreign:
        raise UsageError(
            f"output_dir {out} holds files a recipe did not write ({', '.join(foreign[:5])}): a recipe writes only "
            f"{', '.join(RUN_ENTRIES)} there, and never replaces other files, not even with --overwrite. Choose a new "
            "or empty output_dir."
        )
    if (out / "model").exists():
        check_replaceable_model_folder(out / "model", overwrite=True, ot_only=False)
    summary = run_summary_foreign(out)  # replaced at the end: only if hf-ot can show it wrote them
    if summary:
        raise UsageError(
            f"output_dir {out} holds {'; '.join(summary)}: hf-ot never replaces a file it cannot show it wrote, not "
            "even with --overwrite. Move it away, or choose another output_dir."
        )
    if overwrite:
        check_checkpoints_removable(trainer)
    if not started:  # only an empty trainer/ of a run that stopped before its first checkpoint
        if resume:
            raise UsageError(f"--resume: {out} holds no checkpoint to continue from. Run without --resume.")
        return None
    if resume:
        checkpoint = choose_checkpoint(trainer, resume)
        if checkpoint is None:
            raise UsageError(
                f"--resume: no checkpoint in {trainer} to continue from (none complete; recipes save none unless "
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
    """Delete the checkpoint-* folders an earlier run left in its own checkpoint folder (an --overwrite run must not
    resume them later; check_trainer_folder made sure they are this run folder's)."""
    removed = []
    for path in _checkpoint_folders(trainer_dir):
        shutil.rmtree(path)
        removed.append(str(path))
    return removed


def _checkpoint_folders(trainer_dir) -> list[Path]:
    """checkpoint-N folders and those a resume set aside as incomplete (.incomplete-checkpoint-N)."""
    from .checkpoints import list_checkpoints

    hidden = sorted(p for p in Path(trainer_dir).glob(".incomplete-checkpoint-*") if p.is_dir() and not p.is_symlink())
    return [*list_checkpoints(trainer_dir), *hidden]


def holds_hf_ot_model(folder) -> bool:
    """True if `folder` has a config.json of an hf_ot model (model_type ot_*): a folder hf_ot wrote."""
    return str(model_type_of(folder) or "").startswith("ot_")


def safe_save(save, out_dir, overwrite: bool = False, *, ot_only: bool = True, pending: dict | None = None) -> Path:
    """Run save(tmp_dir) beside out_dir, list what it wrote in a manifest (hf_ot_manifest.json), and swap it into place
    in one atomic step: at every instant out_dir is the complete earlier folder or the complete new one, and a failure
    or a kill loses nothing (the next save, or any hf-ot command touching the folder, clears the leftover).

    An existing non-empty out_dir is refused, unless overwrite=True and it holds an hf_ot model that hf_ot wrote,
    and nothing else (ownership.check_replaceable_model_folder): files hf_ot did not write are never deleted.
    pending: {target path: value} JSON files (e.g. results.json beside the model) that must describe the new folder;
    they are written beside their targets first and moved into place with it (value gets `model_save_id`); a bytes
    value is written as it is (a figure).
    """
    # looked up in ownership at call time: tests inject faults there (tests/fault_runner.py)
    check, journal_path = ownership.check_replaceable_model_folder, ownership.journal_path
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    with FolderLock(out.parent, what="save", lock_name=ownership.lock_name_for(out)):
        check_not_in_a_live_run(out)
        check(out, overwrite, ot_only=ot_only, flag="overwrite=True (--overwrite)")
        # the journal names every hidden file this save makes, before it makes any: the proof that they are hf_ot's
        for target in pending or {}:
            if Path(target).parent.resolve() != out.parent.resolve():
                raise ValueError(f"safe_save: {target} must lie beside {out} (moved into place with it)")
        plan = ownership.new_save_plan(out, list(pending or {}))
        save_id = plan["save_id"]
        write_text_atomic(journal_path(out), json.dumps(plan, indent=1) + "\n")
        tmp = out.parent / plan["tmp"]
        waiting = {}
        try:
            os.mkdir(tmp)  # never an existing folder: made here, by this save
            ownership._ACTIVE.add(str(tmp))
            try:
                save(tmp)
                ownership.write_manifest(tmp, save_id=save_id, reuse=True)
            except Exception as err:
                if not isinstance(err, OSError) and type(err).__name__ != "SafetensorError":
                    raise
                earlier = "is unchanged" if out.exists() else "was not created"
                raise SaveError(
                    f"saving the model to {out} failed: {err}. {out} {earlier}; free space (or fix the cause) and "
                    "run again."
                ) from err
            for target, value in (pending or {}).items():
                target = Path(target)
                waiting[target] = out.parent / plan["pending"][target.name]
                if isinstance(value, bytes):  # a file's bytes (a figure): they wait under the pending name
                    waiting[target].write_bytes(value)
                    continue
                if isinstance(value, dict):
                    value = {**value, "model_save_id": save_id}
                write_json(waiting[target], value, indent=1)
            # files may have appeared in the folder while the model was being written: checked again, then swapped
            check(out, overwrite, ot_only=ot_only, flag="overwrite=True (--overwrite)", repair=False)
            ownership.swap_in(tmp, out, waiting, save_id, old=out.parent / plan["old"])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            ownership._ACTIVE.discard(str(tmp))
            for path in waiting.values():
                Path(path).unlink(missing_ok=True)
            if not (out.parent / plan["old"]).exists():  # (kept, with the journal, only if the swap broke off)
                journal_path(out).unlink(missing_ok=True)
    return out


def check_not_in_a_live_run(folder) -> None:
    """A folder inside the output folder of a live `hf-ot train` (it holds .hf_ot.lock) is that run's to write: a save
    there by another process is refused, naming the run."""
    holder = lock_holder(Path(folder).parent)
    if holder:
        raise UsageError(
            f"{folder} is inside {Path(folder).parent}, the output folder of a live run ({_describe(holder)}): "
            "it writes its model there. Wait for it to finish (or stop it), or save elsewhere."
        )


def replace_model_folder(save, folder, pending: dict | None = None) -> Path:
    """save(path) into a recipe's model/ folder (checked by check_run_folder first): written beside it and swapped in
    by one atomic exchange, so OUTPUT_DIR/model is always the complete earlier model or the complete new one;
    `pending` files ({path: value}, results.json beside the model) are moved into place with it, so they always
    describe the model that is there (they carry its `model_save_id`, the one in its hf_ot_manifest.json)."""
    return safe_save(save, folder, overwrite=True, ot_only=False, pending=pending)


# What Trainer (and save_pretrained) write into a checkpoint-N folder; --overwrite deletes a checkpoint only if it
# holds nothing else (a file of yours put there stays, and the run is refused naming it)
CHECKPOINT_FILE_PATTERNS = (
    "trainer_state.json",
    "training_args.bin",
    "optimizer.pt",
    "optimizer.bin",
    "scheduler.pt",
    "scaler.pt",
    "rng_state*.pth",
    "config.json",
    "generation_config.json",
    "model*.safetensors",
    "model.safetensors.index.json",
    "pytorch_model*.bin",
    "pytorch_model.bin.index.json",
    "adapter_model.*",
    "adapter_config.json",
    "hf_ot_manifest.json",
    "*.tmp",
    # DeepSpeed's engine: the tag of the newest state, and its scripts that rebuild fp32 weights from the shards
    "latest",
    "zero_to_fp32.py",
    "zero_to_torch.py",
)
CHECKPOINT_DIR_PATTERNS = ("global_step*", "pytorch_model_fsdp_*", "optimizer_*")


def checkpoint_foreign_files(checkpoint) -> list[str]:
    """Entries of a checkpoint folder that Trainer does not write (relative names)."""
    folder = Path(checkpoint)
    code = model_code_files()
    out = []
    for p in sorted(folder.iterdir()):
        if p.is_symlink():
            out.append(f"{folder.name}/{p.name} (a link)")
        elif p.is_dir():
            if not any(fnmatch.fnmatch(p.name, pat) for pat in CHECKPOINT_DIR_PATTERNS):
                out.append(f"{folder.name}/{p.name}/")
        elif not (
            p.name in code
            or any(fnmatch.fnmatch(p.name, pat) for pat in (*CHECKPOINT_FILE_PATTERNS, *TOKENIZER_FILE_PATTERNS))
        ):
            out.append(f"{folder.name}/{p.name}")
    return out


def check_checkpoints_removable(trainer_dir) -> None:
    """Before an --overwrite run: every checkpoint it will delete holds only what Trainer writes."""
    foreign = [f for c in _checkpoint_folders(trainer_dir) for f in checkpoint_foreign_files(c)]
    if foreign:
        raise UsageError(
            f"--overwrite would delete the checkpoints in {trainer_dir}, but they hold files Trainer did not write "
            f"({', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''}): hf_ot never deletes those. Move them "
            "away, or choose another output_dir."
        )


OUTPUTS_RECORD = ".hf_ot_outputs.json"


def _output_is_ours(path: Path, record: dict) -> bool:
    entry = record.get(path.name)
    if isinstance(entry, dict):  # "earlier": the hash it had before a replacement now being committed
        return file_digest(path) in {entry.get("sha256"), *(entry.get("earlier") or [])}
    if record:  # a record that does not list it: not ours
        return False
    # written by an hf-ot before it kept records: its JSON results, matplotlib plots and markdown reports
    try:
        head = path.read_bytes()[:4096]
    except OSError:
        return False
    if path.suffix == ".json":
        return read_json(path) is not None
    return (path.suffix == ".png" and b"matplotlib" in head) or (path.suffix == ".md" and head.startswith(b"Seeds "))


def check_outputs_replaceable(folder, names) -> None:
    """Summary files a command writes into a folder you chose (sweep.json, robustness.png, results.md, ...): an
    existing one is replaced only if hf-ot wrote it (its record `.hf_ot_outputs.json` lists it unchanged); checked
    before the command starts."""
    folder = Path(folder)
    record = read_json(folder / OUTPUTS_RECORD) or {}
    foreign = [n for n in names if (folder / n).exists() and not _output_is_ours(folder / n, record)]
    if foreign:
        raise UsageError(
            f"{folder} holds {', '.join(foreign)}, which hf-ot did not write (or you changed): it "
            "writes its results under those names and never replaces your files. Choose another "
            "folder (--out), or move them away."
        )


def record_outputs(folder, names) -> None:
    """Remember the summary files just written (their SHA-256), so that the next run may replace them."""
    folder = Path(folder)
    record = read_json(folder / OUTPUTS_RECORD) or {}
    for name in names:
        if (folder / name).is_file():
            record[name] = {"sha256": file_digest(folder / name)}
    write_json(folder / OUTPUTS_RECORD, record)


_RESULT_PATHS: set[str] = set()  # --result-file paths checked by this command: written with RESULT_MARKER


def check_result_file(path) -> None:
    """--result-file PATH: hf-ot writes its result there (with its marker key, RESULT_MARKER); an existing file is
    replaced only if hf-ot can show it wrote it (the marker, or a run's results.json naming the model beside it),
    never a user's other file, JSON or not."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"--result-file {p} is a folder: give a file path.")
    if p.exists() or p.is_symlink():
        if p.is_symlink() or not results_are_ours(p):
            raise UsageError(
                f"--result-file {p} exists and is not a result hf-ot wrote (no {RESULT_MARKER!r} key): hf-ot does "
                "not replace it. Give another path, or move the file away."
            )
    _RESULT_PATHS.add(str(p.resolve()))


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
    """JSON text of value for a file or the terminal: no secret in it (redact_secrets), no NaN."""
    return json.dumps(json_safe(redact_secrets(value)), indent=indent, allow_nan=False, default=str)


def write_json(path, value, indent=2) -> Path:
    """Written whole or not at all (a temporary file renamed over the old one): a crash leaves no half a file. A
    --result-file (check_result_file) gets hf-ot's marker key, the proof that a later command may replace it."""
    if isinstance(value, dict) and str(Path(path).resolve()) in _RESULT_PATHS:
        value = {RESULT_MARKER: 1, **value}
    text = dumps(value, indent=indent)  # no secret reaches a file; fails (NaN, ...) before anything is written
    return write_text_atomic(path, text)  # a linked results file stays a link


def write_run_record(trainer_dir, output_dir, cfg: dict, data_fp: dict, tokenizer) -> None:
    """The record of the run that owns trainer_dir's checkpoints (hf_ot.checkpoints reads it): what a later --resume
    must find unchanged."""
    from .checkpoints import RUN_RECORD, tokenizer_fingerprint

    Path(trainer_dir).mkdir(parents=True, exist_ok=True)
    write_json(
        Path(trainer_dir) / RUN_RECORD,
        {
            "output_dir": str(Path(output_dir).resolve()),
            "settings": cfg,
            "data": data_fp,
            "tokenizer_sha256": tokenizer_fingerprint(tokenizer) if tokenizer is not None else None,
        },
    )
