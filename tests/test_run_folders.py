"""hf_ot.run_folders: saves swapped in whole under a lock, nothing a user keeps deleted, leftovers named."""

from __future__ import annotations

import json
import shutil
import tracemalloc

import pytest
import torch
from conftest import REPO, make_base, set_flags, snapshot, tiny_run
from helpers import quick_cfg, raises_naming

import hf_ot
from hf_ot.checkpoints import CheckpointError, read_json
from hf_ot.cli import main
from hf_ot.errors import UsageError
from hf_ot.hub import save_model
from hf_ot.recipes import run_recipe


@pytest.mark.parametrize("name", ["sweep.json", "curves.png"])
def test_a_summary_file_that_is_a_dangling_link_is_refused(tmp_path, name):
    # `hf-ot sweep --out s1` with s1/sweep.json -> ../elsewhere/mine.json (not there yet): rc 0, and the sweep's
    # summary was written to elsewhere/mine.json through the user's link; a link to a file is refused
    from hf_ot.recipes.sweep import SWEEP_FILES
    from hf_ot.run_folders import check_outputs_replaceable

    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / name).symlink_to(tmp_path / "elsewhere" / "mine")
    with pytest.raises(UsageError, match=name):
        check_outputs_replaceable(tmp_path / "s1", SWEEP_FILES)


@pytest.mark.parametrize("name", ["results.json", "log_history.json"])
def test_a_run_folders_dangling_link_is_not_replaced(tmp_path, name):
    # `hf-ot train --output-dir t3` with t3/results.json -> ../elsewhere/res.json: rc 0, the user's link replaced by
    # the run's file; a dangling training_curves.png is refused ("holds files a recipe did not write")
    from hf_ot.run_folders import check_run_folder

    out = tmp_path / "t3"
    out.mkdir()
    (out / name).symlink_to(tmp_path / "elsewhere" / "mine")
    with pytest.raises(UsageError, match=name):
        check_run_folder(out, out / "trainer", overwrite=True, resume=None)


@pytest.mark.parametrize(
    "command",
    [
        ["train", "quickstart", "--output-dir", "{file}"],  # "[Errno 17] File exists: '.../notes.txt'" (exit 1)
        ["train", "quickstart", "--output-dir", "{file}/run"],  # "[Errno 20] Not a directory" (exit 1)
        ["train", "quickstart", "--set", "training.output_dir={file}"],
        ["robustness", "--models", "a=m", "--config", "quickstart", "--out", "{file}"],
        ["evaluate", "m", "--config", "quickstart", "--result-file", "{file}/result.json"],  # after the evaluation
        ["convert", "m", "{file}/ot"],
    ],
    ids=["train-out", "train-out-under-file", "trainer-dir", "robustness-out", "result-file-under-file", "convert"],
)
def test_an_output_path_on_a_file_is_a_usage_error_before_anything_runs(tmp_path, capsys, monkeypatch, command):
    # `hf-ot train quickstart --output-dir notes.txt` (a file): "error: [Errno 17] File exists", exit 1; `hf-ot
    # evaluate MODEL --result-file notes.txt/r.json` evaluated the model, then failed the same way
    from hf_ot.recipes import data, evaluate

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(data, "text_splits", lambda *a, **k: pytest.fail("data read"))
    monkeypatch.setattr(evaluate, "evaluate_folder", lambda *a, **k: pytest.fail("evaluated"))
    monkeypatch.setattr(evaluate, "robustness", lambda *a, **k: pytest.fail("evaluated"), raising=False)
    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")  # (a model folder stands in)
    assert main([c.format(file="notes.txt") for c in command]) == 2
    assert "notes.txt" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "my notes\n"


