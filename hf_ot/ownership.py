"""What hf_ot may replace, and how it replaces it without a moment where nothing is there.

- Every folder hf_ot saves gets a manifest (`hf_ot_manifest.json`): the files it wrote, with their sizes and SHA-256.
  A folder is hf_ot's to replace only when every entry in it is a file the manifest lists, unchanged. A folder saved
  by an older hf_ot (no manifest) is hf_ot's only when it holds, at its top level, nothing but the exact files
  `save_pretrained`, the tokenizer and the model card write. Anything else (a user's script, notes/README.md, an
  older model in v1/, a file edited since) is named, and the folder is left alone.
- A new folder is written beside the old one, complete with its manifest, then swapped in by one atomic exchange
  (renameat2 RENAME_EXCHANGE; where the filesystem lacks it, two renames, the old folder kept until the new one is in
  place). A kill at any instant leaves the complete earlier folder or the complete new one, plus a hidden leftover
  that `repair_interrupted_save` (run by every command that touches the folder) finishes or removes.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fnmatch
import hashlib
import json
import os
import re
import shutil
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

from .errors import UsageError
from .locks import read_json

MANIFEST = "hf_ot_manifest.json"

# What save_pretrained / tokenizer.save_pretrained / the card write at the top level of a model folder (folders hf_ot
# saved before it wrote manifests are recognised by these exact names).
WEIGHT_FILE_RE = re.compile(r"^(model|pytorch_model)(-\d{5}-of-\d{5})?\.(safetensors|bin)(\.index\.json)?$")
MODEL_FILE_NAMES = {"config.json", "generation_config.json", "README.md", MANIFEST}
TOKENIZER_FILE_PATTERNS = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
    "source.spm",
    "target.spm",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
)


def model_code_files() -> set[str]:
    """The model code files hf_ot's save copies into a folder (the flat hf_ot/models folder)."""
    folder = Path(__file__).resolve().parent / "models"
    return {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}


_DIGESTS: dict = {}  # (path, inode, size, mtime_ns) -> sha256: a file checked twice in one command is read once


def file_digest(path: Path) -> str:
    st = os.stat(path)
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


REDACTED = "<redacted>"


def is_secret_key(key) -> bool:
    """A field that may hold a credential (hub_token, push_to_hub_token, api_token, ...): any name with "token" in it
    except tokenizer settings; only its string values are hidden (max_new_tokens = 20 is a number, not a secret)."""
    name = str(key).lower()
    return "token" in name and "tokenizer" not in name


