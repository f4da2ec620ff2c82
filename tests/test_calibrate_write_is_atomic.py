"""calibrate --write changes config.json, the card, the figure and the manifest together: Ctrl-C waits until all are in
place; after a kill at any point the folder is still hf_ot's (a later save may replace it) and the next --write (or
any command that writes) finishes or undoes the interrupted one. A calibrated folder converted again drops the
earlier model's calibration record."""

import json
import os
import signal
from pathlib import Path

import pytest
from test_calibration import fake
from test_metrics_and_sweeps import tiny_lm

import hf_ot
from hf_ot.calibration import CONFIG_KEY, calibrate, write_calibration
from hf_ot.run_folders import check_replaceable_model_folder, foreign_entries, read_manifest

TABLE = {("euler", 2): 2.0, ("euler", 1): 2.005}


def state(folder: Path) -> dict:
    return {
        "steps": json.loads((folder / "config.json").read_text())["ot_num_steps"],
        "card": "calibration" in (folder / "README.md").read_text(),
        "figure": (folder / "calibration.png").exists(),
    }


class Killed(BaseException):
    """What a kill -9 leaves: the code after the point never runs (no except Exception handler catches it)."""


def rename_fails_at(monkeypatch, n: int, *, interrupt: bool = False):
    """The n-th rename of a file into place kills the process (or, interrupt=True, delivers a Ctrl-C there)."""
    real = os.replace
    calls = {"n": 0}

    def replace(src, dst, *a, **k):
        if ".hf_ot-edit" in str(src):
            calls["n"] += 1
            if calls["n"] == n:
                if interrupt:
                    os.kill(os.getpid(), signal.SIGINT)
                else:
                    raise Killed
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_kill_between_the_renames_leaves_a_folder_the_next_write_finishes(tmp_path, monkeypatch, n):
    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    result = calibrate(model, [{}], evaluate=fake(TABLE))
    rename_fails_at(monkeypatch, n)
    with pytest.raises(Killed):
        write_calibration(folder, result)
    monkeypatch.undo()
    # mid-way: still recognised as hf_ot's (train --overwrite may replace it)
    assert foreign_entries(folder) == []
    check_replaceable_model_folder(folder, overwrite=True, repair=False)
    # the next --write finishes it: all four changed together
    write_calibration(folder, result)
    assert state(folder) == {"steps": 1, "card": True, "figure": True}
    assert foreign_entries(folder) == [] and not [p for p in folder.iterdir() if p.name.startswith(".")]
    assert set(read_manifest(folder)["files"]) == {p.name for p in folder.iterdir()} - {"hf_ot_manifest.json"}


def test_a_kill_while_writing_is_undone_by_a_command_that_writes(tmp_path, monkeypatch):
    from hf_ot import run_folders

    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    before = state(folder)
    result = calibrate(model, [{}], evaluate=fake(TABLE))
    real = run_folders.file_digest

    def digest(path):
        if ".hf_ot-edit" in str(path):
            raise Killed
        return real(path)

    monkeypatch.setattr(run_folders, "file_digest", digest)
    # the cleanup of an exception would remove the temporary files; a kill does not: skip it
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: None)
    with pytest.raises(Killed):
        write_calibration(folder, result)
    monkeypatch.undo()
    assert state(folder) == before and foreign_entries(folder) == []
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")]  # the kill's files
    check_replaceable_model_folder(folder, overwrite=True)  # what train --overwrite / convert --overwrite run first
    assert state(folder) == before and not [p for p in folder.iterdir() if p.name.startswith(".")]


def test_ctrl_c_during_the_write_waits_until_everything_is_in_place(tmp_path, monkeypatch):
    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    result = calibrate(model, [{}], evaluate=fake(TABLE))
    rename_fails_at(monkeypatch, 1, interrupt=True)
    with pytest.raises(KeyboardInterrupt):
        write_calibration(folder, result)
    monkeypatch.undo()
    assert state(folder) == {"steps": 1, "card": True, "figure": True}
    assert foreign_entries(folder) == [] and not [p for p in folder.iterdir() if p.name.startswith(".")]


def test_a_calibrated_folder_converted_again_drops_the_calibration_record(tmp_path):
    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    write_calibration(folder, calibrate(model, [{}], evaluate=fake(TABLE)))
    assert CONFIG_KEY in json.loads((folder / "config.json").read_text())
    again = hf_ot.convert(str(folder), num_steps=3)
    hf_ot.save_model(again, tmp_path / "again")
    values = json.loads((tmp_path / "again" / "config.json").read_text())
    assert CONFIG_KEY not in values and values["ot_num_steps"] == 3
