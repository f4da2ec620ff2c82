"""A command that only reads (evaluate, push --dry-run, calibrate without --write, check, env) writes and deletes
nothing; commands that write delete only what their own save wrote: hidden folders beside a model, also those whose
names look like a save's leftovers, stay."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, make_base, set_flags, tiny_run
from helpers import assert_names

from hf_ot.cli import main


def tree(folder: Path) -> dict:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def decoys(parent: Path, name: str = "model") -> list[Path]:
    """Folders a user keeps beside a model, named as hf_ot's save leftovers once were recognised (by name alone)."""
    made = []
    for hidden in (f".{name}.old-20240101", f".{name}.tmp-backup01"):
        (parent / hidden).mkdir(exist_ok=True)
        (parent / hidden / "NOTES.txt").write_text("my notes\n")
        made.append(parent / hidden / "NOTES.txt")
    return made


def hf_ot(*args, timeout=300):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "hf_ot.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ro") / "run"
    done = hf_ot("train", "quickstart", "--output-dir", str(out), *set_flags(tiny_run("training.save_strategy=no")))
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_read_only_commands_leave_every_file_as_it_was(run, capsys):
    notes = decoys(run)
    before = tree(run)
    model, tiny = str(run / "model"), set_flags(["data.max_eval_blocks=1", "data.block_size=16"])
    assert main(["push", model, "me/model", "--dry-run"]) == 0
    assert main(["evaluate", model, "--config", "quickstart", *tiny]) == 0
    assert main(["calibrate", model, "--config", "quickstart", "--max-batches", "1", *tiny]) == 0
    assert main(["env"]) == 0
    assert tree(run) == before
    assert all(n.read_text() == "my notes\n" for n in notes)


def test_commands_that_write_keep_a_users_hidden_folders(run, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(run, out)
    notes = decoys(out)
    again = hf_ot("train", "quickstart", "--output-dir", str(out), "--overwrite", *set_flags(tiny_run()))
    assert again.returncode == 0, again.stderr[-3000:]
    assert all(n.read_text() == "my notes\n" for n in notes)
    assert "left by an interrupted save" not in again.stderr

    base = tmp_path / "base"
    make_base("bert", "BertModel").save_pretrained(base)
    target = tmp_path / "ot"
    assert hf_ot("convert", str(base), str(target)).returncode == 0
    notes = decoys(tmp_path, "ot")
    converted = hf_ot("convert", str(base), str(target), "--overwrite", "--ot-num-steps", "2")
    assert converted.returncode == 0, converted.stderr[-2000:]
    assert all(n.read_text() == "my notes\n" for n in notes)
    assert json.loads((target / "config.json").read_text())["ot_num_steps"] == 2
    # the save's own hidden files (its lock, temporary folder) are gone; the user's stay
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [
        ".ot.old-20240101",
        ".ot.tmp-backup01",
    ]


def test_check_writes_nothing(tmp_path, monkeypatch):
    decoys(tmp_path)
    before = tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--ot-num-steps", "1", "2"]) == 0
    assert tree(tmp_path) == before


def test_a_refused_convert_changes_nothing_and_the_save_keeps_what_a_kill_left(tmp_path):
    base, target = tmp_path / "base", tmp_path / "ot"
    make_base("bert", "BertModel").save_pretrained(base)
    assert main(["convert", str(base), str(target)]) == 0
    # a later save into target killed while writing: its temporary folder stays beside
    (tmp_path / ".ot.tmp-0123abcd").mkdir()
    (tmp_path / ".ot.tmp-0123abcd" / "config.json").write_text("{}")
    before = tree(tmp_path)
    assert main(["convert", str(base), str(target)]) == 2  # refused (no --overwrite): exit 2, nothing done
    assert tree(tmp_path) == before
    assert main(["convert", str(base), str(target), "--overwrite"]) == 0
    assert (tmp_path / ".ot.tmp-0123abcd" / "config.json").read_text() == "{}"  # not this save's: kept


def users_recipe(folder: Path) -> Path:
    """A recipe of the user's own whose data is their notes.txt."""
    (folder / "notes.txt").write_text("Note: the shared field moves every token a little further.\n" * 40)
    (folder / "mine.yaml").write_text(f"task: causal-lm\ndata:\n  train_file: {folder / 'notes.txt'}\n")
    return folder / "mine.yaml"


def test_evaluating_on_other_data_than_the_cards_is_named(run, tmp_path, capsys):
    # a model trained on a user's files, evaluated with its recipe alone, would be measured on the recipe's own data
    model, tiny = str(run / "model"), set_flags(["data.max_eval_blocks=1", "data.block_size=16"])
    assert main(["evaluate", model, "--config", "quickstart", "--json", *tiny]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["data"] == "pydoc_data.topics (CPython reference manual)" and "warning" not in err
    mine = users_recipe(tmp_path)
    assert main(["evaluate", model, "--config", str(mine), "--json", *tiny]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["data"] == "notes.txt"
    # the warning names the data the card reports and the data read now, and how to read the model's own
    assert_names(err, "warning", "pydoc_data.topics", "notes.txt", "data.train_file")
    # data chosen with --set (the model's own, a test file of the user's): named, no warning
    chosen = set_flags([f"data.validation_file={tmp_path / 'notes.txt'}"])
    assert main(["evaluate", model, "--config", "quickstart", "--json", *tiny, *chosen]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["data"] == "notes.txt" and "warning" not in err  # (evaluated: the validation file alone)
    rates = ["--rates", "0.1", "--out", str(tmp_path / "rob")]
    assert main(["robustness", "--models", f"a={model}", "--config", str(mine), *rates, *tiny]) == 0
    assert "this reads notes.txt" in capsys.readouterr().err


def test_the_other_data_warning_comes_once_under_torchrun(run, tmp_path, capsys, monkeypatch):
    from hf_ot.cli._common import check_data_of
    from hf_ot.recipes import load_config

    cfg = load_config(str(users_recipe(tmp_path)))
    assert check_data_of(str(run / "model"), cfg, []) == "notes.txt" and "warning" in capsys.readouterr().err
    monkeypatch.setenv("RANK", "1")  # another process of the launch: the main process warns
    assert check_data_of(str(run / "model"), cfg, []) == "notes.txt" and "warning" not in capsys.readouterr().err
