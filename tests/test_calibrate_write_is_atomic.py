"""calibrate --write changes config.json, the card, the figure and the manifest together (a copy of the folder, swapped
in as a save is): Ctrl-C waits until all are in place; after a kill at any point the folder is the earlier one or the
calibrated one, still hf_ot's (a later save may replace it), and the next --write (or any command that writes) clears
the rest. A calibrated folder converted again drops the earlier model's calibration record."""

import json
import shutil
import signal
from pathlib import Path

import pytest
from helpers import TABLE, fake, tiny_lm

import hf_ot
from hf_ot.calibration import CONFIG_KEY, calibrate, write_calibration
from hf_ot.run_folders import check_replaceable_model_folder, foreign_entries, read_manifest


def state(folder: Path) -> dict:
    return {
        "steps": json.loads((folder / "config.json").read_text())["ot_num_steps"],
        "card": "calibration" in (folder / "README.md").read_text(),
        "figure": (folder / "calibration.png").exists(),
    }


class Killed(BaseException):
    """What a kill -9 leaves: the code after the point never runs (no except Exception handler catches it)."""


def killed_at(monkeypatch, point: str, *, interrupt: bool = False):
    """At `point` of the write the process is killed (or, interrupt=True, gets a Ctrl-C): "writing" (the card is in
    the folder's copy, the config not yet), "exchange" (the copy is complete, not swapped in yet) or "cleanup" (swapped
    in, the earlier folder not yet deleted). A kill runs no cleanup: nothing is deleted after it."""
    from hf_ot import run_folders

    def kill():
        if interrupt:
            signal.raise_signal(signal.SIGINT)  # to this (the main) thread, as a Ctrl-C is handled
            return
        monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: None)
        monkeypatch.setattr(shutil, "rmtree", lambda *a, **k: None)
        raise Killed

    real_write, real_exchange, real_rmtree = run_folders.write_text_atomic, run_folders.exchange, shutil.rmtree
    writes = {"n": 0}

    def write_text_atomic(path, text):
        writes["n"] += ".tmp-" in str(path)
        if point == "writing" and writes["n"] == 2:
            kill()
        return real_write(path, text)

    def exchange(a, b):
        if point == "exchange":
            kill()
        return real_exchange(a, b)

    def rmtree(path, *a, **k):
        if point == "cleanup" and ".tmp-" in str(path):
            kill()
        return real_rmtree(path, *a, **k)

    monkeypatch.setattr(run_folders, "write_text_atomic", write_text_atomic)
    monkeypatch.setattr(run_folders, "exchange", exchange)
    monkeypatch.setattr(shutil, "rmtree", rmtree)


def leftovers(folder: Path) -> list[str]:
    """Hidden files in the folder, or beside it (a write's copy and lock)."""
    inside = [p.name for p in folder.iterdir() if p.name.startswith(".")]
    return inside + [p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.")]


@pytest.mark.parametrize("point", ["writing", "exchange", "cleanup"])
def test_a_kill_leaves_a_whole_folder_and_the_next_write_keeps_what_it_left(tmp_path, monkeypatch, point):
    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    before = state(folder)
    result = calibrate(model, [{}], evaluate=fake(TABLE))
    killed_at(monkeypatch, point)
    with pytest.raises(Killed):
        write_calibration(folder, result)
    monkeypatch.undo()
    # at the kill: the earlier folder or the calibrated one, all four changed together; still recognised as hf_ot's
    # (train --overwrite may replace it), the kill's files beside it
    assert state(folder) == (before if point != "cleanup" else {"steps": 1, "card": True, "figure": True})
    assert foreign_entries(folder) == [] and (left := leftovers(folder))
    check_replaceable_model_folder(folder, overwrite=True)
    # the next --write writes again; what the kill left beside stays (hf_ot deletes only what the save wrote), but
    # its lock, which the next write takes and lets go
    write_calibration(folder, result)
    assert state(folder) == {"steps": 1, "card": True, "figure": True}
    assert foreign_entries(folder) == [] and set(leftovers(folder)) == set(left) - {".model.lock"}
    assert set(read_manifest(folder)["files"]) == {p.name for p in folder.iterdir()} - {"hf_ot_manifest.json"}


def test_a_folder_whose_parent_is_not_writable_is_refused_untouched(tmp_path, monkeypatch):
    from hf_ot.errors import UsageError

    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    before = state(folder)
    result = calibrate(model, [{}], evaluate=fake(TABLE))
    import errno

    import filelock

    def read_only(self, *a, **k):  # (root may write anywhere: the error a user's unwritable folder gives)
        raise OSError(errno.EACCES, "Permission denied", str(self.lock_file))

    monkeypatch.setattr(filelock.FileLock, "acquire", read_only)
    with pytest.raises(
        UsageError, match=rf"{tmp_path} cannot be written \(Permission denied\).*make that one writable"
    ):
        write_calibration(folder, result)
    assert state(folder) == before and leftovers(folder) == []


def test_ctrl_c_during_the_write_waits_until_everything_is_in_place(tmp_path, monkeypatch):
    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    result = calibrate(model, [{}], evaluate=fake(TABLE))
    killed_at(monkeypatch, "exchange", interrupt=True)
    # Ctrl-C raises KeyboardInterrupt (a process started in the background by a shell, `cmd &`, ignores SIGINT)
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            write_calibration(folder, result)
    finally:
        signal.signal(signal.SIGINT, ignored)
    monkeypatch.undo()
    assert state(folder) == {"steps": 1, "card": True, "figure": True}
    assert foreign_entries(folder) == [] and leftovers(folder) == []


def test_a_calibrated_folder_converted_again_drops_the_calibration_record(tmp_path):
    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    write_calibration(folder, calibrate(model, [{}], evaluate=fake(TABLE)))
    assert CONFIG_KEY in json.loads((folder / "config.json").read_text())
    again = hf_ot.convert(str(folder), num_steps=3)
    hf_ot.save_model(again, tmp_path / "again")
    values = json.loads((tmp_path / "again" / "config.json").read_text())
    assert CONFIG_KEY not in values and values["ot_num_steps"] == 3


def test_write_into_a_model_folder_without_a_manifest_is_refused_untouched(tmp_path):
    from conftest import snapshot

    from hf_ot.errors import UsageError

    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    (folder / "hf_ot_manifest.json").unlink()  # as hf_ot 0.1.0 saved it, or a copy without its manifest
    before = snapshot(folder)
    with pytest.raises(UsageError, match="config.json, which hf_ot cannot show it wrote.*a new folder with hf_ot"):
        write_calibration(folder, calibrate(model, [{}], evaluate=fake(TABLE)))
    assert snapshot(folder) == before and leftovers(folder) == []
