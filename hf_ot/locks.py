"""One run per folder: `filelock.FileLock` on `FOLDER/.hf_ot.lock`, the file naming the process that holds it.

The lock is the operating system's (flock), so the kernel releases it when its process dies, even by SIGKILL: a lock
file nobody holds is simply taken over, with no guess about whether its process still runs. The record inside (pid,
hostname, command) only lets a refusal name the other run. On a filesystem without flock, filelock falls back to an
existence lock (SoftFileLock): a lock file left there by a killed run is deleted by hand, as the refusal says.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

from filelock import FileLock, SoftFileLock, Timeout

from .errors import UsageError

LOCK_NAME = ".hf_ot.lock"
_PATIENCE = 0.5  # seconds: another process's lock_holder probe holds the lock for an instant, a run for its whole life
logger = logging.getLogger(__name__)


def read_json(path):
    """The JSON value in `path`, or None when it is missing, unreadable or not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _describe(info: dict) -> str:
    started = info.get("started_utc", "?")
    command = " ".join(info.get("command") or [])
    return f"pid {info.get('pid')} on {info.get('hostname')}, started {started}" + (f": {command}" if command else "")


def _read_record(path: Path) -> dict:
    info = read_json(path)
    if isinstance(info, dict):
        return info
    try:  # SoftFileLock's marker (a filesystem without flock): pid, hostname, a token
        pid, host = path.read_text().split("\n")[:2]
    except (OSError, ValueError):
        return {}
    return {"pid": int(pid) if pid.isdigit() else pid, "hostname": host}


class FolderLock:
    """with FolderLock(folder, what="run"): ... holds the folder for this process (re-entrant within it)."""

    _held: dict[str, list] = {}  # resolved lock path -> [the filelock, how many times this process entered it]

    def __init__(self, folder, what: str = "run", lock_name: str = LOCK_NAME):
        self.folder = Path(folder)
        self.path = self.folder / lock_name
        self.what = what
        self._key: str | None = None
        self._created_folder = False

    def _write_record(self, fd: int) -> None:
        """Run by filelock once the OS lock is held: the record that names this run in another's refusal."""
        earlier = _read_record(self.path)
        if earlier.get("pid") not in (None, os.getpid()):
            logger.warning(
                "hf_ot: %s held the lock file of a run that is no longer running (%s); taking it over.",
                self.folder,
                _describe(earlier),
            )
        record = {
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "started_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "command": sys.argv[:12],
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        os.fsync(fd)

    def _refuse(self) -> UsageError:
        info: dict = {}
        for _ in range(10):  # its holder may be writing its record this instant
            info = _read_record(self.path)
            if info:
                break
            time.sleep(0.1)
        return UsageError(
            f"{self.folder} is in use by another {self.what} ({_describe(info)}). Two runs must not write one "
            f"folder: wait for it to finish, or choose another folder. If that run is no longer running, delete "
            f"{self.path} and try again."
        )

    def acquire(self) -> FolderLock:
        if not self.folder.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            self._created_folder = True
        key = str(self.path.resolve())
        if key in FolderLock._held:
            FolderLock._held[key][1] += 1
            self._key = key
            return self
        lock: FileLock | SoftFileLock = FileLock(
            self.path, timeout=_PATIENCE, thread_local=False, on_acquired=self._write_record
        )
        try:
            try:
                lock.acquire()
            except OSError as err:
                if err.errno != errno.ENOSYS:
                    raise
                # no flock on this filesystem: filelock's existence lock, in place of the empty file just made
                with contextlib.suppress(OSError):
                    if self.path.stat().st_size == 0:
                        self.path.unlink()
                lock = SoftFileLock(self.path, timeout=0, thread_local=False)
                lock.acquire()
        except Timeout:
            self._remove_created_folder()
            raise self._refuse() from None
        FolderLock._held[key] = [lock, 1]
        self._key = key
        return self

    def _remove_created_folder(self) -> None:
        if self._created_folder:
            try:
                self.folder.rmdir()  # a run that failed before writing anything leaves no folder
            except OSError:
                pass

    def release(self) -> None:
        held = FolderLock._held.get(self._key or "")
        if held is None:
            return
        held[1] -= 1
        if held[1]:
            return
        del FolderLock._held[self._key or ""]
        lock = held[0]
        try:
            if isinstance(lock, FileLock):
                self.path.unlink(missing_ok=True)  # while still holding it (filelock retries on an unlinked file)
        finally:
            lock.release()
        self._remove_created_folder()

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _held_elsewhere(path: Path) -> bool | None:
    """Whether another process holds the OS lock on `path` (None: there is no lock file). Probed on a descriptor of
    the existing file (never created: a read-only command writes nothing), released when it is closed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except (ImportError, OSError):  # no flock (Windows, some network filesystems): the file alone says it is held
        return True
    finally:
        os.close(fd)


def lock_holder(folder, lock_name: str = LOCK_NAME) -> dict | None:
    """The record of a live process holding `folder` (other than this one), else None."""
    path = Path(folder) / lock_name
    if not path.is_file() or str(path.resolve()) in FolderLock._held or not _held_elsewhere(path):
        return None
    return _read_record(path) or {"pid": "?", "hostname": "?"}


def remove_stale_lock(path) -> bool:
    """Delete a lock file nobody holds (its process died: the kernel released its lock); True if deleted."""
    path = Path(path)
    if not path.is_file() or str(path.resolve()) in FolderLock._held or _held_elsewhere(path) is not False:
        return False
    lock = FileLock(path, timeout=0, thread_local=False)
    try:
        with lock:
            path.unlink(missing_ok=True)
    except Timeout:  # taken meanwhile
        return False
    return True