@pytest.mark.parametrize("command", ["evaluate", "calibrate", "robustness", "check", "convert", "train", "tokenizer"])
@pytest.mark.parametrize("name", ["notes.txt", "model/config.json"])
def test_a_file_given_as_the_model_folder_is_named_as_a_file(tmp_path, capsys, monkeypatch, command, name):
    # `hf-ot evaluate runs/x/model/config.json --config quickstart`: "Repo id must be in the form 'repo_name' or
    # 'namespace/repo_name'" (exit 1); `hf-ot evaluate notes.txt ...`: "It looks like the config file at 'notes.txt'
    # is not a valid JSON file" (exit 1); `hf-ot train sst2_minilm --set model.base=notes.txt` (or tokenizer=) alike
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    quick = ["--config", "quickstart"]
    argv = {
        "robustness": ["robustness", "--models", f"a={name}", *quick],
        "check": ["check", name],
        "convert": ["convert", name, "out"],
        "train": ["train", "sst2_minilm", "--set", f"model.base={name}", "--output-dir", "run"],
        "tokenizer": ["train", "sst2_minilm", "--set", f"tokenizer={name}", "--output-dir", "run"],
    }.get(command, [command, name, *quick])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert name in err and "folder" in err, err


def test_a_link_to_a_model_folder_is_named_a_link(tmp_path, capsys):
    # ln -s elsewhere/ot ot; hf-ot convert BASE ot --overwrite: "ot exists and is not a folder" (it is a link to one);
    # a run folder whose model/ is a link: "model (not a folder)". Both are refused (a save replaces the folder, not
    # what a link points to); the message says what it is
    from hf_ot.run_folders import check_replaceable_model_folder, run_folder_foreign

    (tmp_path / "real").mkdir()
    (tmp_path / "ot").symlink_to(tmp_path / "real")
    with pytest.raises(UsageError, match=r"ot exists and is a link \(to .*real\)"):
        check_replaceable_model_folder(tmp_path / "ot", overwrite=True)
    (tmp_path / "ot").rename(tmp_path / "model")
    assert run_folder_foreign(tmp_path) == ["real", "model (a link)"]


def test_an_unwritable_result_file_or_write_folder_is_refused_before_the_work(tmp_path, capsys, monkeypatch):
    # in a read-only folder (a read-only mount): `hf-ot evaluate runs/q/model --config quickstart --result-file r.json`
    # evaluated, then failed with exit 1 and "[Errno 30] Read-only file system: '.../.r.json.46ab51c23e00.tmp'";
    # `hf-ot calibrate MODEL --config quickstart --write` ran the whole grid before "cannot be written", and with a
    # Hub id failed only after it. (Root writes anywhere: os.access stands in for the mount here.)
    import os

    from hf_ot.recipes import evaluate

    unwritable = tmp_path / "ro"
    real_access = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda p, m, **k: False if str(p).startswith(str(unwritable)) and m == os.W_OK else real_access(p, m, **k),
    )
    unwritable.mkdir()
    (unwritable / "model").mkdir()
    (unwritable / "model" / "config.json").write_text('{"model_type": "ot_gpt2"}')
    result = str(unwritable / "r.json")
    assert main(["evaluate", str(unwritable / "model"), "--config", "quickstart", "--result-file", result]) == 2
    assert f"{unwritable} cannot be written" in capsys.readouterr().err
    with raises_naming(UsageError, "--write", f"{unwritable}/model", "cannot be written"):
        evaluate.calibrate_folder(str(unwritable / "model"), "quickstart", write=True)
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text("{}")
    assert main(["convert", str(tmp_path / "base"), str(unwritable / "ot")]) == 2  # (sibling: before loading)
    assert f"OUT {unwritable}/ot: {unwritable} cannot be written" in capsys.readouterr().err
    with raises_naming(UsageError, "--write", "local model folder"):
        evaluate.calibrate_folder("openai-community/gpt2", "quickstart", write=True)


def test_a_full_disk_while_writing_a_checkpoint_is_a_message_not_a_traceback(tmp_path, capsys, monkeypatch):
    # (ulimit -f 45; hf-ot train quickstart --set training.max_steps=3 ...): torch.save of the checkpoint's optimizer
    # state failed with "RuntimeError: basic_ios::clear: iostream error" and a 40-line traceback (exit 1, as a bug);
    # a full disk says so, names the checkpoint folder and that the earlier checkpoints are kept
    import torch

    def full(obj, f, *a, **k):
        raise RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 0: file write failed")

    monkeypatch.setattr(torch, "save", full)
    flags = set_flags(tiny_run("training.save_strategy=steps", "training.save_steps=1", max_steps=1))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) == 1
    err = capsys.readouterr().err
    assert "writing checkpoint-1" in err and "file write failed" in err and "Traceback" not in err


