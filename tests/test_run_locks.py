"""One run per folder (a lock naming its holder; stale locks of dead processes taken over), one
checkpoint folder per run, no repeated seeds or grid points in a sweep."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, set_flags, snapshot, tiny_run
from helpers import hold_lock, raises_naming

from hf_ot.cli import main

pytestmark = pytest.mark.usefixtures("in_repo")
TINY = tiny_run()


def cfg(out, *extra):
    from hf_ot.recipes import load_config

    return load_config("quickstart", [*TINY, f"output_dir={out}", *extra])


@pytest.mark.slow
def test_a_second_run_into_a_held_folder_is_refused_naming_the_first(tmp_path):
    from hf_ot.recipes import run_recipe

    out = tmp_path / "run"
    holder = hold_lock(out)
    try:
        with pytest.raises(ValueError, match=rf"in use by another .*\(pid {holder.pid} on {socket.gethostname()}"):
            run_recipe(cfg(out))
        assert sorted(p.name for p in out.iterdir()) == [".hf_ot.lock"]  # nothing written
    finally:
        holder.kill()
        holder.wait()
    # the holder died (SIGKILL: its lock file stays, the kernel released its flock): the next run takes it over
    assert (out / ".hf_ot.lock").exists()
    run_recipe(cfg(out))
    assert (out / "model").is_dir() and not (out / ".hf_ot.lock").exists()


def test_a_lock_file_nobody_holds_is_taken_over_whatever_it_says(tmp_path, caplog):
    """The OS lock decides, not the record: a file left by a killed run (a dead pid, a live pid whose process holds
    no lock, another host) is taken over with a note; while held, another process is refused naming the holder."""
    from hf_ot.errors import UsageError
    from hf_ot.run_folders import FolderLock, lock_holder

    folder = tmp_path / "f"
    folder.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    for record in (
        {"pid": dead.pid, "hostname": host},
        {"pid": os.getppid(), "hostname": host},
        {"pid": 1, "hostname": "node-7"},
    ):
        (folder / ".hf_ot.lock").write_text(json.dumps(record))
        assert lock_holder(folder) is None
        caplog.clear()
        with FolderLock(folder):
            info = json.loads((folder / ".hf_ot.lock").read_text())
            assert info["pid"] == os.getpid() and info["hostname"] == host
        assert f"pid {record['pid']}" in caplog.text and "taking it over" in caplog.text
        assert not (folder / ".hf_ot.lock").exists()
    holder = hold_lock(folder)
    try:
        assert lock_holder(folder)["pid"] == holder.pid
        with pytest.raises(UsageError, match=rf"pid {holder.pid} on {host}.*delete .*hf_ot.lock"):
            FolderLock(folder).acquire()
    finally:
        holder.kill()
        holder.wait()
    assert lock_holder(folder) is None  # killed: the kernel released its lock
    with FolderLock(folder):
        pass


@pytest.mark.slow
def test_two_cli_runs_into_one_folder_at_once(tmp_path):
    """The first run stops (SIGSTOP) right after taking its folder; the second is refused (exit 2) naming it."""
    out = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "hf_ot.cli",
        "train",
        "quickstart",
        "--output-dir",
        str(out),
        *set_flags(TINY),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runner = str(Path(__file__).with_name("fault_runner.py"))  # stops itself once it holds the lock
    first = subprocess.Popen(
        [sys.executable, runner, "run-locked:STOP", *args[3:]],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            if (out / ".hf_ot.lock").exists() and (out / ".hf_ot.lock").read_text().strip():
                break
            time.sleep(0.1)
        second = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"pid {first.pid}" in second.stderr and "in use by another" in second.stderr
        os.kill(first.pid, signal.SIGCONT)
        assert first.wait(timeout=300) == 0
    finally:
        if first.poll() is None:
            first.kill()
    assert json.loads((out / "results.json").read_text())["model_save_id"]


def test_a_checkpoint_folder_belongs_to_one_run(tmp_path):
    from hf_ot.errors import UsageError
    from hf_ot.recipes import run_recipe

    shared = tmp_path / "shared_trainer"
    saving = ["training.save_strategy=steps", "training.save_steps=2", f"training.output_dir={shared}"]
    run_recipe(cfg(tmp_path / "a", *saving))
    before = snapshot(shared)
    for overwrite in (False, True):
        with pytest.raises(ValueError, match=rf"belongs to another run \(output_dir {tmp_path / 'a'}"):
            run_recipe(cfg(tmp_path / "b", *saving), overwrite=overwrite)
    assert snapshot(shared) == before  # run a can still resume its own checkpoints
    assert not (tmp_path / "b").exists()
    # checkpoints of a run hf_ot cannot name (no record): not mixed with, not deleted
    (shared / "hf_ot_run.json").unlink()
    with raises_naming(
        UsageError, "training.output_dir", "shared_trainer", "checkpoints of another run", "cannot tell"
    ):
        run_recipe(cfg(tmp_path / "c", *saving), overwrite=True)
    assert snapshot(shared) == {k: v for k, v in before.items() if k != "hf_ot_run.json"}


@pytest.mark.parametrize(
    "flags, repeated",
    [(["--seeds", "1", "1"], "seed 1"), (["--values", "0.1", "0.1"], "0.1"), (["--values", "1", "1.0"], "1")],
)
def test_a_sweep_refuses_repeated_seeds_and_grid_points(tmp_path, capsys, flags, repeated):
    args = [
        "sweep",
        "quickstart",
        "--param",
        "model.ot.ot_lambda",
        "--out",
        str(tmp_path / "sweep"),
        *set_flags(TINY),
    ]
    if "--values" not in flags:
        args += ["--values", "0.1"]
    assert main([*args, *flags]) == 2
    err = capsys.readouterr().err
    assert repeated in err and "more than once" in err
    assert not list((tmp_path / "sweep").glob("*/model"))  # nothing ran


def test_robustness_refuses_one_name_for_two_models(tmp_path, capsys):
    assert (
        main(
            [
                "robustness",
                "--models",
                f"a={tmp_path}",
                f"a={tmp_path}",
                "--config",
                "quickstart",
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    assert "given twice" in capsys.readouterr().err


def test_training_output_dir_inside_another_runs_folder_is_refused(tmp_path):
    from hf_ot.recipes import run_recipe

    run_recipe(cfg(tmp_path / "a"))
    with pytest.raises(ValueError, match="is the output folder of another run"):
        run_recipe(
            cfg(
                tmp_path / "b",
                "training.save_strategy=steps",
                "training.save_steps=1",
                f"training.output_dir={tmp_path / 'a'}",
            )
        )
    assert not list((tmp_path / "a").glob("checkpoint-*"))


def test_evaluate_refuses_a_noise_rate_given_twice(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")  # (a model folder stands in)
    assert main(["evaluate", str(tmp_path), "--config", "quickstart", "--noise", "0.1", "0.1"]) == 2
    assert "0.1 is given more than once" in capsys.readouterr().err


def test_a_save_into_the_folder_of_a_live_run_is_refused(tmp_path, capsys):
    from conftest import make_base

    from hf_ot.recipes import run_recipe

    out = tmp_path / "c1"
    run_recipe(cfg(out))
    base = tmp_path / "base"
    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(base)
    before = snapshot(out / "model")
    holder = hold_lock(out)  # a live run holds c1
    try:
        capsys.readouterr()
        assert main(["convert", str(base), str(out / "model"), "--overwrite"]) == 2
        err = capsys.readouterr().err
        assert f"the output folder of a live run (pid {holder.pid}" in err
        assert snapshot(out / "model") == before
    finally:
        holder.kill()
        holder.wait()
    assert (
        main(["convert", str(base), str(out / "model"), "--overwrite"]) == 0
    )  # the run is gone: its model's to replace


def test_on_a_filesystem_without_flock_the_lock_file_alone_decides(tmp_path, monkeypatch):
    """filelock's existence lock stands in: held while the run lasts, gone after; one left by a killed run is refused
    naming its holder and the file to delete (nothing can tell it is stale there)."""
    import errno
    import fcntl

    from hf_ot.errors import UsageError
    from hf_ot.run_folders import FolderLock, lock_holder

    def no_flock(fd, op):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    folder = tmp_path / "f"
    folder.mkdir()
    with FolderLock(folder):
        assert (folder / ".hf_ot.lock").read_text().split("\n")[0] == str(os.getpid())
    assert not (folder / ".hf_ot.lock").exists()
    (folder / ".hf_ot.lock").write_text("4242\nnode-7\n0123456789\n")  # a killed run's marker
    assert lock_holder(folder)["pid"] == 4242
    with pytest.raises(UsageError, match=r"pid 4242 on node-7.*delete .*hf_ot.lock"):
        FolderLock(folder).acquire()
    (folder / ".hf_ot.lock").unlink()
    with FolderLock(folder):
        pass


def test_a_folder_that_cannot_be_written_is_named_with_the_fix(tmp_path, monkeypatch):
    import errno

    import filelock

    from hf_ot.errors import UsageError
    from hf_ot.run_folders import FolderLock

    def read_only(self, *a, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(self.lock_file))

    monkeypatch.setattr(filelock.FileLock, "acquire", read_only)
    with raises_naming(UsageError, str(tmp_path / "run"), "cannot be written", "read-only file system", "writable"):
        FolderLock(tmp_path / "run", what="hf-ot run").acquire()
    assert not (tmp_path / "run").exists()  # the folder it made for the run is gone again