def redact_secrets(value, key=None):
    """A copy of value for a file or card: string values of secret fields (is_secret_key) and the value of the
    HF_TOKEN environment variable, wherever it appears in a string, become "<redacted>"."""
    token = os.environ.get("HF_TOKEN") or ""
    if isinstance(value, dict):
        return {k: redact_secrets(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_secrets(v) for v in value]
    if isinstance(value, str):
        if key is not None and is_secret_key(key) and value:
            return REDACTED
        if len(token) >= 4 and token in value:
            return value.replace(token, REDACTED)
    return value


# ------------------------------------------------------------------------------------------------- the manifest


def write_manifest(folder, save_id: str | None = None, reuse: bool = False) -> str:
    """List every file `folder` holds (top level; a save is flat) with its size and SHA-256; returns the save id.
    reuse=True keeps the hashes of a manifest this process wrote there a moment ago for files of the same size."""
    folder = Path(folder)
    save_id = save_id or uuid.uuid4().hex
    earlier = (read_manifest(folder) or {}).get("files", {}) if reuse else {}
    files = {}
    for p in sorted(folder.iterdir()):
        if p.name == MANIFEST:
            continue
        if p.is_symlink() or not p.is_file():
            raise RuntimeError(f"hf_ot saves flat folders of plain files; {p} is not one.")
        size = p.stat().st_size
        known = earlier.get(p.name)
        digest = known["sha256"] if isinstance(known, dict) and known.get("bytes") == size else file_digest(p)
        files[p.name] = {"bytes": size, "sha256": digest}
    text = json.dumps({"hf_ot_manifest": 1, "save_id": save_id, "files": files}, indent=1)
    (folder / MANIFEST).write_text(text + "\n")
    return save_id


def write_text_atomic(path, text: str) -> Path:
    """Written whole or not at all (a temporary file renamed over the old one, which keeps its mode; a link is
    followed): a crash leaves the earlier file or the new one, never half a file."""
    path = Path(path)
    target = path.resolve() if path.is_symlink() else path
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # one per writer
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "w") as f:  # the umask's mode
            f.write(text)
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def ours_to_edit(folder, names) -> set[str]:
    """Of `names`, the files in `folder` hf_ot may rewrite and keep listing as its own: unchanged files its manifest
    lists, and files not there yet. A folder without a manifest gives the empty set (nothing is recorded there)."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None:
        return set()
    out = set()
    for name in names:
        p, entry = folder / name, manifest["files"].get(name)
        if not p.exists() and not p.is_symlink():
            out.add(name)
        elif isinstance(entry, dict) and p.is_file() and not p.is_symlink():
            if p.stat().st_size == entry.get("bytes") and file_digest(p) == entry.get("sha256"):
                out.add(name)
    return out


def record_in_manifest(folder, names) -> None:
    """After hf_ot rewrote or added files `names` in a saved folder (see ours_to_edit), list them in its manifest
    with their new size and hash, so that the folder stays hf_ot's to replace; other entries are left as they are
    (a user's edit elsewhere is not taken for hf_ot's)."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None or not names:
        return
    for name in names:
        p = folder / name
        manifest["files"][name] = {"bytes": p.stat().st_size, "sha256": file_digest(p)}
    write_text_atomic(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")


def read_manifest(folder) -> dict | None:
    manifest = read_json(Path(folder) / MANIFEST)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return None
    return manifest


def save_id_of(folder) -> str | None:
    manifest = read_manifest(folder)
    return manifest.get("save_id") if manifest else None


def _is_hf_ot_card(path: Path) -> bool:
    try:
        head = path.read_text(errors="replace")[:4000]
    except OSError:
        return False
    return head.startswith("---") and "hf_ot" in head.split("---", 2)[1] if head.count("---") >= 2 else False


def _legacy_name_ok(path: Path, code_files: set[str]) -> bool:
    name = path.name
    if name == "README.md":
        return _is_hf_ot_card(path)
    return (
        name in MODEL_FILE_NAMES
        or WEIGHT_FILE_RE.match(name) is not None
        or name in code_files
        or any(fnmatch.fnmatch(name, p) for p in TOKENIZER_FILE_PATTERNS)
    )


def _pycache_only(path: Path) -> bool:
    """A __pycache__ folder of compiled .pyc files (Python writes it when the folder's code is imported)."""
    return (
        path.name == "__pycache__"
        and path.is_dir()
        and not path.is_symlink()
        and all(p.is_file() and p.suffix == ".pyc" for p in path.iterdir())
    )


def foreign_entries(folder) -> list[str]:
    """Entries of `folder` hf_ot cannot show it wrote, each with why ('notes/ (a folder)', 'config.json (changed
    since hf_ot wrote it)'). Empty: the whole folder is hf_ot's to replace."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    code_files = model_code_files()
    edit = read_edit_journal(folder)
    edit_files = (edit or {}).get("files", {})
    out = []
    for p in sorted(folder.iterdir(), key=lambda q: q.name):
        if _pycache_only(p):
            continue
        if edit is not None and p.name in {EDIT_JOURNAL, *(e["tmp"] for e in edit_files.values())}:
            continue  # an edit of hf_ot's in progress (or interrupted): its own files
        if p.name in edit_files and p.is_file() and file_digest(p) == edit_files[p.name].get("sha256"):
            continue  # already renamed into place by that edit
        if p.is_symlink():
            out.append(f"{p.name} (a link)")
        elif p.is_dir():
            out.append(f"{p.name}/ (a folder)")
        elif manifest is not None:
            if p.name == MANIFEST:
                continue
            entry = manifest["files"].get(p.name)
            if not isinstance(entry, dict):
                out.append(f"{p.name} (not written by hf_ot)")
            elif p.stat().st_size != entry.get("bytes") or file_digest(p) != entry.get("sha256"):
                out.append(f"{p.name} (changed since hf_ot wrote it)")
        elif not _legacy_name_ok(p, code_files):
            out.append(f"{p.name} (not a file hf_ot writes)")
    return out


# An edit of files inside a saved folder (calibrate --write: config.json, the card, the figure) writes them to
# temporary files first, then renames them into place and lists them in the manifest. Its journal, inside the folder,
# names the temporary files (phase "writing") and then their hashes (phase "commit"): at every instant the folder is
# recognised as hf_ot's, and a kill is finished (commit) or undone (writing) by the next command that writes.
EDIT_JOURNAL = ".hf_ot_edit.json"


def _edit_tmp(name: str) -> str:
    return f".{name}.hf_ot-edit"


def read_edit_journal(folder) -> dict | None:
    journal = read_json(Path(folder) / EDIT_JOURNAL)
    if not isinstance(journal, dict) or journal.get("hf_ot_edit") != 1:
        return None
    files = journal.get("files")
    if journal.get("phase") not in ("writing", "commit") or not isinstance(files, dict):
        return None
    for name, entry in files.items():
        if "/" in name or not isinstance(entry, dict) or entry.get("tmp") != _edit_tmp(name):
            return None
    return journal


def edit_files(folder, contents: dict[str, str | bytes]) -> None:
    """Replace files of a saved folder (name -> text or bytes) as one edit: each is written whole to a temporary file,
    then all are renamed into place (Ctrl-C waits until they are) and listed in the manifest (when the folder has
    one). A kill is finished or undone by the next command that writes (finish_interrupted_edit)."""
    folder = Path(folder)
    finish_interrupted_edit(folder)
    files: dict[str, dict] = {name: {"tmp": _edit_tmp(name)} for name in contents}
    journal = folder / EDIT_JOURNAL
    write_text_atomic(journal, json.dumps({"hf_ot_edit": 1, "phase": "writing", "files": files}) + "\n")
    try:
        for name, value in contents.items():
            tmp = folder / files[name]["tmp"]
            if isinstance(value, str):
                value = value.encode()
            with open(tmp, "wb") as f:
                f.write(value)
            target = folder / name
            if target.is_file():
                os.chmod(tmp, target.stat().st_mode & 0o7777)
            files[name]["sha256"] = file_digest(tmp)
        write_text_atomic(journal, json.dumps({"hf_ot_edit": 1, "phase": "commit", "files": files}) + "\n")
    except BaseException:
        for entry in files.values():
            (folder / entry["tmp"]).unlink(missing_ok=True)
        journal.unlink(missing_ok=True)
        raise
    with deferred_signals():  # Ctrl-C / SIGTERM: once every file is in place and listed
        finish_interrupted_edit(folder)


def finish_interrupted_edit(folder) -> list[str]:
    """Finish (phase commit: every new file was complete) or undo (phase writing) an edit of hf_ot's in `folder`."""
    folder = Path(folder)
    journal = read_edit_journal(folder)
    if journal is None:
        return []
    files = journal["files"]
    if journal["phase"] == "writing":
        for entry in files.values():
            (folder / entry["tmp"]).unlink(missing_ok=True)
        (folder / EDIT_JOURNAL).unlink(missing_ok=True)
        return ["undid an interrupted edit"]
    for name in files:  # in order: each prefix is recognised by foreign_entries (the journal's hashes)
        tmp = folder / files[name]["tmp"]
        if tmp.is_file() and not tmp.is_symlink():
            tmp.replace(folder / name)
    record_in_manifest(folder, list(files))
    (folder / EDIT_JOURNAL).unlink()
    return ["finished an interrupted edit"]


def model_type_of(folder) -> str | None:
    config = read_json(Path(folder) / "config.json")
    return config.get("model_type") if isinstance(config, dict) else None


def hf_ot_model_types() -> set[str]:
    from .registry import BY_OT_TYPE

    return set(BY_OT_TYPE)


def listing(items: list[str], n: int = 6) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def check_replaceable_model_folder(
    folder, overwrite: bool, ot_only: bool = True, flag: str = "--overwrite", repair: bool = True
) -> None:
    """Refuse to write into `folder` unless it is new, empty, or (with overwrite) a model folder hf_ot wrote: every
    entry listed in its manifest and unchanged (or, saved before manifests, only the files a save writes, top level
    only) and config.json of an hf_ot model (any model when not ot_only). Anything else is refused even with
    overwrite, naming what is in the way; the message does not suggest overwrite then."""
    out = Path(folder)
    if repair:
        repair_interrupted_save(out)
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink() or not out.is_dir():
        raise UsageError(f"{out} exists and is not a folder: choose a new or empty folder.")
    if not any(out.iterdir()):
        return
    model_type = model_type_of(out)
    foreign = foreign_entries(out)
    manifest = read_manifest(out) is not None
    hf_ot_type = model_type is not None and (model_type in hf_ot_model_types() or str(model_type).startswith("ot_"))
    # any model hf_ot saved (a baseline too) carries its manifest; a folder without one is hf_ot's only when it holds
    # an OT model and nothing but the files a save writes (a user's base checkpoint, e.g. gpt2, never is)
    ours = model_type is not None and (hf_ot_type or (not ot_only and manifest))
    if not ours or foreign:
        shown = foreign or sorted(p.name for p in out.iterdir())
        what = "an hf_ot model" if ot_only else "a model"
        why = (
            f" (a {model_type} model without hf_ot's {MANIFEST}: a base checkpoint of yours, not a model hf_ot saved)"
            if model_type is not None and not ours
            else ""
        )
        raise UsageError(
            f"{out} is not empty and does not hold only {what} hf_ot saved ({listing(shown)}){why}: hf_ot never "
            "replaces or deletes files it did not write, not even with --overwrite. Choose a new or empty folder (or "
            "move those files away yourself)."
        )
    if not overwrite:
        raise UsageError(
            f"{out} already holds a model (model_type {model_type!r}): choose another folder, or pass "
            f"{flag} to replace it."
        )


# ----------------------------------------------------------------------------------------- kill points (tests)


def fault_point(name: str) -> None:
    """A named point of a run (hf_ot.recipes.run calls it once the run holds its lock). It does nothing: tests inject
    a fault there by monkeypatching it (tests/fault_runner.py), as they do at the points of a save."""


@contextlib.contextmanager
def deferred_signals():
    """Ctrl-C and SIGTERM wait until the block is done (the few renames that commit a save), then take effect."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.getsignal(sig)
        signal.signal(sig, lambda s, f: received.append(s))
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for number in received[:1]:
            os.kill(os.getpid(), number)


# ------------------------------------------------------------------------------------------------ the swap


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def exchange(a, b) -> bool:
    """Swap two paths in one atomic step (Linux renameat2 RENAME_EXCHANGE); False where the system cannot."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(a))


_ACTIVE: set[str] = set()  # hidden folders this process is writing or swapping right now: never leftovers


def lock_name_for(folder: Path) -> str:
    """The lock file (beside the folder) that a save into `folder` holds."""
    return f".{Path(folder).name}.lock"


def pending_path(target: Path, folder: Path, save_id: str) -> Path:
    """Where a file that must describe the model saved in `folder` with this save id waits until that model is in
    place (beside its target)."""
    return target.parent / f".{target.name}.for-{folder.name}.{save_id}.pending"


# A save's journal: written beside the folder before anything else of the save, removed once the save is done. It is
# the only proof hf_ot accepts that a hidden folder or file beside a model folder is its own: a leftover is never
# recognised by its name alone (a user's `.model.old-2024/` stays, whatever it holds).
def journal_path(folder) -> Path:
    folder = Path(folder)
    return folder.parent / f".{folder.name}.hf_ot-save.json"


def new_save_plan(folder: Path, pending_targets=()) -> dict:
    """Names of the hidden folders and waiting files a save into `folder` will use (recorded in its journal)."""
    save_id = uuid.uuid4().hex
    return {
        "hf_ot_save": 1,
        "folder": folder.name,
        "save_id": save_id,
        "tmp": f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}",
        "old": f".{folder.name}.old-{uuid.uuid4().hex[:8]}",
        "pending": {Path(t).name: pending_path(Path(t), folder, save_id).name for t in pending_targets},
    }