def test_a_result_file_inside_a_model_folder_is_refused(tmp_path, capsys):
    # hf-ot evaluate runs/r/model --config quickstart --result-file runs/r/model/eval.json: written there; then
    # `hf-ot train quickstart --output-dir runs/r --overwrite` refused "model/eval.json (not written by hf_ot)" and a
    # push would upload it. --out of a model folder was refused already (lock_outputs); --result-file now too
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "ot_gpt2"}')
    result = str(tmp_path / "model" / "eval.json")
    assert main(["env", "--result-file", result]) == 2
    assert "is inside a model folder" in capsys.readouterr().err and not (tmp_path / "model" / "eval.json").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "{folder}", "--config", "quickstart"],  # "Unrecognized model in emptyd. Should have a
        ["convert", "{folder}", "{folder}-ot"],  # `model_type` key in its config.json." (exit 1; there is none)
        ["check", "{folder}"],  # "You need to have sentencepiece or tiktoken installed to convert a slow tokenizer"
    ],
)
def test_a_folder_without_config_json_is_named_not_a_model_folder(tmp_path, capsys, command):
    folder = tmp_path / "emptyd"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a model\n")
    assert main([arg.format(folder=folder) for arg in command]) == 2
    assert f"{folder} holds no config.json" in capsys.readouterr().err


def test_a_summary_write_cut_short_does_not_block_the_next_run(tmp_path, monkeypatch):
    # Ctrl-C (or SIGTERM, or an error) while `hf-ot robustness --out rob` drew robustness.png, after robustness.json was
    # written: the next `hf-ot robustness --out rob` refused "rob holds robustness.json, which hf-ot did not write (or
    # you changed)"; sweep.json and paper.json alike (the record of hf-ot's outputs was written last)
    from helpers import tiny_lm

    from hf_ot.recipes import evaluate

    tiny_lm(tmp_path)
    models, flags = {"a": str(tmp_path / "model")}, ["data.max_eval_blocks=1", "data.block_size=16"]

    def interrupted(*a, **k):
        raise RuntimeError("matplotlib failed")

    monkeypatch.setattr(evaluate, "plot_xy", interrupted)
    with pytest.raises(RuntimeError, match="matplotlib"):
        evaluate.robustness(models, "quickstart", [0.1], overrides=flags, out_dir=str(tmp_path / "rob"))
    assert (tmp_path / "rob" / "robustness.json").is_file()
    monkeypatch.undo()
    evaluate.robustness(models, "quickstart", [0.1], overrides=flags, out_dir=str(tmp_path / "rob"))
    assert (tmp_path / "rob" / "robustness.png").is_file()


def test_outputs_of_other_commands_in_a_run_folder_are_refused(tmp_path, capsys):
    # hf-ot robustness --models a=runs/r2/model --config quickstart --out runs/r2: written; then `hf-ot train quickstart
    # --output-dir runs/r2 --overwrite` refused "holds files a recipe did not write (.hf_ot_outputs.json,
    # robustness.json, robustness.png ...)"; `hf-ot evaluate ... --result-file runs/r2/results.json` replaced the run's
    # own results.json (the record of its model) with evaluate's
    from hf_ot.run_folders import lock_outputs

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "ot_gpt2"}')
    with pytest.raises(UsageError, match="is a run folder"):
        lock_outputs(tmp_path, "hf-ot robustness")
    assert main(["env", "--result-file", str(tmp_path / "results.json")]) == 2
    assert "is inside a run folder" in capsys.readouterr().err and not (tmp_path / "results.json").exists()


