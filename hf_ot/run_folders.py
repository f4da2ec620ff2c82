"""What hf_ot writes and replaces: only what it can show it wrote, and never a moment without a complete model.

The contract. A save is written into a new hidden sibling folder (`.NAME.tmp-XXXXXXXX`), listed in its manifest
(`hf_ot_manifest.json`: each file's SHA-256 and the save's id) and swapped in for NAME in one atomic step, under a
filelock beside it (`.NAME.lock`); the earlier folder is then deleted. A folder is hf_ot's to replace only when all it
holds is listed unchanged in its manifest: nothing else is ever deleted or replaced, with --overwrite or without. A
kill leaves the earlier folder or the new one complete at NAME; a kill before the swap leaves the half-written hidden
sibling, which hf_ot never deletes but names. Where the filesystem has no atomic exchange (not Linux's renameat2) the
swap is two renames; a kill between them leaves the earlier folder beside as `.NAME.old-XXXXXXXX`, and every command
that finds NAME missing prints the one `mv` that puts it back. Commands that only read take no lock and write nothing:
they read one save by checking the folder's identity before and after (read_one_save). Results files
(`--result-file`, a run's results.json) carry a marker key that is their proof of being hf-ot's.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import errno
import fnmatch
import functools
import glob
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import NoReturn

from filelock import FileLock, Timeout
from safetensors import SafetensorError

from .checkpoints import check_model_files, choose_checkpoint, list_checkpoints, read_json
from .errors import SaveError, UsageError
from .redaction import redact_secrets

logger = logging.getLogger("hf_ot")
MANIFEST = "hf_ot_manifest.json"
LOCK_NAME = ".hf_ot.lock"
RESULT_MARKER = "hf_ot_result"  # every result file hf-ot writes holds this key: the proof a later run may replace it
OUTPUTS_RECORD = ".hf_ot_outputs.json"
RUN_RECORD = "hf_ot_run.json"  # beside a run's checkpoints: whose they are, and what a --resume must find unchanged
# What a tokenizer's save_pretrained and Trainer write into checkpoint-N.
TOKENIZER_FILES = (
    *("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json"),
    *("vocab.txt", "merges.txt", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model", "source.spm"),
    *("target.spm", "chat_template.jinja", "chat_template.json", "preprocessor_config.json"),
)
CHECKPOINT_FILES = (
    *("trainer_state.json", "training_args.bin", "optimizer.pt", "optimizer.bin", "scheduler.pt", "scaler.pt"),
    *("rng_state*.pth", "config.json", "generation_config.json", "model*.safetensors", "pytorch_model*.bin"),
    *("model.safetensors.index.json", "pytorch_model.bin.index.json", "adapter_model.*", "adapter_config.json"),
    *(MANIFEST, "*.tmp", "latest", "zero_to_fp32.py", "zero_to_torch.py"),  # (latest, zero_to_*: DeepSpeed's)
)
CHECKPOINT_DIRS = ("global_step*", "pytorch_model_fsdp_*", "optimizer_*")
RUN_ENTRIES = ("model", "trainer", "results.json", "log_history.json", "training_curves.png")

# ---------------------------------------------------------------------------------------------------- JSON files


def dumps(value, indent=2) -> str:
    """JSON text of value for a file or the terminal: no secret in it, no NaN."""
    return json.dumps(redact_secrets(value), indent=indent, allow_nan=False, default=str)


def write_text_atomic(path, text: str | bytes) -> Path:
    """Written whole or not at all: a temporary sibling renamed over it (keeping its mode; a link is followed)."""
    target = Path(os.path.realpath(path))
    tmp = target.with_name(f".{target.name.lstrip('.')}.{uuid.uuid4().hex[:12]}.tmp")  # (hidden: never in the way)
    try:
        with open(tmp, "xb") as f:  # (a new file, in the umask's mode)
            f.write(text.encode() if isinstance(text, str) else text)
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return Path(path)


def write_json(path, value, indent=2, result: bool = False) -> Path:
    """dumps(value) written atomically; result=True (a --result-file): with hf-ot's marker key."""
    if result and isinstance(value, dict):
        value = {RESULT_MARKER: 1, **value}
    return write_text_atomic(path, dumps(value, indent=indent))  # fails (NaN, ...) before anything is written


def results_are_ours(path) -> bool:
    return (read_json(path) or {}).get(RESULT_MARKER) is not None  # (every result file hf-ot writes holds it)


# --------------------------------------------------------------------------------------------------------- locks


def _describe(info: dict) -> str:
    command = " ".join(info.get("command") or [])
    where = f"pid {info.get('pid')} on {info.get('hostname')}, started {info.get('started_utc', '?')}"
    return where + (f": {command}" if command else "")


