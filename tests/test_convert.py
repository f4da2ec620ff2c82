"""hf_ot.convert and `hf-ot convert`: bases, tasks, settings and the errors that name the fix."""

import json
import logging

import pytest
import torch
from conftest import REPO, make_base, snapshot
from helpers import raises_naming

import hf_ot
from hf_ot.cli import main
from hf_ot.errors import UsageError
from hf_ot.hub import plan_push
from hf_ot.recipes import build_char_tokenizer
from hf_ot.recipes.config import load_config

_LAMBDA = "ot_lambda must be a finite number from 0 to 1e+06 (the weight of reg in the loss)"


# the config's own messages (OT_SETTINGS), as the CLI gives them
_T = "ot_terminal_time must be a finite number > 0 and <= 1000 (the terminal time T)"


@pytest.fixture
def base_folder(tmp_path):
    path = tmp_path / "base"
    make_base("bert", "BertModel").save_pretrained(path)
    build_char_tokenizer("abcdefghij klmnop").save_pretrained(path)
    return path


def test_convert_reports_the_settings_it_saved(tmp_path, capsys):
    # hf-ot convert llama llama_ot --num-steps 2 --json: "ot_settings": {"already_ot": false}, the settings the folder
    # was saved with (M, T, lambda, solver, mode) nowhere in the result; they are its config's
    import json

    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(tmp_path / "base")
    assert main(["convert", str(tmp_path / "base"), str(tmp_path / "ot"), "--ot-num-steps", "2", "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["ot_settings"]
    saved = json.loads((tmp_path / "ot" / "config.json").read_text())
    assert settings["already_ot"] is False
    for key in ("ot_num_steps", "ot_terminal_time", "ot_lambda", "ot_solver", "ot_mode"):
        assert settings[key] == saved[key], key
    assert settings["ot_num_steps"] == 2


# hf_ot.convert(get_peft_model(base, LoraConfig(...))) raised "TypeError: stat: path should be string, bytes,
# os.PathLike or integer, not PeftModel" (and the same for torch.compile(base)). It should say what convert takes and
# the fix: convert the base model first (or merge the adapter), then add adapters or compile.
@pytest.mark.parametrize("wrapper", ["peft", "compile"])
def test_convert_of_a_wrapped_model_names_the_fix(wrapper):
    from peft import LoraConfig, get_peft_model

    base = make_base("gpt2", "GPT2LMHeadModel")
    if wrapper == "peft":
        wrapped, hint = get_peft_model(base, LoraConfig(r=2, target_modules=["c_attn"], fan_in_fan_out=True)), "merge"
    else:
        wrapped, hint = torch.compile(base, backend="eager"), "compile"
    with pytest.raises((TypeError, ValueError), match=rf"hf_ot.convert.*{type(wrapped).__name__}.*{hint}"):
        hf_ot.convert(wrapped)


# hf_ot.save_model(model, DIR, max_shard_size="20KB") failed with "render_model_card() got an unexpected keyword
# argument 'max_shard_size'" after the weights were written. save_pretrained's options should reach save_pretrained,
# and a keyword neither takes should be refused before anything is written, naming the keywords.
def test_save_model_passes_save_pretrained_options_and_refuses_unknown_keywords(tmp_path):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2)
    folder = hf_ot.save_model(model, tmp_path / "sharded", max_shard_size="20KB", license="mit")
    assert len(list(folder.glob("model-*.safetensors"))) > 1
    with pytest.raises(TypeError, match=r"licence.*license"):
        hf_ot.save_model(model, tmp_path / "misspelt", licence="mit")
    assert not (tmp_path / "misspelt").exists()


# hf_ot.convert(folder, dtyp=torch.bfloat16) (or attn_implmentation="eager", num_label=3) failed with
# "GPT2LMHeadModel.__init__() got an unexpected keyword argument 'dtyp'", naming neither convert nor a fix, although a
# misspelt keyword is to be named with the closest one. It should be, as convert's own misspelt parameters are.
@pytest.mark.parametrize(("given", "meant"), [("dtyp", "dtype"), ("attn_implmentation", "attn_implementation")])
def test_convert_names_the_closest_keyword_to_a_misspelt_loading_keyword(tmp_path, given, meant):
    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(tmp_path / "base")
    with pytest.raises(ValueError, match=rf"hf_ot.convert.*'{given}'.*did you mean '?{meant}'?"):
        hf_ot.convert(str(tmp_path / "base"), **{given: "eager"})


@pytest.mark.parametrize("training", [False, True])
def test_convert_keeps_the_loaded_models_mode(training):
    # hf_ot.convert(AutoModelForSequenceClassification.from_pretrained(...)) returned a model in training mode
    # (dropout on; with ot_output_reg a batched pipeline still failed on the batch's reg), where convert(folder)
    # gives one in evaluation mode, as from_pretrained does
    base = make_base("bert", "BertForSequenceClassification").train(training)
    assert hf_ot.convert(base, ot_num_steps=2).training is training


def test_ot_values_of_a_base_checkpoint_are_checked_before_it_is_loaded():
    with raises_naming(UsageError, "model.ot.ot_decoder_terminal_time", "> 0"):
        load_config("translation_t5", ["model.ot.ot_decoder_terminal_time=0"])
    cfg = {"task": "causal-lm", "model": {"base": "no/such-model", "ot": {"ot_solver": "rk5"}}}
    with pytest.raises(UsageError, match=r"^model.ot.ot_solver must be one of"):
        hf_ot.recipes.config.check_config(cfg)
    cfg["model"]["ot"] = {"ot_solver": "rk4", "ot_decoder_num_steps": 2}  # the base decides when it is converted
    hf_ot.recipes.config.check_config(cfg)


@pytest.mark.parametrize(
    "option,value,message",
    [
        (
            "--ot-terminal-time",
            "-1",
            f"argument --ot-terminal-time: {_T}, got -1.0.",
        ),
        (
            "--ot-terminal-time",
            "0",
            f"argument --ot-terminal-time: {_T}, got 0.0.",
        ),
        (
            "--ot-terminal-time",
            "nan",
            f"argument --ot-terminal-time: {_T}, got nan.",
        ),
        (
            "--ot-lambda",
            "-1",
            f"argument --ot-lambda: {_LAMBDA}, got -1.0.",
        ),
        (
            "--ot-lambda",
            "inf",
            f"argument --ot-lambda: {_LAMBDA}, got inf.",
        ),
        (
            "--ot-num-steps",
            "5000",
            "argument --ot-num-steps: ot_num_steps must be an integer from 1 to 1024 (the number of "
            "solver steps M), got 5000.",
        ),
    ],
)
def test_convert_bad_ot_arguments_are_usage_errors(tmp_path, capsys, monkeypatch, option, value, message):
    monkeypatch.setattr(hf_ot, "convert", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "gpt2", str(tmp_path / "out"), option, value])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().endswith(f"hf-ot convert: error: {message}")