@pytest.mark.parametrize("task", ["classification", "translation lines", "saved dataset"])
def test_a_data_file_rewritten_with_the_same_size_and_mtime_is_read_anew(tmp_path, monkeypatch, task):
    # a file rewritten with the same size and modification time (cp -p, rsync -t, tar, a coarse clock) was read from
    # datasets' cache: its old rows, both by datasets' own CSV builder (keyed by mtime) and by the line reader
    import os

    from hf_ot import run_folders
    from hf_ot.recipes.data import load_classification, load_translation

    def write(path, text, like=None):
        path.write_text(text)
        if like is not None:  # (and a new process: hf_ot's digests of files in this one forgotten)
            os.utime(path, ns=(like.st_atime_ns, like.st_mtime_ns))
            run_folders._digest.cache_clear()
            assert path.stat().st_size == like.st_size
        return path.stat()

    if task == "classification":
        old = write(tmp_path / "r.csv", "text,label\n" + "good,pos\npoor,neg\n" * 5)
        load = lambda: load_classification({"train_file": str(tmp_path / "r.csv"), "val_fraction": 0.5})
        assert sorted(set(load()["train"]["text"])) == ["good", "poor"]
        write(tmp_path / "r.csv", "text,label\n" + "fine,pos\nugly,neg\n" * 5, old)
        assert sorted(set(load()["train"]["text"])) == ["fine", "ugly"]
    elif task == "saved dataset":  # (save_to_disk over a folder of the same size, its mtime kept: cp -rp)
        from datasets import Dataset

        arrow = tmp_path / "saved" / "data-00000-of-00001.arrow"
        Dataset.from_dict({"text": ["good", "poor"], "label": ["a", "b"]}).save_to_disk(str(tmp_path / "saved"))
        old, load = arrow.stat(), lambda: load_classification({"train_file": str(tmp_path / "saved")})
        assert sorted(t for d in load().values() for t in d["text"]) == ["good", "poor"]
        Dataset.from_dict({"text": ["fine", "ugly"], "label": ["a", "b"]}).save_to_disk(str(tmp_path / "saved"))
        os.utime(arrow, ns=(old.st_atime_ns, old.st_mtime_ns))
        assert arrow.stat().st_size == old.st_size
        assert sorted(t for d in load().values() for t in d["text"]) == ["fine", "ugly"]
    else:
        old, _ = write(tmp_path / "s.de", "eins\nzwei\n"), write(tmp_path / "s.en", "one\ntwo\n")
        spec = {"train_source": str(tmp_path / "s.de"), "train_target": str(tmp_path / "s.en"), "val_fraction": 0.5}
        assert sorted(s for d in load_translation(spec).values() for s in d["source"]) == ["eins", "zwei"]
        write(tmp_path / "s.de", "drei\nvier\n", old)
        assert sorted(s for d in load_translation(spec).values() for s in d["source"]) == ["drei", "vier"]


def test_ctrl_c_while_a_save_deletes_the_earlier_folder_leaves_nothing_beside_it(tmp_path, monkeypatch):
    # hf-ot calibrate MODEL --write, Ctrl-C just after the swap: exit 130, the calibrated model in place, and beside it
    # .MODEL.hf_ot-save.json and .MODEL.tmp-* (the earlier folder, half deleted) until the next command that writes
    import os
    import shutil
    import signal

    import hf_ot
    from hf_ot.hub import save_model
    from hf_ot.run_folders import read_manifest

    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2)
    first = read_manifest(save_model(model, tmp_path / "ot"))["save_id"]
    real_rmtree = shutil.rmtree

    def rmtree(path, *a, **k):  # Ctrl-C arrives while the earlier folder is deleted
        if ".tmp-" in str(path) and os.path.isdir(path):
            signal.raise_signal(signal.SIGINT)
        return real_rmtree(path, *a, **k)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # (a background process ignores SIGINT)
    try:
        with pytest.raises(KeyboardInterrupt):
            save_model(model, tmp_path / "ot", overwrite=True)
    finally:
        signal.signal(signal.SIGINT, handler)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["ot"]
    assert read_manifest(tmp_path / "ot")["save_id"] != first  # the new model: the swap had committed


@pytest.mark.parametrize("content", ["[1, 2]", "1.5", '"abc"', "0", '{"block_size": "abc"}', '{"block_size": 0}'])
def test_a_malformed_results_json_beside_the_model_is_named(run, tmp_path, capsys, content):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (copy / "results.json").write_text(content)
    capsys.readouterr()
    assert main(["evaluate", str(copy / "model"), "--config", "quickstart"]) == 2
    err = capsys.readouterr().err
    assert "results.json" in err and "data.block_size" in err and "Traceback" not in err