def _read_record(path: Path) -> dict:
    with contextlib.suppress(UsageError):
        if info := read_json(path):
            return info
    try:  # SoftFileLock's marker (a filesystem without flock): pid, hostname, a token
        with open(path, "rb") as f:
            pid, host = f.read(4096).decode().split("\n")[:2]
    except (OSError, ValueError):
        return {}
    return {"pid": int(pid) if pid.isdigit() else pid, "hostname": host}


def _file_lock(path: Path) -> FileLock:
    """This process's one lock on `path` (filelock's singleton: re-entrant, counted, across FolderLock objects)."""
    return FileLock(str(path.resolve()), timeout=0.5, thread_local=False, is_singleton=True)


class FolderLock:
    """with FolderLock(folder, what="run"): ... holds the folder for this process (re-entrant within it), as long as
    the FolderLock object lives. Patience: another process's lock_holder probe holds the lock for an instant, a run
    for its whole life."""

    def __init__(self, folder, what: str = "run", lock_name: str = LOCK_NAME):
        self.folder, self.path, self.what = Path(folder), Path(folder) / lock_name, what
        self._lock: FileLock | None = None
        self._made = False

    def acquire(self) -> FolderLock:
        self._made = not self.folder.exists()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._lock = _file_lock(self.path)
            self._lock.acquire()  # (without flock, filelock falls back to its existence lock: its marker names us)
            if self._lock.lock_counter == 1 and not self.path.read_bytes().startswith(f"{os.getpid()}\n".encode()):
                if (earlier := _read_record(self.path)).get("pid") not in (None, os.getpid()):
                    note = "hf_ot: %s held the lock file of a run that is no longer running (%s); taking it over."
                    logger.warning(note, self.folder, _describe(earlier))
                started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
                record = {"pid": os.getpid(), "hostname": socket.gethostname(), "started_utc": started}
                self.path.write_text(json.dumps({**record, "command": sys.argv[:12]}) + "\n")  # names this run
        except (Timeout, OSError) as err:
            self.release()  # (a hold goes again, and the folder it made)
            raise self._refusal(err) from None
        return self

    def _refusal(self, err: OSError) -> Exception:
        """The folder held by another process (named), or one the user cannot write (read-only, no permission)."""
        if isinstance(err, Timeout):
            for _ in range(10):  # its holder may be writing its record this instant
                if info := _read_record(self.path):
                    break
                time.sleep(0.1)
            return UsageError(
                f"{self.folder} is in use by another {self.what} ({_describe(info)}): wait for it to finish, or choose "
                f"another folder. If that run is no longer running, delete {self.path} and try again."
            )
        if err.errno in (errno.EEXIST, errno.ENOTDIR) and (file := file_in_the_way(self.folder)):
            what = f"{self.folder} is" if file == self.folder else f"{self.folder} cannot be made: {file} is"
            return UsageError(f"{what} a file, not a folder. Give the {self.what} a folder path.")
        if err.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            return err
        return UsageError(
            f"{self.folder} cannot be written ({err.strerror}): the {self.what} writes its lock and files there. "
            "Choose a writable folder, or make that one writable."
        )

    def release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None and lock.is_locked:
            if lock.lock_counter == 1:  # the last hold: the file goes while held (filelock retries on an unlinked one)
                self.path.unlink(missing_ok=True)
            lock.release()
        if self._made and not (lock is not None and lock.is_locked):
            with contextlib.suppress(OSError):  # a run that failed before writing anything leaves no folder
                self.folder.rmdir()

    __enter__ = acquire

    def __exit__(self, *exc) -> None:
        self.release()


def file_in_the_way(path) -> Path | None:
    """The file that `path`, or the nearest folder above it that exists, is (None: a folder can be made there)."""
    found = next((p for p in (Path(path), *Path(path).parents) if p.exists()), None)
    return found if found is not None and not found.is_dir() else None


def lock_outputs(folder, what: str):
    """A command's --out folder held (FolderLock) by the launch's main process, which writes there (RANK 0)."""
    if (Path(folder) / "config.json").is_file():  # its files would block the model's next save, and go to the Hub
        raise UsageError(f"--out {folder} is a model folder: {what} writes its results beside models. Choose another.")
    if (Path(folder) / "model" / "config.json").is_file():  # ... and the run's next --overwrite
        raise UsageError(f"--out {folder} is a run folder (of hf-ot train): {what} writes beside runs. Choose another.")
    return FolderLock(folder, what=what) if int(os.environ.get("RANK", "0")) == 0 else contextlib.nullcontext()


