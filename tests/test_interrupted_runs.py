"""A kill never leaves a run without its model. Real processes are killed (SIGKILL, SIGTERM) at chosen points of
the final save (tests/fault_runner.py injects the kill by monkeypatch); at every one OUT/model is the complete earlier
model or the complete new one, results.json describes the model that is there, and what the kill left beside it
(hidden) is named by the next save, never deleted by it. SIGTERM is handled as Ctrl-C: the checkpoint is named,
--resume suggested, exit code 143."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import built_once, make_base
from helpers import hf_ot_interrupted_runs, hf_ot_train, model_state, raises_naming


def tree(folder: Path) -> dict:
    """Every path under folder with its size and modification time: what a read-only command must leave as it is."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith(".") and p.name != ".hf_ot.lock")


@pytest.fixture(scope="session")
def first_run(tmp_path_factory):
    """A finished tiny run, trained once for all xdist workers: each test kills a copy of it."""

    def build(root: Path) -> None:
        done = hf_ot_train(root / "first")
        assert done.returncode == 0, done.stderr[-3000:]

    return built_once(tmp_path_factory, "interrupted-first-run", build) / "first"


@pytest.mark.slow
@pytest.mark.parametrize(
    "point", ["save-written", "save-pending-written", "swap-model-in-place", "swap-before-cleanup"]
)
def test_sigkill_during_the_final_save_leaves_a_whole_model_with_its_results(first_run, tmp_path, point):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(first_run, out)
    earlier = model_state(out)["save_id"]
    killed = hf_ot_train(out, "--overwrite", "--set", "training.seed=7", fault=point)
    assert killed.returncode == -9, killed.stderr[-3000:]
    # at the kill: a whole model, described by results.json (the earlier or the new one)
    now = model_state(out, results_pending=point == "swap-model-in-place")
    committed = point in ("swap-model-in-place", "swap-before-cleanup")
    assert (now["save_id"] != earlier) == committed
    if point != "save-written":
        assert leftovers(out)  # what the kill interrupted is still beside the model
    # a read-only command reads the whole model and touches nothing; a later --overwrite is not refused over the
    # kill's hidden leftovers
    from hf_ot.cli import main
    from hf_ot.run_folders import check_run_folder

    before = tree(out)
    assert main(["push", str(out / "model"), "me/model", "--dry-run"]) == 0
    assert tree(out) == before
    check_run_folder(out, out / "trainer", overwrite=True, resume=False)
    assert model_state(out, results_pending=point == "swap-model-in-place")["save_id"] == now["save_id"]