def test_a_full_disk_during_the_final_save_keeps_the_model_and_says_so(run, tmp_path, capsys, monkeypatch):
    import transformers.modeling_utils
    from safetensors import SafetensorError

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    before = (copy / "model" / "model.safetensors").read_bytes()

    def full(*args, **kwargs):
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, message: "No space left on device" })')

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full)
    capsys.readouterr()
    args = ["train", "quickstart", "--output-dir", str(copy), "--overwrite"]
    code = main([*args, *set_flags(tiny_run("training.save_strategy=no", "training.seed=3"))])
    err = capsys.readouterr().err
    assert code == 1 and "hf-ot train: error: saving the model to" in err and "No space left" in err
    assert (copy / "model" / "model.safetensors").read_bytes() == before  # the earlier model survives
    assert "is unchanged" in err


def test_a_cut_short_shard_is_named_by_from_pretrained(tmp_path):
    from transformers import AutoModelForCausalLM

    from hf_ot.checkpoints import CheckpointError

    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(tmp_path / "plain")
    hf_ot.convert(str(tmp_path / "plain"), ot_num_steps=2).save_pretrained(tmp_path / "ot", max_shard_size="20KB")
    shard = sorted((tmp_path / "ot").glob("model-*.safetensors"))[-1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    for load in (hf_ot.OTGPT2LMHeadModel.from_pretrained, AutoModelForCausalLM.from_pretrained):
        with pytest.raises(CheckpointError, match=shard.name):
            load(tmp_path / "ot")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_device_or_pipe_as_data_or_recipe_is_not_a_regular_file(tmp_path, capsys, kind):
    import os

    if kind == "fifo":
        special = tmp_path / "pipe.csv"
        os.mkfifo(special)
    else:
        special = "/dev/zero"
    out = str(tmp_path / "run")
    code = main(["train", "quickstart", "--output-dir", out, "--set", f"data.train_file={special}"])
    err = capsys.readouterr().err
    assert code == 2 and "not a regular file" in err and "not found" not in err, err
    code = main(["train", str(special), "--output-dir", out])
    err = capsys.readouterr().err
    assert code == 2 and "not a regular file" in err, err


def test_weights_of_another_model_in_the_folder_are_named(tmp_path):
    from transformers import AutoModelForCausalLM

    from hf_ot.checkpoints import CheckpointError

    for name, width in (("ot", 32), ("other", 48)):
        hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel", n_embd=width)).save_pretrained(tmp_path / name)
    shutil.copy(tmp_path / "other" / "model.safetensors", tmp_path / "ot" / "model.safetensors")
    for load in (hf_ot.OTGPT2LMHeadModel.from_pretrained, AutoModelForCausalLM.from_pretrained):
        with pytest.raises(CheckpointError, match="weights in .*ot do not fit.*two models"):
            load(tmp_path / "ot")


@pytest.mark.usefixtures("in_repo")
def test_overwrite_deletes_the_old_runs_checkpoints(tmp_path):
    out = tmp_path / "run"
    run_recipe(quick_cfg(out, "training.save_strategy=steps", "training.save_steps=2"))
    assert (out / "trainer" / "checkpoint-2").is_dir()
    run_recipe(quick_cfg(out, "training.seed=7"), overwrite=True)  # saves no checkpoint of its own
    assert not list((out / "trainer").glob("checkpoint-*"))
    # so a later --resume cannot continue the old run and save its weights as the new model
    before = snapshot(out)
    with pytest.raises(ValueError, match="no checkpoint"):
        run_recipe(quick_cfg(out), resume=True)
    assert snapshot(out) == before


@pytest.mark.usefixtures("in_repo")
def test_recipe_never_replaces_foreign_files(tmp_path):
    out = tmp_path / "thesis"
    out.mkdir()
    (out / "thesis.tex").write_text("\\chapter{Results}")
    with pytest.raises(ValueError, match="thesis.tex.*not even with --overwrite"):
        run_recipe(quick_cfg(out), overwrite=True)
    (out / "thesis.tex").unlink()
    (out / "model").mkdir()
    (out / "model" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="notes.txt.*not even with --overwrite"):
        run_recipe(quick_cfg(out), overwrite=True)
    assert (out / "model" / "notes.txt").read_text() == "mine"


@pytest.mark.usefixtures("in_repo")
def test_a_failed_final_save_leaves_the_earlier_run_whole(tmp_path, monkeypatch):
    """Disk full while saving the new model: the earlier model AND the results beside it stay as they were (results
    written before the model would describe a model that is not there)."""
    import errno

    import hf_ot.hub

    out = tmp_path / "run"
    run_recipe(quick_cfg(out))
    before = snapshot(out)
    real_save = hf_ot.hub.save_model

    def save_then_fail(model, folder, **kwargs):
        real_save(model, folder, **kwargs)  # a partial folder exists when the disk fills
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hf_ot.hub, "save_model", save_then_fail)
    with pytest.raises(OSError, match="No space left"):
        run_recipe(quick_cfg(out, "training.seed=7"), overwrite=True)
    assert snapshot(out) == before


