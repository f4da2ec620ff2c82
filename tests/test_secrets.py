"""Credentials (tokens, URL passwords) never reach the console, the logs or the files hf_ot writes."""

import dataclasses
import json
import os
import pickle
import subprocess
import sys

import pytest
import torch
from conftest import REPO, set_flags, tiny_run
from helpers import raises_naming, results_rows
from huggingface_hub import EvalResult, ModelCard

from hf_ot import OTTrainingArguments
from hf_ot.cards import render_model_card
from hf_ot.cli import main
from hf_ot.errors import UsageError
from hf_ot.recipes.config import load_config

EVIL = "my data\n## Injected heading\n<img src=x onerror=alert(1)> | extra | cells"


def test_a_baselines_pickled_training_arguments_hold_no_token(tmp_path):
    # Trainer pickles its arguments into training_args.bin in every checkpoint; push_to_hub uploads them
    from hf_ot.recipes.run import training_arguments

    cfg = load_config("quickstart", ["model.ot=null", "training.hub_token=hf_secretSecret123"])
    args = training_arguments(cfg, str(tmp_path), is_ot=False)
    assert args.hub_token == "hf_secretSecret123"  # kept for the upload itself
    assert b"hf_secretSecret123" not in pickle.dumps(args)


def test_a_resume_does_not_compare_credentials(tmp_path):
    # a token is no training setting (tokens are rotated; the record holds it as <redacted>): a resume without it
    # was refused, and one with the literal "<redacted>" a printed hint showed was accepted as the token
    from hf_ot.recipes.resume import check_resume_settings, write_run_record

    then = {"training": {"seed": 1, "hub_token": "<redacted>"}}
    write_run_record(tmp_path / "trainer", tmp_path / "run", then, {}, None)
    checkpoint = tmp_path / "trainer" / "checkpoint-2"
    for now in ({"seed": 1}, {"seed": 1, "hub_token": "hf_aNewTokenAfterRotation"}):
        check_resume_settings(checkpoint, {"training": now}, {})
    with pytest.raises(Exception, match="training.seed"):  # (the other settings are compared still)
        check_resume_settings(checkpoint, {"training": {"seed": 2}}, {})


def test_a_token_of_the_wrong_type_is_refused_without_its_value(tmp_path):
    # a YAML list or mapping where a token (text) belongs: the error names the key and the type, not the value
    (tmp_path / "recipe.yaml").write_text("task: causal-lm\ntraining:\n  hub_token: [hf_secretSecret123]\n")
    with pytest.raises(Exception, match="training.hub_token") as err:
        load_config(str(tmp_path / "recipe.yaml"), [])
    assert "hf_secretSecret123" not in str(err.value)
    # on the command line a scalar key takes the text as written: a token is text whatever it holds
    assert load_config("quickstart", ["training.hub_token=[hf_x"]).training["hub_token"] == "[hf_x"


def test_a_sweep_over_a_token_key_writes_no_token(tmp_path, capsys):
    # `hf-ot sweep quickstart --param training.hub_token --values hf_...` named each run folder
    # hub_token=hf_..._seed1 and listed the values in sweep.json and on stdout; the folder name reached
    # every checkpoint's training_args.bin (its output_dir). Refusing the sweep is as good
    out = tmp_path / "sweep"
    flags = set_flags(tiny_run("training.save_strategy=no", max_steps=1))
    main(
        [
            "sweep",
            "quickstart",
            "--param",
            "training.hub_token",
            "--values",
            "hf_secretSecret123",
            "--out",
            str(out),
            *flags,
        ]
    )
    assert "hf_secretSecret123" not in capsys.readouterr().out
    written = list(out.rglob("*")) if out.exists() else []
    assert not [
        p
        for p in written
        if "hf_secretSecret123" in str(p) or (p.is_file() and b"hf_secretSecret123" in p.read_bytes())
    ]


def test_the_other_token_variable_and_a_token_in_a_url_are_hidden(tmp_path, capsys, monkeypatch):
    # HUGGING_FACE_HUB_TOKEN=hf_... hf-ot train quickstart --set card.dataset_name="docs hf_..." --set
    # training.hub_model_id=https://user:hf_...@huggingface.co/me/x: both tokens on the card, in results.json,
    # hf_ot_run.json and stdout (only HF_TOKEN's value was hidden); `hf-ot evaluate https://user:hf_...@huggingface.co/m`
    # printed the token in its error; the URL's token was pickled into every checkpoint's training_args.bin
    from hf_ot.recipes.run import training_arguments
    from hf_ot.run_folders import dumps

    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_hubEnvSecret999")
    url = "https://user:hf_urlSecret12345@huggingface.co/me/x"
    text = dumps({"data": "docs hf_hubEnvSecret999", "settings": {"hub_model_id": url}})
    assert "hf_hubEnvSecret999" not in text and "hf_urlSecret12345" not in text and "huggingface.co/me/x" in text
    assert main(["evaluate", url, "--config", "quickstart"]) == 2
    assert "hf_urlSecret12345" not in capsys.readouterr().err
    args = training_arguments(load_config("quickstart", [f"training.hub_model_id={url}"]), str(tmp_path), is_ot=True)
    assert b"hf_urlSecret12345" not in pickle.dumps(args)
    # a token as `hf auth login` stores it (hf_ + 34 characters), wherever it comes from
    assert "hf_" + "aB3" * 12 not in dumps({"note": "hf_" + "aB3" * 12})