@pytest.mark.usefixtures("in_repo")
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


@pytest.mark.usefixtures("in_repo")
def test_convert_overwrite_replaces_an_hf_ot_model_and_only_with_the_flag(tmp_path, base_folder, capsys):
    target = tmp_path / "ot"
    assert main(["convert", str(base_folder), str(target)]) == 0
    capsys.readouterr()
    assert main(["convert", str(base_folder), str(target), "--ot-num-steps", "3"]) != 0
    assert "--overwrite" in capsys.readouterr().err  # the fix is named: it is an hf_ot model
    assert json.loads((target / "config.json").read_text())["ot_num_steps"] == 1
    assert main(["convert", str(base_folder), str(target), "--ot-num-steps", "3", "--overwrite"]) == 0
    assert json.loads((target / "config.json").read_text())["ot_num_steps"] == 3


def test_converting_an_ot_model_keeps_its_settings(ot_folder, caplog):
    with caplog.at_level(logging.WARNING, logger="hf_ot.convert"):
        again = hf_ot.convert(str(ot_folder))
    cfg = again.config
    assert (cfg.ot_num_steps, cfg.ot_solver, cfg.ot_lambda, cfg.ot_reg_in_loss) == (4, "rk4", 0.5, True)
    assert "already an OT model" in caplog.text and "ot_num_steps=4" in caplog.text
    assert again.ot_conversion_info["kept"]["ot_solver"] == "rk4"
    # new settings given: those change, the rest is kept, and the change is said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_ot.convert"):
        deeper = hf_ot.convert(str(ot_folder), ot_num_steps=8)
    assert (deeper.config.ot_num_steps, deeper.config.ot_solver, deeper.config.ot_lambda) == (8, "rk4", 0.5)
    assert "ot_num_steps 4 -> 8" in caplog.text
    # the same for a loaded OT model, and the weights are the OT model's
    loaded = hf_ot.convert(again)
    assert loaded.config.ot_num_steps == 4
    for (name, a), b in zip(again.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    # a base checkpoint still gets the documented defaults
    base = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"))
    assert (base.config.ot_num_steps, base.config.ot_solver, base.config.ot_lambda) == (1, "euler", 0.1)


def test_cli_convert_of_an_ot_model_keeps_and_reports_its_settings(ot_folder, tmp_path, capsys):
    assert main(["convert", str(ot_folder), str(tmp_path / "again"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ot_settings"]["already_ot"] and result["ot_settings"]["kept"]["ot_num_steps"] == 4
    assert json.loads((tmp_path / "again" / "config.json").read_text())["ot_num_steps"] == 4


@pytest.mark.parametrize(
    "auto_map, message",
    [
        ({"AutoConfig": "../outside.X"}, r"auto_map\['AutoConfig'\] = '../outside.X' must map .*'module.ClassName'"),
        ({"AutoModelForCausalLM": "a.b.c"}, r"auto_map\['AutoModelForCausalLM'\]"),
        (["ot_gpt2.OTGPT2Config"], r"field auto_map = .* must map"),
        ({"AutoConfig": "missing_module.X"}, r"missing_module.py is not in"),
    ],
    ids=["escapes-folder", "dotted", "not-a-dict", "missing-file"],
)
def test_a_config_reaching_outside_its_folder_is_named(ot_folder, capsys, auto_map, message):
    import re

    from hf_ot.checkpoints import check_model_files

    config = json.loads((ot_folder / "config.json").read_text())
    config["auto_map"] = auto_map
    (ot_folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message) as err:
        check_model_files(ot_folder)
    assert str(ot_folder / "config.json") in str(err.value)
    assert (
        main(
            [
                "evaluate",
                str(ot_folder),
                "--config",
                str(REPO / "recipes/configs/quickstart.yaml"),
                "--trust-remote-code",
            ]
        )
        == 2
    )
    stderr = capsys.readouterr().err
    assert re.search(message, stderr) and "Traceback" not in stderr and "unpack" not in stderr
    with pytest.raises(ValueError, match=message):
        hf_ot.convert(str(ot_folder))


def test_a_corrupt_config_is_named(ot_folder):
    (ot_folder / "config.json").write_text('{"model_type": "ot_gpt2", "n_embd": ')
    with pytest.raises(ValueError, match=rf"{ot_folder / 'config.json'} is not valid JSON"):
        hf_ot.convert(str(ot_folder))
    with pytest.raises(Exception, match="config.json is not valid JSON"):
        plan_push(ot_folder, "me/ot")


def test_check_takes_the_one_names_and_warns_on_the_earlier_ones():
    import hf_ot

    report = hf_ot.check(ot_num_steps=[2], ot_solver="heun")
    assert report["solver"] == "heun" and list(report["steps"]) == [2] and report["m1_equals_base"]
    with pytest.warns(hf_ot.OTDeprecationWarning, match="pass ot_(num_steps|solver)="):
        assert hf_ot.check(steps=[2], solver="heun")["steps"] == report["steps"]