@pytest.mark.usefixtures("in_repo")
def test_write_json_is_whole_per_writer_keeps_mode_and_links(tmp_path):
    """Atomic results files: concurrent writers (threads of one process) never collide on the temporary file, the
    file keeps the mode it had, and a results file that is a symlink is written through (the link stays)."""
    import os
    import threading

    from hf_ot.run_folders import write_json

    path = tmp_path / "results.json"
    path.write_text("{}")
    os.chmod(path, 0o640)
    errors = []

    def writer(i):
        for k in range(50):
            try:
                write_json(path, {"writer": i, "k": k})
            except Exception as err:  # noqa: BLE001 (any failure is the defect)
                errors.append(err)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert json.loads(path.read_text())["k"] == 49
    assert (path.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no temporary file left
    link = tmp_path / "latest.json"
    link.symlink_to(path)
    write_json(link, {"via": "link"})
    assert link.is_symlink() and json.loads(path.read_text()) == {"via": "link"}


def test_a_cut_short_shard_among_several_is_named(tmp_path, capsys):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"))
    folder = tmp_path / "sharded"
    model.save_pretrained(folder, max_shard_size="20KB")
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) > 3
    victim = shards[2]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    with pytest.raises(ValueError, match=rf"Weights file {victim} .*cut short"):
        hf_ot.convert(str(folder))
    assert main(["evaluate", str(folder), "--config", str(REPO / "recipes/configs/quickstart.yaml")]) == 2
    assert victim.name in capsys.readouterr().err
    # a shard the index names but the folder lacks
    victim.unlink()
    with pytest.raises(ValueError, match=rf"names the shard '{victim.name}', which is not in"):
        hf_ot.convert(str(folder))


def test_hf_ot_check_names_a_cut_short_shard(tmp_path, capsys):
    folder = tmp_path / "base"
    make_base("bert", "BertModel").save_pretrained(folder, max_shard_size="20KB")
    shards = sorted(folder.glob("model-*.safetensors"))
    shards[-1].write_bytes(shards[-1].read_bytes()[:100])
    assert main(["check", str(folder)]) == 2
    err = capsys.readouterr().err
    assert shards[-1].name in err and "Traceback" not in err


DEEP = "[" * 100_000 + "]" * 100_000


def word_tokenizer(words):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[UNK]", "[PAD]", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


def test_read_json_refuses_a_large_file_before_reading_it(tmp_path):
    big = tmp_path / "results.json"
    with open(big, "wb") as f:
        f.truncate(600 << 20)  # sparse: 600 MB of zeros on no disk
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=r"results.json is 629,145,600 bytes"):
            read_json(big)
        assert tracemalloc.get_traced_memory()[1] < 10 << 20  # nothing of it was read
    finally:
        tracemalloc.stop()


def test_read_json_refuses_a_device(tmp_path):
    with pytest.raises(CheckpointError, match=r"/dev/zero is not a regular file"):
        read_json("/dev/zero")


