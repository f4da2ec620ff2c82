"""--resume: what may change between the runs, what is refused, and which checkpoint is taken."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO, make_base, set_flags, snapshot, tiny_run
from helpers import (
    Logs,
    args,
    assert_names,
    cli_train,
    hf_ot_train,
    lm_dataset,
    model_state,
    ot_gpt2,
    quick_cfg,
    raises_naming,
)
from transformers import TrainerCallback

import hf_ot
from hf_ot.cli import main
from hf_ot.recipes import load_config, run_recipe
from hf_ot.training import OTTrainer

CORPUS = "".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(120))


# ---- the recipe's DEFAULT checkpointing (no save_strategy in the config): the run is recorded and checked too
DEFAULT_SAVES = tiny_run("training.logging_steps=1", max_steps=None)


# each test gives its own training.max_steps
TINY_resume_checks = tiny_run(
    "training.logging_steps=1", "training.save_strategy=steps", "training.save_steps=2", max_steps=None
)


def cfg(out, data_file, *extra):
    from hf_ot.recipes import load_config

    return load_config(
        "quickstart",
        [*TINY_resume_checks, f"output_dir={out}", "data.source=file", f"data.train_file={data_file}", *extra],
    )


def default_cfg(out, data_file, *extra):
    from hf_ot.recipes import load_config

    return load_config(
        "quickstart", [*DEFAULT_SAVES, f"output_dir={out}", "data.source=file", f"data.train_file={data_file}", *extra]
    )


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A 4-step char-level run on a local file with checkpoints at steps 2 and 4."""
    from hf_ot.recipes import run_recipe

    root = tmp_path_factory.mktemp("resume")
    data = text_file(root / "corpus.txt", CORPUS)
    out = root / "run"
    import os

    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        run_recipe(cfg(out, data, "training.max_steps=4"))
    finally:
        os.chdir(cwd)
    return out, data


@pytest.fixture
def run(finished_run, tmp_path):
    out, data = finished_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    data_copy = text_file(tmp_path / "corpus.txt", data.read_text())
    record_path = copy / "trainer" / "hf_ot_run.json"
    if not record_path.exists():  # (hf_ot before run records: the tests show what it did)
        return copy, data_copy
    record = json.loads(record_path.read_text())
    record["output_dir"] = str(copy)
    record["settings"]["output_dir"] = str(copy)
    record["settings"]["data"]["train_file"] = str(data_copy)
    record["data"]["data.train_file"]["path"] = str(data_copy)
    record_path.write_text(json.dumps(record))
    return copy, data_copy


def text_file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


class StopAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def test_a_resume_past_max_steps_says_so(tmp_path, capsys, caplog):
    # interrupted at checkpoint-1800 of max_steps=3000, a resume given max_steps=3 (a copy of the run's first flags)
    # exited 0 with "result written": no step trained, train_loss 0.0 logged, the model saved as if finished
    out = str(tmp_path / "run")
    assert main(["train", "quickstart", "--output-dir", out, *set_flags(tiny_run(max_steps=4))]) == 0
    capsys.readouterr()
    main(["train", "quickstart", "--output-dir", out, "--resume", *set_flags(tiny_run(max_steps=2))])
    assert "training.max_steps" in capsys.readouterr().err + caplog.text  # refused, or at least a warning


def test_a_resume_accepts_a_setting_given_at_the_value_the_run_used(tmp_path, capsys):
    # `hf-ot train quickstart ... --resume --set training.seed=1337` (the default `hf-ot train quickstart --help`
    # shows, the seed the run trained with): "was trained with other settings or data than this run's:
    # training.seed: '<unset>' then, 1337 now" (exit 2); nothing had changed
    from hf_ot.recipes.config import TRAINING_DEFAULTS

    assert TRAINING_DEFAULTS["seed"] == 1337 and "seed" not in load_config("quickstart").training  # the run's seed
    out = str(tmp_path / "run")
    assert main(["train", "quickstart", "--output-dir", out, *set_flags(tiny_run(max_steps=2))]) == 0
    flags = set_flags(tiny_run("training.seed=1337", max_steps=3))
    assert main(["train", "quickstart", "--output-dir", out, "--resume", *flags]) == 0, (
        capsys.readouterr().err.splitlines()[-1:]
    )