def test_a_usage_error_of_the_arguments_shows_no_token(capsys, monkeypatch):
    # hf-ot train quickstart --hub_token hf_... (transformers' flag): "unrecognized arguments: --hub_token hf_... (a
    # recipe key here: --set training.hub_token=hf_...)", the token twice on stderr; HF_TOKEN's value in a bad
    # argument (--steps) was printed too: argparse's errors came before anything hid secrets
    monkeypatch.setenv("HF_TOKEN", "hf_envEnvEnv77")
    with pytest.raises(SystemExit):
        main(["train", "quickstart", "--hub_token", "hf_shortSecret1"])
    err = capsys.readouterr().err
    assert "hf_shortSecret1" not in err and "--set training.hub_token=<redacted>" in err
    with pytest.raises(SystemExit):
        main(["evaluate", "m", "--config", "quickstart", "--ot-num-steps", "hf_envEnvEnv77"])
    assert "hf_envEnvEnv77" not in capsys.readouterr().err


def test_a_recipes_yaml_error_hides_a_token_on_its_line_and_names_a_tab(tmp_path):
    # hf-ot train mine.yaml, where mine.yaml has `hub_token: "hf_secretSecret123` (unclosed) or `hub_token: hf_...: x`:
    # PyYAML's message quotes the line, token and all. A tab indent was told "Put a value that starts with * & @ `
    # (a glob *.csv) in quotes."
    recipe = tmp_path / "mine.yaml"
    for line in ('  hub_token: "hf_secretSecret123', "  hub_token: hf_secretSecret123: x"):
        recipe.write_text(f"task: causal-lm\ntraining:\n{line}\n  max_steps: 3\n")
        with pytest.raises(UsageError) as err:
            load_config(str(recipe))
        assert "not valid YAML" in str(err.value) and "hf_secretSecret123" not in str(err.value)
    recipe.write_text("task: causal-lm\ntraining:\n\tmax_steps: 3\n")
    with pytest.raises(UsageError, match="tab") as err:
        load_config(str(recipe))
    assert "a glob" not in str(err.value)


# copy.deepcopy(OTTrainingArguments(..., hub_token="hf_x")) (or copy.copy) gave hub_token=None: the pickled copy that
# leaves credentials out of training_args.bin was also what copying used. A copy should keep every value.
@pytest.mark.parametrize("how", ["copy", "deepcopy"])
def test_a_copy_of_training_arguments_keeps_the_token_a_pickle_leaves_out(tmp_path, how):
    import copy
    import pickle

    args = OTTrainingArguments(output_dir=str(tmp_path), hub_token="hf_probe_value", ot_lambda=0.5, report_to=[])
    copied = getattr(copy, how)(args)
    assert (copied.hub_token, copied.ot_lambda) == ("hf_probe_value", 0.5)
    assert pickle.loads(pickle.dumps(args)).hub_token is None