def test_result_file_naming_a_large_file_is_refused_without_reading_it(tmp_path, capsys):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(600 << 20)
    tracemalloc.start()
    try:
        assert main(["env", "--result-file", str(big)]) == 2
        assert tracemalloc.get_traced_memory()[1] < 50 << 20
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert "big.json" in err and "bytes" in err and "Traceback" not in err
    assert big.stat().st_size == 600 << 20  # untouched


@pytest.mark.parametrize("name", ["generation_config.json", "hf_ot_manifest.json", "config.json"])
def test_deeply_nested_json_in_a_model_folder_is_named_with_the_fix(tmp_path, capsys, name):
    folder = save_model(hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2), tmp_path / "ot")
    (folder / name).write_text(DEEP if name != "config.json" else '{"a": ' + DEEP + "}")
    assert main(["check", str(folder)]) == 2
    err = capsys.readouterr().err
    assert name in err and "deep" in err and "Traceback" not in err and "RecursionError" not in err
    with pytest.raises(CheckpointError, match=rf"{name} nests values more than \d+ deep"):
        read_json(folder / name)


def test_evaluate_reads_one_save_while_another_save_replaces_the_folder(tmp_path, monkeypatch):
    """A save replacing the folder between the tokenizer's read and the weights' (another process's `convert
    --overwrite`, here a hook): the evaluation gets the earlier save whole or the new one whole, never a mix."""
    import hf_ot.tokenizers
    from hf_ot.recipes.evaluate import load_for_eval

    folder = tmp_path / "ot"
    old = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel", seed=0), ot_num_steps=2)
    new = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel", seed=1), ot_num_steps=3)
    save_model(old, folder, tokenizer=word_tokenizer(["old", "words"]))
    real, replaced = hf_ot.tokenizers.load_tokenizer, []

    def load_tokenizer(*args, **kwargs):
        tokenizer = real(*args, **kwargs)
        if not replaced:  # the tokenizer of the earlier save read; now the folder is replaced
            replaced.append(save_model(new, folder, tokenizer=word_tokenizer(["new", "text"]), overwrite=True))
        return tokenizer

    monkeypatch.setattr(hf_ot.tokenizers, "load_tokenizer", load_tokenizer)
    model, tokenizer = load_for_eval(str(folder), task="causal-lm")
    assert replaced
    weights = model.transformer.wte.weight
    is_new = torch.equal(weights, new.transformer.wte.weight)
    assert is_new or torch.equal(weights, old.transformer.wte.weight)
    assert ("new" in tokenizer.get_vocab()) == is_new, "the tokenizer of one save with the weights of another"
    assert model.config.ot_num_steps == (3 if is_new else 2)


def test_a_save_killed_between_two_renames_is_named_with_the_mv_that_restores_it(tmp_path, monkeypatch, capsys):
    """Without an atomic exchange the swap is two renames: a kill between them leaves no folder at the name. hf_ot
    does not repair it behind the user's back: every command finding it missing prints the one mv that restores it,
    and deletes nothing."""
    import hf_ot.run_folders as run_folders

    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(tmp_path / "base")
    folder = save_model(hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2), tmp_path / "ot")
    earlier = json.loads((folder / "hf_ot_manifest.json").read_text())["save_id"]
    monkeypatch.setattr(run_folders, "exchange", lambda a, b: False)
    real_rename = run_folders.Path.rename

    def rename(self, target):
        out = real_rename(self, target)
        if ".old-" in str(target):
            raise KeyboardInterrupt  # the process dies here (its finally blocks aside)
        return out

    monkeypatch.setattr(run_folders.Path, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        save_model(hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=3), folder, overwrite=True)
    monkeypatch.undo()
    assert not folder.exists()
    (aside,) = [p for p in tmp_path.iterdir() if ".old-" in p.name]
    restore = f"mv {aside} {folder}"
    assert main(["check", str(folder)]) == 2  # a command that reads it
    assert restore in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "base"), str(folder), "--overwrite"]) == 2  # a command that writes there
    assert restore in capsys.readouterr().err
    assert aside.is_dir() and json.loads((aside / "hf_ot_manifest.json").read_text())["save_id"] == earlier