def read_journal(folder) -> dict | None:
    """The journal of an interrupted save into `folder`, if hf_ot wrote it (names checked: it can only point beside
    the folder, at names of hf_ot's own form)."""
    folder = Path(folder)
    plan = read_json(journal_path(folder))
    if not isinstance(plan, dict) or plan.get("hf_ot_save") != 1 or plan.get("folder") != folder.name:
        return None
    sid, name = plan.get("save_id"), re.escape(folder.name)
    pending = plan.get("pending")
    if not isinstance(sid, str) or not re.fullmatch(r"[0-9a-f]{32}", sid) or not isinstance(pending, dict):
        return None
    ok = bool(re.fullmatch(rf"\.{name}\.tmp-[0-9a-f]{{8}}", str(plan.get("tmp")))) and bool(
        re.fullmatch(rf"\.{name}\.old-[0-9a-f]{{8}}", str(plan.get("old")))
    )
    for target, waiting in pending.items():
        ok = ok and "/" not in str(target) and waiting == f".{target}.for-{folder.name}.{sid}.pending"
    return plan if ok else None


def swap_in(
    new: Path, folder: Path, pending: dict | None = None, commit_id: str | None = None, old: Path | None = None
) -> None:
    """Put the complete folder `new` at `folder` (replacing the earlier one, checked by the caller), then move the
    `pending` files (target -> pending path, written for save id commit_id) into place. The earlier folder is
    deleted only once the new one is in place; `old` is where it waits meanwhile when no atomic exchange exists."""
    pending = pending or {}
    aside = None
    committed = False
    try:
        with deferred_signals():  # a Ctrl-C / SIGTERM here takes effect once the swap is committed
            if folder.exists() and any(folder.iterdir()):
                if exchange(new, folder):
                    aside = new  # `new` now holds the earlier folder
                else:
                    aside = old or folder.parent / f".{folder.name}.old-{uuid.uuid4().hex[:8]}"
                    _ACTIVE.add(str(aside))
                    folder.rename(aside)
                    try:
                        new.rename(folder)
                    except BaseException:
                        aside.rename(folder)  # the earlier folder goes back: never no model
                        aside = None
                        raise
            else:
                if folder.exists():
                    folder.rmdir()
                new.rename(folder)
            for target, tmp in pending.items():
                tmp.replace(target)
            committed = True
            if commit_id is not None:
                _COMMITTED[str(folder.resolve())] = commit_id
    finally:  # also when a deferred signal is raised on leaving the block: the earlier folder is not kept
        if aside is not None and committed:
            shutil.rmtree(aside, ignore_errors=True)
        if aside is not None:
            _ACTIVE.discard(str(aside))


