"""Clear errors, each naming the problem and the fix, where there were tracebacks or silent wrong values."""

import json
import shutil
import warnings

import pytest
import torch
from conftest import make_base, set_flags, tiny_run

import hf_ot
from hf_ot.cli import main


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny quickstart run: 16-token blocks on a model of 16 positions (the recipe's block size is longer)."""
    out = tmp_path_factory.mktemp("errors") / "run"
    assert (
        main(["train", "quickstart", "--output-dir", str(out), *set_flags(tiny_run("training.save_strategy=no"))]) == 0
    )
    assert json.loads((out / "results.json").read_text())["block_size"] == 16
    return out


def test_calibrate_uses_the_block_size_the_run_trained_with(run, capsys):
    code = main(["calibrate", str(run / "model"), "--config", "quickstart", "--max-batches", "1", "--json"])
    assert code == 0, capsys.readouterr().err[-2000:]
    assert json.loads(capsys.readouterr().out)["rows"]


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


def test_zero_gradient_accumulation_steps_is_refused_before_the_data(tmp_path, capsys, monkeypatch):
    from hf_ot.recipes import data

    for name in ("_embedded_rows", "load_splits"):  # the data is not read before the check
        monkeypatch.setattr(data, name, lambda *a, **k: pytest.fail("data prepared"))
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "quickstart",
            "--output-dir",
            str(out),
            *set_flags(tiny_run("training.gradient_accumulation_steps=0")),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "gradient_accumulation_steps" in err and ">= 1" in err


def test_a_scratch_model_without_layers_names_n_layer(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "quickstart", "--output-dir", str(out), *set_flags(tiny_run("model.scratch.n_layer=0"))])
    err = capsys.readouterr().err
    assert code != 0 and "n_layer" in err and "please report" not in err and "Traceback" not in err


def test_a_draft_of_an_encoder_only_model_is_refused_clearly(converted):
    _, model = converted("bert", "BertModel")
    with pytest.raises(ValueError, match="does not generate"):
        model.ot_draft_model()


def test_num_draft_tokens_must_be_whole(converted):
    _, model = converted("gpt2", "GPT2LMHeadModel")
    for bad in (2.7, True, 0):
        with pytest.raises(ValueError, match="num_draft_tokens"):
            model.ot_draft_model(num_draft_tokens=bad)
    with pytest.raises(ValueError, match="num_draft_tokens"):
        model.generate(torch.tensor([[5, 6]]), max_new_tokens=2, num_draft_tokens=2.7)
    for bad in ("abc", "0.5", True, float("nan")):  # a probability, not text parsed (or not) by float()
        with pytest.raises(ValueError, match="draft confidence threshold .*give a probability"):
            model.ot_draft_model(confidence_threshold=bad)


def test_an_unknown_ot_field_in_a_saved_config_is_named(converted, tmp_path):
    _, model = converted("gpt2", "GPT2LMHeadModel")
    model.save_pretrained(tmp_path / "ot")
    values = json.loads((tmp_path / "ot" / "config.json").read_text())
    (tmp_path / "ot" / "config.json").write_text(json.dumps({**values, "ot_future_knob": 2}))
    with pytest.warns(UserWarning, match="ot_future_knob"):
        hf_ot.OTGPT2LMHeadModel.from_pretrained(tmp_path / "ot")


def test_a_cut_short_shard_is_named_by_from_pretrained(tmp_path):
    from transformers import AutoModelForCausalLM

    from hf_ot.checkpoints import CheckpointError

    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(tmp_path / "plain")
    hf_ot.convert(str(tmp_path / "plain"), num_steps=2).save_pretrained(tmp_path / "ot", max_shard_size="20KB")
    shard = sorted((tmp_path / "ot").glob("model-*.safetensors"))[-1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    for load in (hf_ot.OTGPT2LMHeadModel.from_pretrained, AutoModelForCausalLM.from_pretrained):
        with pytest.raises(CheckpointError, match=shard.name):
            load(tmp_path / "ot")


def test_a_config_with_known_fields_loads_without_a_warning(converted, tmp_path):
    _, model = converted("gpt2", "GPT2LMHeadModel")
    model.save_pretrained(tmp_path / "ot")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*unknown OT field")
        hf_ot.OTGPT2LMHeadModel.from_pretrained(tmp_path / "ot")


def test_zero_gradient_accumulation_steps_of_a_baseline_is_refused_before_the_data(tmp_path, capsys, monkeypatch):
    from hf_ot.recipes import data

    monkeypatch.setattr(data, "_embedded_rows", lambda *a, **k: pytest.fail("data prepared"))
    flags = tiny_run("training.gradient_accumulation_steps=0", "model.ot=null")
    code = main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *set_flags(flags)])
    err = capsys.readouterr().err
    assert code == 2 and "gradient_accumulation_steps" in err and ">= 1" in err


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


def test_check_of_a_paper_mode_model_says_what_check_compares(run, capsys):
    assert main(["check", str(run / "model"), "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "paper mode" in err and "Give the base checkpoint" in err and "ot_block_layer_norms" not in err


@pytest.mark.parametrize(
    "setting,named",
    [
        ("training.per_device_train_batch_size=0", "per_device_train_batch_size must be an integer >= 1"),
        ("training.per_device_eval_batch_size=0", "per_device_eval_batch_size must be an integer >= 1"),
        ("training.learning_rate=-1", "learning_rate must be a finite number >= 0"),
        ("training.num_train_epochs=0", "training would run no step"),
        ("training.max_steps=0", "training would run no step"),
        ("training.eval_accumulation_steps=0", "eval_accumulation_steps must be an integer >= 1"),
        ("training.dataloader_num_workers=-1", "dataloader_num_workers must be an integer >= 0"),
        ("training.seed=-1", "seed must be an integer >= 0"),
    ],
)
@pytest.mark.parametrize("model", ["ot", "baseline"])
def test_training_settings_that_fail_late_are_refused_before_the_data(
    tmp_path, capsys, monkeypatch, setting, named, model
):
    from hf_ot.recipes import data

    monkeypatch.setattr(data, "_embedded_rows", lambda *a, **k: pytest.fail("data prepared"))
    extra = ["training.max_steps=-2"] if "epochs" in setting else []
    flags = tiny_run(setting, *extra, *(["model.ot=null"] if model == "baseline" else []))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *set_flags(flags)]) == 2
    assert named in capsys.readouterr().err


def test_a_scratch_model_the_family_cannot_build_is_refused_before_the_data(tmp_path, capsys, monkeypatch):
    from hf_ot.recipes import data

    monkeypatch.setattr(data, "_embedded_rows", lambda *a, **k: pytest.fail("data prepared"))
    flags = tiny_run("model.scratch.n_embd=30", "model.scratch.n_head=4")  # 30 is no multiple of 4
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *set_flags(flags)]) == 2
    err = capsys.readouterr().err
    assert "model.scratch does not make a gpt2 model" in err and "num_heads" in err and "30" in err
    assert not (tmp_path / "run").exists()