def lock_holder(folder, lock_name: str = LOCK_NAME) -> dict | None:
    """The record of another live process holding `folder`, else None (probed read-only: a file is never created)."""
    path = Path(folder) / lock_name
    if not path.is_file() or _file_lock(path).is_locked:  # (held by this process: not another's)
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except (ImportError, OSError):  # held (BlockingIOError), or no flock here: the file alone says it is held
        return _read_record(path) or {"pid": "?", "hostname": "?"}
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------- ownership: the manifest


@functools.lru_cache(maxsize=1024)
def _digest(path: str, inode: int, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def file_digest(path: Path) -> str:
    """SHA-256 of the file (a file unchanged since it was hashed in this command is not read again)."""
    st = os.stat(path)
    return _digest(str(path), st.st_ino, st.st_size, st.st_mtime_ns)


def _entry(path: Path) -> dict:
    return {"bytes": path.stat().st_size, "sha256": file_digest(path)}


def _unchanged(path: Path, entry) -> bool:
    ok = isinstance(entry, dict) and path.is_file() and not path.is_symlink()
    return ok and entry.get("sha256") == file_digest(path)  # (SHA-256 alone: .hf_ot_outputs.json has no sizes)


def read_manifest(folder) -> dict | None:
    manifest = read_json(Path(folder) / MANIFEST)
    return manifest if manifest and isinstance(manifest.get("files"), dict) else None


def write_manifest(folder, save_id: str | None = None) -> str:
    """List every file `folder` holds (a save is flat) with its size and SHA-256; returns the save id."""
    entries, save_id = sorted(Path(folder).iterdir()), save_id or uuid.uuid4().hex
    if odd := [p for p in entries if p.is_symlink() or not p.is_file()]:
        raise RuntimeError(f"hf_ot saves flat folders of plain files; {odd[0]} is not one.")
    files = {p.name: _entry(p) for p in entries if p.name != MANIFEST}
    manifest = {"hf_ot_manifest": 1, "save_id": save_id, "files": files}
    write_text_atomic(Path(folder) / MANIFEST, json.dumps(manifest, indent=1))
    return save_id


def save_id_of(folder) -> str | None:
    return (read_manifest(folder) or {}).get("save_id")


def model_type_of(folder) -> str | None:
    return (read_json(Path(folder) / "config.json") or {}).get("model_type")


def holds_hf_ot_model(folder) -> bool:
    return str(model_type_of(folder) or "").startswith("ot_")


def _model_code_files() -> set[str]:
    """The model code files a save copies into a folder (the flat hf_ot/models folder)."""
    return {p.name for p in (Path(__file__).resolve().parent / "models").glob("*.py") if p.name != "__init__.py"}


def foreign_entries(folder, ot_only: bool = False) -> list[str]:
    """Entries of `folder` hf_ot cannot show it wrote (each with why); none: the folder is hf_ot's to replace."""
    folder, out = Path(folder), []
    if (manifest := read_manifest(folder)) is None:  # a base checkpoint, a copy, a folder saved by hf_ot 0.1.0
        held = listing([p.name + "/" * p.is_dir() for p in sorted(folder.iterdir())], 4)
        return [f"{MANIFEST} missing (a folder is hf_ot's only with the manifest of its save; it holds {held})"]
    if not str(model_type := model_type_of(folder)).startswith("ot_") and (ot_only or model_type is None):
        out.append(
            f"config.json (a {model_type} model, not an OT model)" if model_type else "no config.json of a model"
        )
    for p in sorted(folder.iterdir()):
        pycache = p.name == "__pycache__" and p.is_dir() and not p.is_symlink()
        if pycache and all(q.is_file() and q.suffix == ".pyc" for q in p.iterdir()):  # Python writes it on import
            continue
        if p.is_symlink() or p.is_dir():
            out.append(f"{p.name} (a link)" if p.is_symlink() else f"{p.name}/ (a folder)")
        elif p.name != MANIFEST and not _unchanged(p, entry := manifest["files"].get(p.name)):
            out.append(f"{p.name} ({'not written by hf_ot' if entry is None else 'changed since hf_ot wrote it'})")
    return out


def listing(items: list[str], n: int = 6) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def refuse(what: str, fix: str) -> NoReturn:
    """The one refusal of files hf_ot cannot show it wrote: what is in the way, the rule, the fix."""
    raise UsageError(
        f"{what}: hf_ot never replaces or deletes files it did not write, not even with --overwrite. {fix}"
    )


# ----------------------------------------------------------------------------------------- reading a saved model


def no_local_folder(text: str, what: str, hub: bool = True) -> UsageError:
    where = "" if Path(text).expanduser().is_absolute() else f"; relative paths start at {Path.cwd()}"
    alternative = ", or a Hub repo id such as 'gpt2' or 'org/name'" if hub else ""
    return UsageError(f"no local folder {text!r} ({what}{where}): give an existing model folder{alternative}.")


def local_or_hub(text: str, what: str, model: bool = True) -> str:
    """A model argument: a local folder, else a Hub repo id. A missing folder that is clearly a local path is a usage
    error naming it, before anything is loaded (not the Hub's network or repo id error for a mistyped path)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    path = Path(text).expanduser()
    if note := interrupted_save_note(path):
        raise UsageError(note)
    if path.exists() and not path.is_dir():  # (transformers would read it as a config, or as a Hub id)
        holder = f" (e.g. {path.parent})" if (path.parent / "config.json").is_file() else ""
        raise UsageError(f"{what} {text!r} is a file, not a model folder: give the folder holding config.json{holder}.")
    if path.is_dir():
        check_model_files(path)  # a corrupt config, an auto_map out of the folder, a cut-short shard: named
        # (transformers: "Should have a model_type"; model=False: a tokenizer's folder, which holds no config.json)
        if model and not any((path / n).exists() for n in ("config.json", "adapter_config.json")):
            raise UsageError(f"{what} {text} holds no config.json: it is not a model folder.")
    if path.exists():
        return str(path) if text.startswith("~") else text  # transformers does not expand ~
    try:
        validate_repo_id(text)
    except HFValidationError:
        raise no_local_folder(text, what) from None
    if path.is_absolute() or text.startswith(("./", "../", "~")) or text.count("/") > 1:
        raise no_local_folder(text, what)
    if "/" not in text or Path(text.split("/")[0]).is_dir():
        # gpt2 and a mistyped folder, runs/nonexist and Qwen/Qwen2.5-0.5B beside a local Qwen/ folder look alike: try
        # the Hub, and say so, so that a failure there is not read as a Hub problem only
        print(f"hf-ot: no local folder {text!r} ({what}); trying it as a Hub repo id.", file=sys.stderr)
    return text


def _folder_identity(folder: Path) -> tuple:
    """What changes when a save replaces `folder`: its inode (a swap puts another folder there) and its save id."""
    st = os.stat(folder)
    return st.st_dev, st.st_ino, st.st_mtime_ns, save_id_of(folder)


def read_one_save(folder, load, tries: int = 3):
    """load() of the files of ONE save of `folder`: a save that replaces it meanwhile (config read from the earlier
    one, weights from the new) is noticed by the folder's identity before and after, and load() runs again. Nothing is
    locked or written: a reader never holds up a save, and never writes into a folder it only reads."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        return load()  # (a Hub id: the cache's snapshots are immutable)
    for _ in range(tries):
        before = _folder_identity(path)
        try:
            loaded = load()
        except Exception:
            if path.is_dir() and _folder_identity(path) != before:
                continue  # the files of two saves did not fit together: read the new one
            raise
        if path.is_dir() and _folder_identity(path) == before:
            return loaded
    raise UsageError(
        f"{folder} was replaced by another save {tries} times while it was being read: wait for the process saving "
        "there to finish, then run again."
    )


# -------------------------------------------------------------------------------------------- saving: the swap


# The hidden folder of each save in progress in this call chain: a save_model called inside a save's callback (a
# recipe's) writes straight into it. Scoped: set by safe_save for the duration of the callback, reset after.
_SAVING: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("hf_ot_saving", default=())


def in_progress(folder) -> bool:
    """`folder` is the new, hidden folder of a save in progress in this call (written directly, swapped in later)."""
    return str(folder) in _SAVING.get()


@contextlib.contextmanager
def deferred_signals():
    """Ctrl-C and SIGTERM wait until the block is done (the renames that commit a save), then take effect."""
    received: list[int] = []
    signals = (signal.SIGINT, signal.SIGTERM) if threading.current_thread() is threading.main_thread() else ()
    previous = {sig: signal.signal(sig, lambda s, f: received.append(s)) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for number in received[:1]:
            signal.raise_signal(number)  # to this thread: handled before the next statement


def exchange(a, b) -> bool:
    """Swap two paths in one atomic step (Linux renameat2 RENAME_EXCHANGE, which Python's os lacks: there is no other
    way to replace a non-empty folder without a moment with none); False where the system cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2  # (the C library this process runs on)
    except (OSError, AttributeError, TypeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(-100, os.fsencode(str(a)), -100, os.fsencode(str(b)), 2) == 0:  # AT_FDCWD, RENAME_EXCHANGE
        return True
    if (err := ctypes.get_errno()) in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(a))


def _left_beside(folder: Path, kind: str) -> list[Path]:
    """Hidden siblings a killed save of `folder` left ('tmp': the new folder, 'old': the earlier one, set aside), as
    far as hf_ot can show they are its own: they hold a manifest (a folder of that name without one is a user's)."""
    found = folder.parent.glob(f".{glob.escape(folder.name)}.{kind}-*") if folder.parent.is_dir() else []
    ours = (p for p in found if p.is_dir() and not p.is_symlink() and not in_progress(p))
    return sorted(p for p in ours if save_id_of(p))


def interrupted_save_note(folder) -> str | None:
    """`folder` missing where a save was killed between its two renames: where the earlier model is, and the fix."""
    folder = Path(folder)
    if folder.exists() or not (earlier := _left_beside(folder, "old")):
        return None
    return (
        f"{folder} is missing: a save into it was interrupted between its two renames, and the complete earlier model "
        f"is in {earlier[-1]}. Put it back with:\n  mv {earlier[-1]} {folder}"
    )


def _note_leftovers(folder: Path) -> None:
    """Name what killed saves left beside `folder` (hf_ot deletes nothing it did not write in this command)."""
    pending = folder.parent.glob(f".*.for-{glob.escape(folder.name)}.*.pending") if folder.parent.is_dir() else []
    if left := [*_left_beside(folder, "tmp"), *_left_beside(folder, "old"), *sorted(pending)]:
        names = " ".join(str(p) for p in left)
        logger.warning("hf_ot: an interrupted save left %s; delete it when you like: rm -r %s", names, names)


def check_no_live_run(out) -> None:
    """A model folder inside the output folder of a live `hf-ot train` is that run's to write."""
    if holder := lock_holder((out := Path(out)).parent):
        raise UsageError(
            f"{out} is inside {out.parent}, the output folder of a live run ({_describe(holder)}): it writes its "
            "model there. Wait for it to finish (or stop it), or save elsewhere."
        )


def check_replaceable_model_folder(
    folder, overwrite: bool, ot_only: bool = True, flag: str = "--overwrite", final: bool = False
) -> None:
    """Refuse `folder` unless new, empty, or (overwrite) holding only a model (ot_only: an OT one) hf_ot saved.
    final: the check again just before the swap (files may have appeared meanwhile)."""
    out = Path(folder)
    if note := interrupted_save_note(out):
        raise UsageError(note)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        what = f"is a link (to {os.readlink(out)}): a save replaces it" if out.is_symlink() else "is not a folder"
        raise UsageError(f"{out} exists and {what}: choose a new or empty folder.")
    if file := file_in_the_way(out):
        raise UsageError(f"{out} cannot be made: {file} is a file, not a folder. Choose a new or empty folder.")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if foreign := foreign_entries(out, ot_only):
        refuse(
            f"{out} is not empty and does not hold only {'an hf_ot model' if ot_only else 'a model'} hf_ot saved "
            f"({listing(foreign)})",
            "Choose a new or empty folder (or move those files away yourself).",
        )
    if not overwrite:
        raise UsageError(
            f"{out} already holds a model (model_type {model_type_of(out)!r}): choose another folder, or pass {flag} "
            "to replace it."
        )


def safe_save(
    save, out_dir, overwrite: bool = False, *, ot_only: bool = True, pending: dict | None = None, edit: bool = False
) -> Path:
    """save(tmp_dir) swapped in for out_dir atomically, with `pending` files ({name: JSON value or bytes}) put beside
    it right after (a dict gets model_save_id). edit=True: the folder's own files changed (edit_files)."""
    out = Path(out_dir)
    if any(Path(name).name != name for name in pending or {}):
        raise ValueError(f"safe_save: pending takes file names (written beside {out}), got {list(pending or {})}")
    out.parent.mkdir(parents=True, exist_ok=True)
    targets, flag = {out.parent / name: v for name, v in (pending or {}).items()}, "overwrite=True (--overwrite)"
    with FolderLock(out.parent, what="save", lock_name=f".{out.name}.lock"):
        check_no_live_run(out)
        if not edit:
            check_replaceable_model_folder(out, overwrite, ot_only, flag)
        elif note := interrupted_save_note(out):
            raise UsageError(note)
        _note_leftovers(out)
        save_id = (save_id_of(out) if edit else None) or uuid.uuid4().hex
        waiting = {t: out.parent / f".{t.name}.for-{out.name}.{save_id}.pending" for t in targets}
        tmp, old = (out.parent / f".{out.name}.{k}-{uuid.uuid4().hex[:8]}" for k in ("tmp", "old"))
        os.mkdir(tmp)  # never an existing folder: made here, by this save
        token, committed = _SAVING.set((*_SAVING.get(), str(tmp))), False
        try:
            try:
                save(tmp)
                if not edit:
                    write_manifest(tmp, save_id=save_id)
            except (OSError, SafetensorError) as err:  # (a full disk)
                earlier = "is unchanged" if out.exists() else "was not created"
                fix = "free space (or fix the cause) and run again."
                raise SaveError(f"saving the model to {out} failed: {err}. {out} {earlier}; {fix}") from err
            for target, value in targets.items():
                value = {**value, "model_save_id": save_id} if isinstance(value, dict) else value
                write_text_atomic(waiting[target], value if isinstance(value, bytes) else dumps(value, indent=1))
            if not edit:
                check_replaceable_model_folder(out, overwrite, ot_only, flag, final=True)
            # Ctrl-C and SIGTERM wait for these renames (a SIGKILL cannot: the model is complete anyway, its results
            # may then lag): the model and the results that describe it arrive together
            with deferred_signals():
                if not out.exists() or not any(out.iterdir()):
                    tmp.replace(out)  # (over an empty folder)
                elif not exchange(tmp, out):  # (after an exchange, tmp holds the earlier folder)
                    out.rename(old)  # (a kill here: interrupted_save_note names `old` and the mv that restores it)
                    try:
                        tmp.rename(out)
                    except BaseException:
                        old.rename(out)  # the earlier folder goes back: never no model
                        raise
                for target, path in waiting.items():
                    path.replace(target)
                committed = True
        finally:  # this save's own files: its hidden folder (the earlier model once committed), its waiting files
            _SAVING.reset(token)
            with deferred_signals():  # (else a Ctrl-C leaves a half-deleted folder, which no later command deletes)
                shutil.rmtree(tmp, ignore_errors=True)
                if committed:
                    shutil.rmtree(old, ignore_errors=True)
                for path in waiting.values():
                    path.unlink(missing_ok=True)
    return out


def ours_to_edit(folder, names) -> set[str]:
    """Of `names`, those hf_ot may rewrite in `folder` and keep as its own: listed unchanged in its manifest, or new."""
    if in_progress(folder):  # the new folder of a save in progress: all its files are this save's
        return set(names)
    if (manifest := read_manifest(folder := Path(folder))) is None:
        return set()
    return {n for n in names if not os.path.lexists(folder / n) or _unchanged(folder / n, manifest["files"].get(n))}


def _link_or_copy(src, dst) -> None:
    try:
        os.link(src, dst)  # no data copied: the folder's files stay as they are (a new file replaces a link)
    except OSError:
        shutil.copy2(src, dst)


def edit_files(folder, contents: dict[str, str | bytes], save_id: str | None = None) -> None:
    """Replace files of a saved folder together: a hard-linked copy gets them (and its manifest their hashes alone);
    save_id: only while the folder holds that save (the model that `contents` were made from)."""
    if in_progress(folder):  # the new folder of a save in progress (not in place yet): written directly
        for name, value in contents.items():
            write_text_atomic(Path(folder) / name, value)
        return
    folder = Path(folder).resolve()  # (a copy is written beside it: an unwritable parent is refused by its lock)

    def fill(tmp: Path) -> None:  # (under the save's lock)
        if save_id and save_id_of(folder) != save_id:
            raise UsageError(f"{folder} was replaced (by another save) since its model was read: nothing was written.")
        shutil.copytree(folder, tmp, symlinks=True, copy_function=_link_or_copy, dirs_exist_ok=True)
        for name, value in contents.items():
            write_text_atomic(tmp / name, value)
        if (manifest := read_manifest(tmp)) is not None:
            manifest["files"].update({name: _entry(tmp / name) for name in contents})
            write_text_atomic(tmp / MANIFEST, json.dumps(manifest, indent=1))

    safe_save(fill, folder, edit=True)


# --------------------------------------------------------------------------------------- run and output folders


def _hidden_run_entry(name: str) -> bool:
    """safe_save's hidden siblings and waiting files of OUT/model and its results, and the run's lock."""
    return name == LOCK_NAME or name.startswith((".model.", *(f".{n}." for n in RUN_ENTRIES[2:])))


def run_folder_foreign(out: Path, checkpoints_of=None) -> list[str]:
    """Entries of a run folder (and checkpoints_of's checkpoints) that hf-ot cannot show it or Trainer wrote there."""
    foreign = sorted(p.name for p in out.iterdir() if p.name not in RUN_ENTRIES and not _hidden_run_entry(p.name))
    foreign += [f"{n} (a link)" for n in ("results.json", "log_history.json") if (out / n).is_symlink()]
    model = out / "model"
    if model.is_symlink() or (model.exists() and not model.is_dir()):
        foreign.append(f"model ({'a link' if model.is_symlink() else 'not a folder'})")
    elif model.is_dir() and any(model.iterdir()):
        foreign += [f"model/{entry}" for entry in foreign_entries(model)]
    # what Trainer (and a save: tokenizer, model code) does not write in a checkpoint: --overwrite deletes none then
    patterns = (*CHECKPOINT_FILES, *TOKENIZER_FILES, *_model_code_files())
    for p in [q for c in _checkpoint_folders(checkpoints_of) for q in sorted(c.iterdir())] if checkpoints_of else []:
        if p.is_symlink():
            foreign.append(f"{p} (a link)")
        elif not any(fnmatch.fnmatch(p.name, n) for n in (CHECKPOINT_DIRS if p.is_dir() else patterns)):
            foreign.append(f"{p}/" if p.is_dir() else str(p))
    results, results_ours = read_json(out / "results.json") or {}, results_are_ours(out / "results.json")
    if (out / "results.json").exists() and not results_ours:  # (the files beside it cannot be shown hf-ot's either)
        return [*foreign, f"results.json, which is not a result hf-ot wrote (no {RESULT_MARKER} key)"]
    history, curves = read_json(out / "log_history.json", obj=False), out / "training_curves.png"
    history_ours = isinstance(history, list) and all(isinstance(h, dict) and "step" in h for h in history)
    if (out / "log_history.json").exists() and not (results_ours and history_ours):
        foreign.append("log_history.json, which is not the log history of hf-ot's results.json there")
    figure = {"sha256": results.get("training_curves_sha256")}  # (in the results.json swapped in with it)
    if (curves.exists() or curves.is_symlink()) and not _unchanged(curves, figure):
        foreign.append("training_curves.png, which is not the figure of hf-ot's results.json there")
    return foreign


def read_run_record(trainer_dir) -> dict | None:
    return read_json(Path(trainer_dir) / RUN_RECORD)


def check_trainer_folder(output_dir, trainer_dir, overwrite: bool, resume) -> None:
    """A training.output_dir outside OUTPUT_DIR holding another run's checkpoints (or an unknown run's) is refused."""
    out, trainer = Path(output_dir).resolve(), Path(trainer_dir).resolve()
    if trainer == out or out in trainer.parents:
        return
    checkpoints, owner = list_checkpoints(trainer), (read_run_record(trainer) or {}).get("output_dir")
    if trainer.is_dir() and (any((trainer / n).exists() for n in ("model", "results.json")) or lock_holder(trainer)):
        whose = "is the output folder of another run (it holds its model or results)"
    elif owner and Path(owner).resolve() != out and (checkpoints or not overwrite):
        whose = f"belongs to another run (output_dir {owner}; {len(checkpoints)} checkpoint(s))"
    elif not owner and checkpoints and not resume:
        names = listing([p.name for p in checkpoints], 3)
        whose = f"holds checkpoints of another run ({names}): whose, hf_ot cannot tell"
    else:
        return
    raise UsageError(
        f"training.output_dir {trainer} {whose}: this run's checkpoints would mix with that run's files (and a resume "
        f"of it take this run's weights); hf_ot deletes none of them. Choose another training.output_dir (or leave it "
        f"unset: {out / 'trainer'}){f', or resume that run with --output-dir {owner} --resume' if owner else ''}."
    )


# what the refusal of an earlier run advises by default (hf-ot train's flags)
RUN_AGAIN = (
    "Choose another output_dir, pass --overwrite to replace it, or --resume to continue from its last checkpoint."
)


def check_run_folder(output_dir, trainer_dir, overwrite: bool, resume, again: str = RUN_AGAIN) -> str | None:
    """Check a recipe's output folder before anything runs; returns the checkpoint to resume from (or None). `again`:
    what the refusal of an earlier run advises (a command's own flags)."""
    if overwrite and resume:
        raise UsageError(
            "--overwrite starts over and deletes the run's checkpoints, --resume continues from them: "
            "pass one of them, not both."
        )
    out, trainer = Path(output_dir), Path(trainer_dir)
    if note := interrupted_save_note(out / "model"):
        raise UsageError(note)
    check_trainer_folder(out, trainer, overwrite, resume)
    if out.exists() and not out.is_dir():
        raise UsageError(f"output_dir {out} exists and is not a folder: choose another output_dir.")
    started = out.exists() and not all(_hidden_run_entry(p.name) for p in out.iterdir())
    if started and (foreign := run_folder_foreign(out, trainer if overwrite else None)):
        refuse(
            f"output_dir {out} holds files a recipe did not write ({listing(foreign, 5)}; a recipe writes only "
            f"{', '.join(RUN_ENTRIES)} there, Trainer only its checkpoints)",
            "Choose a new or empty output_dir, or move them away.",
        )
    if resume:
        if (checkpoint := choose_checkpoint(trainer, resume)) is None:
            raise UsageError(
                f"--resume: no checkpoint in {trainer} to continue from (none complete: one is saved at each "
                "training.save_steps, or each epoch; none when training.save_strategy is 'no'). Nothing was changed. "
                "Run without --resume to start a run, or pass --overwrite instead to train again from scratch and "
                "replace this one."
            )
        return checkpoint
    ran = started and (list_checkpoints(trainer) or any((out / n).exists() for n in ("model", "results.json")))
    if ran and not overwrite:
        held = model_type_of(out / "model")
        raise UsageError(f"{out} already holds {f'a model ({held})' if held else 'an earlier run'}. {again}")
    return None


def _checkpoint_folders(trainer_dir) -> list[Path]:
    """checkpoint-N folders and .incomplete-checkpoint-N (set aside by a resume)."""
    hidden = sorted(p for p in Path(trainer_dir).glob(".incomplete-checkpoint-*") if p.is_dir() and not p.is_symlink())
    return [*list_checkpoints(trainer_dir), *hidden]


def remove_checkpoints(trainer_dir) -> list[str]:
    """Delete an --overwrite run's earlier checkpoints (check_run_folder showed they are its own, Trainer's files)."""
    removed = [str(p) for p in _checkpoint_folders(trainer_dir)]
    for path in removed:
        shutil.rmtree(path)
    return removed


def check_outputs_replaceable(folder, names) -> None:
    """Summary files (sweep.json, ...) replace only files that .hf_ot_outputs.json lists unchanged."""
    folder, record = Path(folder), read_json(Path(folder) / OUTPUTS_RECORD) or {}
    if foreign := [n for n in names if os.path.lexists(folder / n) and not _unchanged(folder / n, record.get(n))]:
        refuse(
            f"{folder} holds {', '.join(foreign)}, which hf-ot did not write (or you changed), under the names it "
            "writes its results to",
            "Choose another folder (--out), or move them away.",
        )


@contextlib.contextmanager
def writing_outputs(folder, names):
    """Summary files written in the block are recorded as hf-ot's also when it is cut short (an error, Ctrl-C, or
    SIGTERM, which the CLI raises as KeyboardInterrupt): else a file hf-ot wrote would block the next run."""
    try:
        yield
    finally:
        record_outputs(folder, names)


def record_outputs(folder, names) -> None:
    """Remember the summary files just written (their SHA-256), so that the next run may replace them."""
    folder, record = Path(folder), read_json(Path(folder) / OUTPUTS_RECORD) or {}
    record.update({n: {"sha256": file_digest(folder / n)} for n in names if (folder / n).is_file()})
    write_json(folder / OUTPUTS_RECORD, record)


def check_writable(*folders, what: str) -> None:
    """Refuse now, before the work, folders (or the nearest that exists above one) that cannot be written."""
    for folder in folders:
        near = next(p for p in (Path(folder).absolute(), *Path(folder).absolute().parents) if p.exists())
        if not os.access(near, os.W_OK):
            raise UsageError(f"{what}: {near} cannot be written (read-only, or no permission). Make it writable.")


def check_result_file(path) -> None:
    """--result-file PATH: an existing file is replaced only if hf-ot can show it wrote it (results_are_ours); the
    command then writes it with write_json(..., result=True)."""
    if path is None:
        return
    if (p := Path(path)).is_dir():
        raise UsageError(f"--result-file {p} is a folder: give a file path.")
    if (file := file_in_the_way(p.parent)) is not None:
        raise UsageError(f"--result-file {p}: {file} is a file, not a folder: give a path in a folder.")
    check_writable(p.parent, what=f"--result-file {p}")
    for inside, what in ((p.parent, "a model folder"), (p.parent / "model", "a run folder")):  # (as lock_outputs)
        if (inside / "config.json").is_file():
            raise UsageError(
                f"--result-file {p} is inside {what}: it would block the next save or --overwrite there (and go to "
                "the Hub with a model). Give a path outside it."
            )
    if p.is_symlink() or (p.exists() and not results_are_ours(p)):
        refuse(
            f"--result-file {p} exists and is not a result hf-ot wrote (no {RESULT_MARKER!r} key)",
            "Give another path, or move the file away.",
        )