@pytest.mark.usefixtures("in_repo")
def test_edited_data_is_an_error_naming_the_file_not_a_new_tokenizer(run):
    from hf_ot.recipes import run_recipe

    out, data = run
    data.write_text(CORPUS.replace("fox", "cat") + "ÄÖÜ new characters\n")  # a char-level vocabulary would change
    before = snapshot(out)
    with raises_naming(ValueError, "data.train_file", str(data), "changed"):
        run_recipe(cfg(out, data, "training.max_steps=6"), resume=True)
    assert snapshot(out) == before


@pytest.mark.usefixtures("in_repo")
def test_a_changed_file_of_a_data_folder_is_named(tmp_path):
    """Data given as a folder or glob is recorded file by file (a list): a resume names the file that changed."""
    import hashlib

    from hf_ot.checkpoints import CheckpointError
    from hf_ot.recipes.resume import check_resume_settings, write_run_record

    (tmp_path / "data").mkdir()
    parts = [text_file(tmp_path / "data" / f"part{i}.txt", f"line {i}\n") for i in range(2)]

    def fingerprint():
        files = [{"path": str(p), "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in parts]
        return {"data.train_file": files}

    settings = {"data": {"train_file": str(tmp_path / "data")}}
    write_run_record(tmp_path / "trainer", tmp_path / "run", settings, fingerprint(), None)
    checkpoint = tmp_path / "trainer" / "checkpoint-2"
    assert check_resume_settings(checkpoint, settings, fingerprint())["data"] == fingerprint()
    parts[1].write_text("line 1, edited\n")
    with raises_naming(CheckpointError, "data.train_file", "part1.txt", "changed"):
        check_resume_settings(checkpoint, settings, fingerprint())


def test_a_run_recorded_under_the_earlier_ot_names_resumes_and_a_changed_value_is_named(tmp_path):
    """A run record written before the OT settings took their one names (model.ot.num_steps, model.ot.lambda,
    training.ot_lambda) compares with today's names: the same values resume, a changed one is named."""
    from hf_ot.checkpoints import CheckpointError
    from hf_ot.recipes.resume import check_resume_settings, write_run_record

    then = {"model": {"ot": {"num_steps": 2, "solver": "heun"}}, "training": {"ot_lambda": 0.5, "seed": 1}}
    write_run_record(tmp_path / "trainer", tmp_path / "run", then, {}, None)
    checkpoint = tmp_path / "trainer" / "checkpoint-2"
    now = {"model": {"ot": {"ot_num_steps": 2, "ot_solver": "heun", "ot_lambda": 0.5}}, "training": {"seed": 1}}
    assert check_resume_settings(checkpoint, now, {}) is not None
    now["model"]["ot"]["ot_num_steps"] = 3
    with pytest.raises(CheckpointError, match=r"model\.ot\.ot_num_steps: 2 then, 3 now"):
        check_resume_settings(checkpoint, now, {})


@pytest.mark.usefixtures("in_repo")
def test_resume_uses_the_tokenizer_saved_with_the_checkpoint(run, monkeypatch):
    import hf_ot.recipes.splits as dataset
    from hf_ot.recipes import run_recipe

    out, data = run

    def rebuilt(*args):
        raise AssertionError("a resumed run must not build a new tokenizer")

    monkeypatch.setattr(dataset, "build_char_tokenizer", rebuilt)
    run_recipe(cfg(out, data, "training.max_steps=6"), resume=True)
    history = json.loads((out / "log_history.json").read_text())
    assert [h["step"] for h in history if "task_loss" in h] == [1, 2, 3, 4, 5, 6]


@pytest.mark.usefixtures("in_repo")
def test_changed_settings_are_named(run):
    from hf_ot.recipes import run_recipe

    out, data = run
    with raises_naming(ValueError, "model.scratch.n_embd: 16", "32"):
        run_recipe(cfg(out, data, "training.max_steps=6", "model.scratch.n_embd=32"), resume=True)
    with pytest.raises(ValueError, match=r"training.learning_rate"):
        run_recipe(cfg(out, data, "training.max_steps=6", "training.learning_rate=0.5"), resume=True)


@pytest.mark.usefixtures("in_repo")
def test_a_checkpoint_cut_short_is_passed_over_by_default_and_refused_by_name(run, capsys):
    from hf_ot.recipes import run_recipe

    out, data = run
    cut = out / "trainer" / "checkpoint-4"
    (cut / "trainer_state.json").unlink()  # the kill came before Trainer's last file
    with pytest.raises(
        ValueError, match=rf"Checkpoint {cut} is incomplete.*--resume {out / 'trainer' / 'checkpoint-2'}"
    ):
        run_recipe(cfg(out, data, "training.max_steps=6"), resume=str(cut))
    # the default: the newest complete checkpoint (2), the partial one moved aside and named
    run_recipe(cfg(out, data, "training.max_steps=6"), resume=True)
    history = json.loads((out / "log_history.json").read_text())
    assert [h["step"] for h in history if "task_loss" in h] == [1, 2, 3, 4, 5, 6]
    assert (out / "trainer" / "checkpoint-6" / "trainer_state.json").is_file()


@pytest.mark.usefixtures("in_repo")
@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda c: (c / "model.safetensors").write_bytes((c / "model.safetensors").read_bytes()[:-100]),
            r"model.safetensors .*cut short",
        ),
        (
            lambda c: (c / "config.json").write_text('{"model_type": "ot_gpt2", "n_embd": '),
            r"config.json is not valid JSON",
        ),
        (
            lambda c: (c / "optimizer.pt").write_bytes((c / "optimizer.pt").read_bytes()[:200]),
            r"optimizer.pt is not a complete torch file",
        ),
    ],
    ids=["truncated-weights", "corrupt-config", "truncated-optimizer"],
)
def test_a_damaged_checkpoint_is_named_with_the_fix(run, capsys, damage, message):
    out, data = run
    checkpoint = out / "trainer" / "checkpoint-4"
    damage(checkpoint)
    before = snapshot(out)
    args = [
        "train",
        "quickstart",
        "--output-dir",
        str(out),
        *set_flags(TINY_resume_checks),
        "--set",
        "data.source=file",
        "--set",
        f"data.train_file={data}",
        "--set",
        "training.max_steps=6",
    ]
    assert main([*args, "--resume"]) == 2
    err = capsys.readouterr().err
    assert str(checkpoint) in err and "Traceback" not in err
    import re

    assert re.search(message, err), err
    assert f"--resume {out / 'trainer' / 'checkpoint-2'}" in err  # the fix: the earlier checkpoint
    assert snapshot(out) == before
    # which the user can take by path
    assert main([*args, "--resume", str(out / "trainer" / "checkpoint-2")]) == 0