@pytest.mark.slow
def test_sigkill_between_the_two_renames_names_the_mv_that_restores_the_model(first_run, tmp_path):
    """Without an atomic exchange (a filesystem without renameat2), the swap is two renames: a kill between them
    leaves no OUT/model; every command names the earlier model beside it and the one mv that puts it back."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(first_run, out)
    killed = hf_ot_train(out, "--overwrite", "--set", "training.seed=7", fault="swap-between-renames", no_exchange=True)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert not (out / "model").exists() and leftovers(out)
    from hf_ot.cli import main

    before = tree(out)
    assert main(["push", str(out / "model"), "me/model", "--dry-run"]) == 2  # names where the model is, and the fix
    assert tree(out) == before
    again = hf_ot_train(out, "--overwrite")
    assert again.returncode == 2 and not (out / "model").exists()  # refused: nothing put anywhere
    (command,) = [line.strip() for line in again.stderr.splitlines() if line.strip().startswith("mv ")]
    subprocess.run(command, shell=True, check=True)
    model_state(out)  # the earlier model, with the results that describe it


@pytest.mark.slow
def test_sigterm_during_the_final_save_keeps_the_earlier_model_and_says_so(first_run, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(first_run, out)
    earlier = model_state(out)["save_id"]
    stopped = hf_ot_train(out, "--overwrite", "--set", "training.seed=7", fault="save-written:TERM")
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "interrupted" in stopped.stderr and "Traceback" not in stopped.stderr
    assert model_state(out)["save_id"] == earlier and leftovers(out) == []


@pytest.mark.slow
@pytest.mark.parametrize("point", ["save-written", "swap-before-cleanup"])
def test_a_killed_convert_leaves_a_whole_folder_and_the_next_command_keeps_the_rest(tmp_path, point):
    from hf_ot.run_folders import foreign_entries, read_manifest

    base = tmp_path / "base"
    make_base("bert", "BertModel").save_pretrained(base)
    target = tmp_path / "ot"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = ["convert", str(base), str(target)]
    command = [*hf_ot_interrupted_runs(), *args]
    from hf_ot.cli import main

    assert main(args) == 0  # the first conversion runs here: only the killed one needs a process of its own
    earlier = read_manifest(target)["save_id"]
    killed = subprocess.run(
        [*hf_ot_interrupted_runs(point), *args, "--overwrite", "--ot-num-steps", "3"],
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert killed.returncode == -9
    assert foreign_entries(target) == [] and read_manifest(target)  # whole: the earlier one or the new one
    assert (read_manifest(target)["save_id"] != earlier) == (point == "swap-before-cleanup")
    left = {p.name for p in tmp_path.iterdir() if p.name.startswith(".")}  # the kill's leftovers
    assert left
    again = subprocess.run([*command, "--overwrite", "--ot-num-steps", "4"], env=env, capture_output=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((target / "config.json").read_text())["ot_num_steps"] == 4
    assert {p.name for p in tmp_path.iterdir() if p.name.startswith(".")} == left - {".ot.lock"}  # (kept)


@pytest.mark.slow
def test_a_first_run_killed_while_saving_can_be_run_again_and_its_leftover_is_named(tmp_path):
    out = tmp_path / "run"
    killed = hf_ot_train(out, fault="save-written")
    assert killed.returncode == -9
    assert not (out / "model").exists() and not (out / "results.json").exists() and (left := leftovers(out))
    done = hf_ot_train(out)  # the run is started again: it finds no model; the half-written one stays, named
    assert done.returncode == 0, done.stderr[-3000:]
    model_state(out)
    (half,) = [name for name in left if ".tmp-" in name]
    assert leftovers(out) == [n for n in left if n != ".model.lock"] and f"rm -r {out / half}" in done.stderr


@pytest.mark.slow
def test_sigterm_once_the_swap_committed_says_the_new_model_is_in_place(first_run, tmp_path):
    """A SIGTERM during the swap waits until it commits: the new model, its results and its curves are then in place,
    and the message says so (not 'no finished model was replaced')."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(first_run, out)
    earlier = model_state(out)["save_id"]
    stopped = hf_ot_train(out, "--overwrite", "--set", "training.seed=7", fault="swap-model-in-place:TERM")
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "no finished model was replaced" not in stopped.stderr
    assert "the new model is complete and in place" in stopped.stderr and "Traceback" not in stopped.stderr
    now = model_state(out)
    assert now["save_id"] != earlier
    results = json.loads((out / "results.json").read_text())
    from hf_ot.run_folders import file_digest

    assert file_digest(out / "training_curves.png") == results["training_curves_sha256"]  # the run is complete
    assert leftovers(out) == []


def test_pending_files_are_names_beside_the_folder_not_paths(tmp_path):
    """Files swapped in with a model lie beside it: a path elsewhere is refused before anything is written."""
    from hf_ot.run_folders import safe_save

    with pytest.raises(ValueError, match="pending takes file names"):
        safe_save(lambda tmp: None, tmp_path / "run" / "model", pending={str(tmp_path / "elsewhere.json"): {}})
    assert not (tmp_path / "run").exists()


def test_no_checkpoint_yet_names_save_steps_not_only_save_strategy(tmp_path):
    """Interrupted before the first checkpoint of a run that saves (training.save_steps not reached yet): the message
    blamed save_strategy 'no', which was not set. Both the interrupt and a later --resume name save_steps."""
    import argparse

    from hf_ot.cli.train import interrupted_message
    from hf_ot.errors import UsageError
    from hf_ot.run_folders import check_run_folder

    (tmp_path / "out").mkdir()
    args = argparse.Namespace(config="quickstart", set=[], output_dir=str(tmp_path / "out"))
    assert "training.save_steps" in interrupted_message(args, tmp_path / "out", tmp_path / "out")
    with raises_naming(UsageError, "no checkpoint", "training.save_steps"):
        check_run_folder(tmp_path / "out", tmp_path / "out", overwrite=False, resume=True)