_COMMITTED: dict[str, str] = {}  # folder -> the save id this process swapped into it


def committed_save(folder) -> str | None:
    """The save id of the folder this process swapped into `folder` (and committed), if that is what is there now:
    an interruption that came after it (a SIGTERM deferred until the swap committed) left the new, complete folder."""
    folder = Path(folder)
    sid = _COMMITTED.get(str(folder.resolve()))
    return sid if sid is not None and sid == save_id_of(folder) else None


def interrupted_save_note(folder) -> str | None:
    """For a read-only command finding `folder` missing: where an interrupted save of hf_ot left it, and the fix."""
    folder = Path(folder)
    plan = read_journal(folder)
    if plan is None or folder.exists():
        return None
    old, tmp = folder.parent / plan["old"], folder.parent / plan["tmp"]
    kept = tmp if save_id_of(tmp) == plan["save_id"] and old.is_dir() else old if old.is_dir() else None
    if kept is None:
        return None
    return (
        f"a save into {folder} was interrupted (killed between its two renames); the complete model is in {kept}. "
        f"The next hf-ot command that writes there (train --resume / --overwrite, convert --overwrite, calibrate "
        f"--write) puts it back, or move it yourself: mv {kept} {folder}"
    )


def repair_interrupted_save(folder) -> list[str]:
    """Finish or undo a save that a kill interrupted beside `folder`; returns what was done (also logged). Only
    commands that write there call it, and it touches only what the save's journal names (hf_ot's own files):

    - `folder` missing while its earlier version waits aside (killed between the two renames of a swap, i.e. after
      the save committed): the complete new version goes into place (else the earlier one comes back);
    - files waiting to describe the model now in place (results.json of a run killed right after its model was
      swapped in) go into place; those written for a model that never arrived are removed;
    - the earlier version kept aside and partial new saves are removed."""
    import logging

    from .locks import lock_holder, remove_stale_lock

    folder = Path(folder)
    if folder.is_dir() and read_edit_journal(folder) is not None and not lock_holder(folder.parent):
        finish_interrupted_edit(folder)  # calibrate --write killed mid-way
    plan = read_journal(folder)
    if plan is None:
        return []
    if lock_holder(folder.parent, lock_name_for(folder)) or lock_holder(folder.parent):
        return []  # another live process is saving here: its files are not leftovers
    remove_stale_lock(folder.parent / lock_name_for(folder))  # left by a killed save
    done = []
    tmp, old = folder.parent / plan["tmp"], folder.parent / plan["old"]
    if not folder.exists():
        if old.is_dir() and save_id_of(tmp) == plan["save_id"] and not foreign_entries(tmp):
            tmp.rename(folder)
            done.append(f"moved the new model of an interrupted save into {folder}")
        elif old.is_dir():
            old.rename(folder)
            done.append(f"put the earlier model back in {folder} (a save was interrupted)")
    current = save_id_of(folder) if folder.exists() else None
    for target, name in plan["pending"].items():
        waiting = folder.parent / name
        if not waiting.is_file() or waiting.is_symlink():
            continue
        if current == plan["save_id"]:
            waiting.replace(folder.parent / target)
            done.append(f"completed {target} for the model in {folder}")
        else:
            waiting.unlink()
    for leftover in (tmp, old) if folder.exists() else (tmp,):
        if leftover.is_dir() and not leftover.is_symlink() and str(leftover) not in _ACTIVE:
            shutil.rmtree(leftover, ignore_errors=True)
            done.append(f"removed {leftover.name}, left by an interrupted save")
    journal_path(folder).unlink(missing_ok=True)
    for line in done:
        logging.getLogger("hf_ot").warning("hf_ot: %s", line)
    return done