@pytest.mark.usefixtures("in_repo")
def test_ottrainer_resume_true_takes_the_newest_complete_checkpoint(tmp_path):
    import torch
    from datasets import Dataset

    from hf_ot.training import OTTrainer, OTTrainingArguments

    ids = torch.randint(4, 99, (8, 10), generator=torch.Generator().manual_seed(0)).tolist()
    ds = Dataset.from_dict({"input_ids": ids, "labels": ids})

    def trainer(steps):
        args = OTTrainingArguments(
            output_dir=str(tmp_path),
            report_to="none",
            use_cpu=True,
            seed=0,
            max_steps=steps,
            per_device_train_batch_size=2,
            save_strategy="steps",
            save_steps=2,
            disable_tqdm=True,
        )
        return OTTrainer(model=hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel")), args=args, train_dataset=ds)

    trainer(4).train()
    (tmp_path / "checkpoint-4" / "trainer_state.json").unlink()  # cut short
    resumed = trainer(6)
    resumed.train(resume_from_checkpoint=True)  # transformers alone would take the partial checkpoint-4
    assert resumed.state.global_step == 6
    assert [h["step"] for h in resumed.state.log_history if "loss" in h][:1] != [1]
    with raises_naming(ValueError, "checkpoint-6", "config.json", "not valid JSON"):
        (tmp_path / "checkpoint-6" / "config.json").write_text("{")
        trainer(8).train(resume_from_checkpoint=str(tmp_path / "checkpoint-6"))


@pytest.mark.usefixtures("in_repo")
def test_default_checkpointing_writes_the_run_record_and_resume_checks_it(tmp_path):
    from hf_ot.recipes import run_recipe

    data = text_file(tmp_path / "corpus.txt", CORPUS)
    out = tmp_path / "run"
    run_recipe(default_cfg(out, data, "training.max_steps=10"))
    assert (out / "trainer" / "hf_ot_run.json").is_file()  # the default saves every max_steps/5 steps
    assert (out / "trainer" / "checkpoint-10").is_dir()
    with pytest.raises(ValueError, match=r"training.learning_rate"):
        run_recipe(default_cfg(out, data, "training.max_steps=12", "training.learning_rate=0.5"), resume=True)
    data.write_text(CORPUS.replace("fox", "cat") + "ÄÖÜ new characters\n")
    before = snapshot(out)
    with raises_naming(ValueError, "data.train_file", str(data), "changed"):
        run_recipe(default_cfg(out, data, "training.max_steps=12"), resume=True)
    assert snapshot(out) == before


@pytest.mark.usefixtures("in_repo")
def test_default_checkpointing_overwrite_with_the_runs_own_training_output_dir(tmp_path):
    from hf_ot.recipes import run_recipe

    data = text_file(tmp_path / "corpus.txt", CORPUS)
    out, trainer = tmp_path / "run", tmp_path / "ckpts"
    own = f"training.output_dir={trainer}"
    run_recipe(default_cfg(out, data, "training.max_steps=5", own))
    assert (trainer / "hf_ot_run.json").is_file()
    run_recipe(default_cfg(out, data, "training.max_steps=5", own), overwrite=True)  # its own checkpoints: fine
    assert (out / "model" / "config.json").is_file()


@pytest.mark.usefixtures("in_repo")
def test_resume_on_another_number_of_processes_is_refused_unless_the_global_batch_is_kept(run):
    """A run started on 2 processes and resumed on 1 would halve its global batch midway: refused, naming both
    process counts and the fix; with gradient accumulation keeping the global batch it resumes."""
    from hf_ot.recipes import run_recipe

    out, data = run
    path = out / "trainer" / "hf_ot_run.json"
    record = json.loads(path.read_text())
    assert record["world_size"] == 1  # recorded when the run started
    record.update(world_size=2, global_batch=2 * record["global_batch"])  # as if started on 2 processes
    path.write_text(json.dumps(record))
    before = snapshot(out)
    with raises_naming(ValueError, "2 process", "1 process", "gradient_accumulation_steps=2") as err:
        run_recipe(cfg(out, data, "training.max_steps=6"), resume=True)
    assert str(record["global_batch"]) in str(err.value)
    assert snapshot(out) == before
    run_recipe(cfg(out, data, "training.max_steps=6", "training.gradient_accumulation_steps=2"), resume=True)
    assert (out / "trainer" / "checkpoint-6").is_dir()


@pytest.mark.usefixtures("in_repo")
def test_resume_without_checkpoint_refuses_and_keeps_the_finished_run(tmp_path, capsys):
    out = tmp_path / "run"
    run_recipe(quick_cfg(out))  # QUIET_LM saves no checkpoint
    before = snapshot(out)
    with raises_naming(ValueError, "no checkpoint", "nothing was changed", "--overwrite"):
        run_recipe(quick_cfg(out), resume=True)
    assert snapshot(out) == before
    assert cli_train(out, "--resume") != 0
    assert "no checkpoint" in capsys.readouterr().err
    assert snapshot(out) == before


@pytest.mark.usefixtures("in_repo")
def test_resume_continues_from_the_real_checkpoint(tmp_path):
    out = tmp_path / "run"
    run_recipe(quick_cfg(out, "training.save_strategy=steps", "training.save_steps=2", "training.max_steps=2"))
    first = [h for h in json.loads((out / "log_history.json").read_text()) if "task_loss" in h]
    # as an interrupted 4-step run: the checkpoint at step 2 is its last
    run_recipe(
        quick_cfg(out, "training.save_strategy=steps", "training.save_steps=2", "training.max_steps=4"), resume=True
    )
    history = [h for h in json.loads((out / "log_history.json").read_text()) if "task_loss" in h]
    assert [h["step"] for h in history] == [1, 2, 3, 4]
    assert history[:2] == first  # steps 1-2 come from the checkpoint's state: trained once, not again


@pytest.mark.usefixtures("in_repo")
def test_overwrite_and_resume_together_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not both"):
        run_recipe(quick_cfg(tmp_path / "run"), overwrite=True, resume=True)


@pytest.mark.usefixtures("in_repo")
def test_ctrl_c_says_where_the_last_checkpoint_is_and_resume_continues(tmp_path, monkeypatch, capsys):
    from hf_ot.training import OTTrainer

    real_step = OTTrainer.training_step

    def interrupted_at_3(self, *args, **kwargs):
        if self.state.global_step == 2:
            raise KeyboardInterrupt
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(OTTrainer, "training_step", interrupted_at_3)
    out = tmp_path / "run"
    keep = ["--set", "training.save_strategy=steps", "--set", "training.save_steps=2", "--set", "training.max_steps=4"]
    assert cli_train(out, *keep) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and str(out / "trainer" / "checkpoint-2") in err and "--resume" in err
    assert "Traceback" not in err
    monkeypatch.setattr(OTTrainer, "training_step", real_step)
    assert cli_train(out, *keep, "--resume") == 0
    history = json.loads((out / "log_history.json").read_text())
    assert [h["step"] for h in history if "task_loss" in h] == [1, 2, 3, 4]


def test_resume_continues_the_same_loss_curve(tmp_path):
    def losses(out, **kw):
        logs = Logs()
        trainer = OTTrainer(
            model=ot_gpt2(),
            args=args(
                out,
                per_device_train_batch_size=4,
                max_steps=6,
                save_strategy="steps",
                save_steps=3,
                optim="adamw_torch",
                learning_rate=1e-2,
            ),
            train_dataset=lm_dataset(16),
            callbacks=[logs, *kw.get("callbacks", [])],
        )
        trainer.train(resume_from_checkpoint=kw.get("resume"))
        return [(log["epoch"], log["loss"], log["reg"]) for log in logs.logs if "task_loss" in log]

    straight = losses(tmp_path / "straight")
    first = losses(tmp_path / "split", callbacks=[StopAt(3)])
    second = losses(tmp_path / "split", resume=str(tmp_path / "split" / "checkpoint-3"))
    assert len(straight) == 6 and len(first) == 3 and len(second) == 3
    for (e1, l1, r1), (e2, l2, r2) in zip(straight, first + second):
        assert e1 == pytest.approx(e2) and l1 == pytest.approx(l2, rel=1e-5) and r1 == pytest.approx(r2, rel=1e-5)


@pytest.mark.slow
def test_sigterm_in_training_names_the_checkpoint_and_resume_continues(tmp_path):
    out = tmp_path / "run"
    keep = ["--set", "training.save_strategy=steps", "--set", "training.save_steps=2", "--set", "training.max_steps=4"]
    stopped = hf_ot_train(out, *keep, fault="training-step-3:TERM")
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert str(out / "trainer" / "checkpoint-2") in stopped.stderr and "--resume" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert not (out / "model").exists()
    resumed = hf_ot_train(out, *keep, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    history = json.loads((out / "log_history.json").read_text())
    assert [h["step"] for h in history if "task_loss" in h] == [1, 2, 3, 4]
    model_state(out)


def test_the_suggested_resume_command_is_shell_quoted():
    import argparse

    from hf_ot.cli.train import interrupted_message

    args = argparse.Namespace(config="my recipe.yaml", set=["card.license=a b"], output_dir="out dir")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "checkpoint-2").mkdir()
        (Path(tmp) / "checkpoint-2" / "trainer_state.json").write_text("{}")
        message = interrupted_message(args, Path(tmp) / "out", Path(tmp))
    assert "hf-ot train 'my recipe.yaml' --set 'card.license=a b' --output-dir 'out dir' --resume" in message
    # a token is left out (printed it shows as <redacted>: pasted, the run would resume with that as its token)
    args.set.append("training.hub_token=hf_secretSecret123")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "checkpoint-2").mkdir()
        (Path(tmp) / "checkpoint-2" / "trainer_state.json").write_text("{}")
        message = interrupted_message(args, Path(tmp) / "out", Path(tmp))
    assert "--set 'card.license=a b' --output-dir 'out dir' --resume\n" in message and "hf_secret" not in message
    assert_names(message, "training.hub_token", "not shown")
