"""One run per folder: a lock file naming the process that holds it (pid, hostname, the process's start time).

The lock is an flock on `FOLDER/.hf_ot.lock` (released by the kernel when its process dies, even by SIGKILL), and
the file says who holds it, so a refusal names the other run. A lock file left by a dead process is stale and taken
over (with a note): same host and that pid is not running, or runs a process started at another time (the pid was
reused). A lock of another host that this host cannot check is refused with the file to delete if that run is over.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from .errors import UsageError

LOCK_NAME = ".hf_ot.lock"
logger = logging.getLogger(__name__)

fcntl: Any
try:
    import fcntl
except ImportError:  # Windows: the pid / host / start-time record alone
    fcntl = None


def process_start_time(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch, rounded), or None if it is not running."""
    try:
        import psutil

        return round(psutil.Process(pid).create_time(), 2)
    except ImportError:
        pass
    except Exception:  # NoSuchProcess, AccessDenied, ZombieProcess
        return None
    try:  # Linux without psutil: field 22 of /proc/PID/stat, in clock ticks since boot
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        boot = next(
            float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
        )
        return round(boot + ticks / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _describe(info: dict) -> str:
    started = info.get("started_utc", "?")
    command = " ".join(info.get("command") or [])
    return f"pid {info.get('pid')} on {info.get('hostname')}, started {started}" + (f": {command}" if command else "")


def holder_state(info: dict) -> str:
    """'alive', 'dead' (stale) or 'unknown' (another host) for the process a lock file names."""
    if info.get("hostname") != socket.gethostname():
        return "unknown"
    pid = info.get("pid")
    if not isinstance(pid, int):
        return "dead"
    started = process_start_time(pid)
    if started is None:
        return "dead"
    recorded = info.get("process_start")
    if isinstance(recorded, (int, float)) and abs(started - recorded) > 2:
        return "dead"  # the pid now belongs to a later process
    return "alive"


class FolderLock:
    """with FolderLock(folder, what="run"): ... holds the folder for this process (re-entrant within it)."""

    _held: dict[str, int] = {}

    def __init__(self, folder, what: str = "run", lock_name: str = LOCK_NAME):
        self.folder = Path(folder)
        self.path = self.folder / lock_name
        self.what = what
        self._fd: int | None = None
        self._created_folder = False

    def _info(self) -> dict:
        return {
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "process_start": process_start_time(os.getpid()),
            "started_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "command": sys.argv[:12],
        }

    def _refuse(self, info: dict, why: str = "") -> UsageError:
        return UsageError(
            f"{self.folder} is in use by another {self.what} ({_describe(info)}){why}. Two runs must not write one "
            f"folder: wait for it to finish, or choose another folder. If that run is no longer running, delete "
            f"{self.path} and try again."
        )

    def acquire(self) -> FolderLock:
        key = str(self.path.resolve()) if self.path.parent.exists() else str(self.path.absolute())
        if FolderLock._held.get(key):
            FolderLock._held[key] += 1
            self._key = key
            return self
        if not self.folder.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            self._created_folder = True
        key = str(self.path.resolve())
        for _ in range(50):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    info = self._read(fd)
                    for _ in range(10):  # its holder may be writing its record this instant
                        if info:
                            break
                        time.sleep(0.1)
                        info = self._read(fd)
                    os.close(fd)
                    self._cleanup_folder()
                    raise self._refuse(info) from None
                except OSError:  # a filesystem without flock: the record alone decides
                    pass
            try:
                if os.fstat(fd).st_ino != os.stat(self.path).st_ino:  # unlinked by its holder meanwhile: again
                    os.close(fd)
                    continue
            except FileNotFoundError:
                os.close(fd)
                continue
            info = self._read(fd)
            if info and info.get("pid") != os.getpid():
                state = holder_state(info)
                if state == "alive":
                    os.close(fd)
                    self._cleanup_folder()
                    raise self._refuse(info)
                if state == "unknown":
                    os.close(fd)
                    self._cleanup_folder()
                    raise self._refuse(info, " (another host: hf_ot cannot check whether it still runs)")
                logger.warning(
                    "hf_ot: %s held a stale lock of a process that is no longer running (%s); taking it over.",
                    self.folder,
                    _describe(info),
                )
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, (json.dumps(self._info()) + "\n").encode())
            os.fsync(fd)
            self._fd = fd
            self._key = key
            FolderLock._held[key] = 1
            return self
        raise UsageError(f"Could not lock {self.path}: it keeps changing. Is another run starting there?")

    @staticmethod
    def _read(fd) -> dict:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            data = b""
            while chunk := os.read(fd, 65536):
                data += chunk
            info = json.loads(data.decode() or "{}")
            return info if isinstance(info, dict) else {}
        except (OSError, ValueError):
            return {}

    def _cleanup_folder(self) -> None:
        if self._created_folder:
            try:
                self.folder.rmdir()
            except OSError:
                pass

    def release(self) -> None:
        key = getattr(self, "_key", None)
        if key is None or not FolderLock._held.get(key):
            return
        FolderLock._held[key] -= 1
        if FolderLock._held[key]:
            return
        del FolderLock._held[key]
        if self._fd is not None:
            try:
                self.path.unlink(missing_ok=True)  # while still holding it: the next one opens a fresh file
            finally:
                os.close(self._fd)
                self._fd = None
        if self._created_folder:
            try:
                self.folder.rmdir()  # a run that failed before writing anything leaves no folder
            except OSError:
                pass

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def lock_holder(folder, lock_name: str = LOCK_NAME) -> dict | None:
    """The record of a live process holding `folder` (other than this one), else None."""
    path = Path(folder) / lock_name
    if not path.is_file() or FolderLock._held.get(str(path.resolve())):
        return None
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("pid") == os.getpid():
        return None
    return info if holder_state(info) != "dead" else None


def remove_stale_lock(path) -> bool:
    """Delete a lock file nobody holds (its process died: the kernel released the flock); True if deleted."""
    path = Path(path)
    if fcntl is None or not path.is_file() or FolderLock._held.get(str(path.resolve())):
        return False
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    try:
        if os.fstat(fd).st_ino == os.stat(path).st_ino:
            path.unlink()
            return True
        return False
    except OSError:
        return False
    finally:
        os.close(fd)