def test_a_card_hides_tokens_and_escapes_the_users_text(converted, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_fromTheEnvironment42")
    _, model = converted("gpt2", "GPT2LMHeadModel")
    result = EvalResult(
        task_type="text-generation",
        dataset_type="custom",
        dataset_name=EVIL,
        dataset_split="validation",
        metric_type="perplexity",
        metric_name="Perplexity",
        metric_value=12.5,
    )
    card = render_model_card(
        model,
        datasets=[EVIL],
        eval_results=[result],
        training={
            "hub_token": "hf_secretSecret123",
            "push_to_hub_token": "hf_other456",
            "run_name": "from hf_fromTheEnvironment42",
            "learning_rate": 0.001,
            "max_new_tokens": 7,
        },
        license="mit",
    )
    text = str(card)
    for secret in ("hf_secretSecret123", "hf_other456", "hf_fromTheEnvironment42"):
        assert secret not in text
    assert "| learning_rate | 0.001 |" in text and "| max_new_tokens | 7 |" in text
    parsed = ModelCard(text)  # valid metadata
    assert parsed.data.eval_results[0].dataset_name == " ".join(EVIL.split())
    body = text.split("---", 2)[2]  # (the metadata holds the name as a quoted YAML string)
    assert "\n## Injected heading" not in body and "<img" not in body and "&lt;img" in body
    rows = results_rows(text)
    assert len(rows) == 3  # header, rule, one result
    assert all(row.replace("\\|", "").count("|") == 5 for row in rows)  # four cells each


def test_written_json_hides_tokens(tmp_path, monkeypatch):
    from hf_ot.run_folders import write_json

    monkeypatch.setenv("HF_TOKEN", "hf_fromTheEnvironment42")
    path = write_json(
        tmp_path / "r.json",
        {
            "training": {"hub_token": "hf_x123456", "max_new_tokens": 4},
            "note": "hf_fromTheEnvironment42",
            "tokenizer_sha256": "ab",
        },
    )
    text = path.read_text()
    assert "hf_x123456" not in text and "hf_fromTheEnvironment42" not in text
    value = json.loads(text)
    assert value["training"]["max_new_tokens"] == 4 and value["tokenizer_sha256"] == "ab"


@pytest.mark.slow
def test_a_run_writes_no_token_anywhere(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_TOKEN": "hf_fromTheEnvironment42"}
    settings = tiny_run(
        "training.hub_token=hf_secretSecret123",
        "training.save_strategy=steps",
        "training.save_steps=2",
        "card.dataset_name=Python docs hf_fromTheEnvironment42",
    )
    done = subprocess.run(
        [sys.executable, "-m", "hf_ot.cli", "train", "quickstart", "--output-dir", str(out), *set_flags(settings)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # every file, binary ones too: training_args.bin (TrainingArguments pickled) goes to the Hub with push_to_hub
    written = [p for p in out.rglob("*") if p.is_file()]
    assert (out / "model" / "README.md") in written and (out / "results.json") in written
    assert any(p.name == "hf_ot_run.json" for p in written) and any(p.name == "training_args.bin" for p in written)
    for path in written:
        data = path.read_bytes()
        assert not any(secret in data for secret in (b"hf_secretSecret123", b"hf_fromTheEnvironment42")), path
    for secret in ("hf_secretSecret123", "hf_fromTheEnvironment42"):
        assert secret not in done.stdout + done.stderr


def test_printed_results_hide_tokens(capsys, monkeypatch):
    from hf_ot.run_folders import dumps

    monkeypatch.setenv("HF_TOKEN", "hf_fromTheEnvironment42")
    text = dumps({"settings": {"hub_token": "hf_x123456"}, "path": "/a/hf_fromTheEnvironment42/b"})
    assert "hf_x123456" not in text and "hf_fromTheEnvironment42" not in text and "<redacted>" in text


def test_nothing_a_command_prints_shows_a_secret(tmp_path, capsys, monkeypatch):
    from hf_ot.cli import main

    monkeypatch.setenv("HF_TOKEN", "hf_fromTheEnvironment42")
    missing = tmp_path / "hf_fromTheEnvironment42" / "model"
    assert main(["evaluate", str(missing), "--config", "quickstart"]) == 2  # the path is in the error
    token, data = "training.hub_token=hf_setOnTheCommandLine7", "data.train_file=/no/hf_setOnTheCommandLine7/x.txt"
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "r"), "--set", token, "--set", data]) == 1
    err = capsys.readouterr().err
    assert "hf_fromTheEnvironment42" not in err and "hf_setOnTheCommandLine7" not in err
    assert err.count("<redacted>") >= 2


def test_a_token_in_any_card_text_is_hidden_and_a_push_refuses_a_folder_holding_it(converted, tmp_path, monkeypatch):
    from hf_ot.errors import PushError
    from hf_ot.hub import push_to_hub, save_model

    monkeypatch.setenv("HF_TOKEN", "hf_fromTheEnvironment42")
    plain, model = converted("gpt2", "GPT2LMHeadModel")
    model.config.name_or_path = str(tmp_path / "base-hf_fromTheEnvironment42")  # a local base: named on the card
    save_model(model, tmp_path / "ot", license="mit")
    card = (tmp_path / "ot" / "README.md").read_text()
    assert "hf_fromTheEnvironment42" not in card and "base-<redacted>" in card
    assert push_to_hub(tmp_path / "ot", "me/ot", dry_run=True).files
    (tmp_path / "ot" / "NOTES.md").write_text("token: hf_fromTheEnvironment42\n")  # a user's file with the token
    with pytest.raises(PushError, match="NOTES.md .*hold a Hugging Face token"):
        push_to_hub(tmp_path / "ot", "me/ot", dry_run=True)
    (tmp_path / "ot" / "NOTES.md").unlink()
    # a checkpoint's training_args.bin (Trainer's arguments, pickled) holding a hub_token, whoever's it is
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), hub_token="hf_" + "aB3" * 12, report_to=[])
    torch.save(args, tmp_path / "ot" / "training_args.bin")
    with raises_naming(PushError, "training_args.bin", "token"):
        push_to_hub(tmp_path / "ot", "me/ot", dry_run=True)
    torch.save(dataclasses.replace(args, hub_token=None), tmp_path / "ot" / "training_args.bin")
    assert "training_args.bin" in push_to_hub(tmp_path / "ot", "me/ot", dry_run=True).files
