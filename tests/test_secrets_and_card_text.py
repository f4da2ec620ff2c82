"""No secret reaches a card, results.json, a run record or a log (a *token* field, the value of HF_TOKEN), and text
taken from the user (dataset names, settings) cannot break the card: it is re-parsed by huggingface_hub's ModelCard
and its results table keeps its rows."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import REPO, set_flags, tiny_run
from huggingface_hub import EvalResult, ModelCard

from hf_ot.cards import render_model_card

EVIL = "my data\n## Injected heading\n<img src=x onerror=alert(1)> | extra | cells"


def results_rows(text: str) -> list[str]:
    table = text.split("## Evaluation", 1)[1].split("\n## ", 1)[0]
    return [line for line in table.splitlines() if line.startswith("|")]


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
    bad = "training.hub_token=[hf_setOnTheCommandLine7"  # not YAML: the value is in the error
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "r"), "--set", bad]) == 2
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
    with pytest.raises(PushError, match="training_args.bin .*hold a Hugging Face token"):
        push_to_hub(tmp_path / "ot", "me/ot", dry_run=True)
    torch.save(dataclasses.replace(args, hub_token=None), tmp_path / "ot" / "training_args.bin")
    assert "training_args.bin" in push_to_hub(tmp_path / "ot", "me/ot", dry_run=True).files


def test_a_hand_edited_card_of_a_base_gives_no_base_model(converted, tmp_path):
    from hf_ot.cards import hub_id_of
    from hf_ot.hub import save_model

    _, model = converted("gpt2", "GPT2LMHeadModel")
    save_model(model, tmp_path / "ot", license="mit")
    card = tmp_path / "ot" / "README.md"
    text = card.read_text()
    card.write_text(text.replace("library_name:", "base_model: 'a b\\n## x'\nlibrary_name:", 1))
    assert hub_id_of(tmp_path / "ot") is None  # not a Hub id: it would land raw in the next card's text
    card.write_text("---\nbase_model: [unclosed\n---\n")
    assert hub_id_of(tmp_path / "ot") is None  # (was a YAML error while saving a model converted from it)


def test_a_metric_type_or_a_long_base_model_name_cannot_break_the_card(converted):
    _, model = converted("gpt2", "GPT2LMHeadModel")
    result = EvalResult(
        task_type="text-generation", dataset_type="custom", dataset_name="d", metric_type="p|q", metric_value=1.0
    )
    text = str(render_model_card(model, eval_results=[result], base_model="x" * 5000, license="mit"))
    rows = results_rows(text)
    assert len(rows) == 3 and all(row.replace("\\|", "").count("|") == 5 for row in rows)  # four cells each


def test_a_card_without_license_says_how_to_give_one_on_the_command_line(converted, caplog):
    _, model = converted("gpt2", "GPT2LMHeadModel")
    render_model_card(model)  # (a scratch recipe such as translation_t5 names none)
    assert "--set card.license=" in caplog.text


URL_SECRETS = {  # a data spec -> its secret: a URL's password, an S3 secret key holding '/', a query token
    "https://alice:Pa55word1@host/x.csv": "Pa55word1",
    "s3://AKIAKEY:se/cr3t+Part@bucket/x.csv": "se/cr3t+Part",
    "https://host/x.csv?token=qu3ryT0ken": "qu3ryT0ken",
}


@pytest.mark.parametrize("text", ["{}", "/cwd/{}", "looked at /cwd/{} (x)"])
def test_url_credentials_are_hidden_also_in_a_path_made_of_the_url(text):
    from pathlib import Path

    from hf_ot.redaction import hide_secrets

    for spec, secret in URL_SECRETS.items():
        for shown in (text.format(spec), text.format(Path(spec))):  # Path() makes :// :/
            assert secret not in hide_secrets(shown) and "<redacted>" in hide_secrets(shown), shown
    for plain in ("https://host/a/b@c.csv", "mail me at a@b.com", "https://h/x.csv?max_tokens=5&sort=asc"):
        assert hide_secrets(plain) == plain


@pytest.mark.parametrize("spec", list(URL_SECRETS))
@pytest.mark.parametrize("key", ["data.train_file", "data.validation_file"])
def test_a_data_url_with_credentials_is_never_printed(spec, key, tmp_path, capsys, monkeypatch):
    from hf_ot.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "r"), "--set", f"{key}={spec}"]) != 0
    out = capsys.readouterr()
    assert URL_SECRETS[spec] not in out.out + out.err and key in out.err
