"""Self-contained checkpoints (loaded where hf_ot cannot be imported), model cards, push, broken folders."""

import hashlib
import json
import os
import re
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import HEADS, REPO, inputs_for, main_output, make_base
from helpers import WITHOUT_HF_OT, raises_naming, results_of_fresh_python
from huggingface_hub import EvalResult, ModelCard
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForCausalLM

import hf_ot
from hf_ot.cards import render_model_card
from hf_ot.errors import PushError
from hf_ot.hub import plan_push, push_to_hub, save_model
from hf_ot.registry import TASK_AUTO_CLASSES

pytestmark = pytest.mark.core  # the model, cache and generation tests: CI runs them on the oldest transformers too

DECODERS = {"GPT2LMHeadModel", "T5ForConditionalGeneration", "BartForConditionalGeneration"}

REMOTE_SCRIPT = WITHOUT_HF_OT + textwrap.dedent(
    """
    import json, sys
    try:
        import hf_ot  # noqa
        raise SystemExit("hf_ot imported: the isolation failed")
    except ImportError:
        pass
    import torch, transformers
    payload = torch.load(sys.argv[1], weights_only=False)
    results = {}
    for folder in payload.pop("_broken"):  # folders with a missing code file: the error must name it
        try:
            transformers.AutoModel.from_pretrained(folder, trust_remote_code=True)
            results[folder] = "loaded"
        except Exception as err:
            results[folder] = f"{type(err).__name__}: {err}"
    for name, item in payload.items():
        auto = getattr(transformers, item["auto_class"])
        model = auto.from_pretrained(item["folder"], trust_remote_code=True).eval()
        with torch.no_grad():
            out = model(**item["inputs"], output_reg=True)
            main = out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state
            r = {"class": type(model).__name__, "module": type(model).__module__,
                 "equal": bool(torch.equal(main, item["expected"])),
                 "reg_equal": bool(torch.equal(out.reg, item["reg"]))}
            if item.get("generated") is not None:
                gen = model.generate(**item["gen_inputs"], max_new_tokens=5, min_new_tokens=5, do_sample=False,
                                     pad_token_id=0)
                r["generate_equal"] = bool(torch.equal(gen, item["generated"]))
        results[name] = r
    print("RESULTS" + json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def remote_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote")
    payload = {}
    for i, (family, class_name) in enumerate(HEADS):
        model = hf_ot.convert(
            make_base(family, class_name),
            ot_num_steps=2,
            ot_solver=("euler", "rk4")[i % 2],
            ot_mode=("residual", "paper")[i % 2],
        ).eval()
        folder = save_model(model, root / class_name)
        inputs = inputs_for(family, class_name, pad_last=1)
        with torch.no_grad():
            out = model(**inputs, output_reg=True)
        item = {
            "folder": str(folder),
            "auto_class": TASK_AUTO_CLASSES[hf_ot.cards.task_of(model)].__name__,
            "inputs": inputs,
            "expected": main_output(out),
            "reg": out.reg,
        }
        if class_name in DECODERS:
            gen_inputs = {k: v for k, v in inputs.items() if k != "decoder_input_ids"}
            item["gen_inputs"] = gen_inputs
            item["generated"] = model.generate(
                **gen_inputs, max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0
            )
        payload[class_name] = item
    import shutil

    payload["_broken"] = []
    for missing in ("ot_model.py", "ot_gpt2.py"):
        broken = Path(shutil.copytree(payload["GPT2LMHeadModel"]["folder"], root / f"missing-{missing}"))
        (broken / missing).unlink()
        payload["_broken"].append(str(broken))
    torch.save(payload, root / "payload.pt")
    # bitwise equal: the same threads split the same sums
    threads = str(torch.get_num_threads())
    return results_of_fresh_python(REMOTE_SCRIPT, root / "payload.pt", REPO, cwd=root, OMP_NUM_THREADS=threads), root


@pytest.mark.parametrize("family,class_name", HEADS)
def test_loads_with_trust_remote_code_without_hf_ot(remote_results, family, class_name):
    results, root = remote_results
    r = results[class_name]
    assert r["class"] == "OT" + class_name
    assert r["module"].startswith("transformers_modules")  # the copied code, not an installed package
    assert r["equal"] and r["reg_equal"]  # bitwise on CPU fp32
    if class_name in DECODERS:
        assert r["generate_equal"]
    files = set(os.listdir(root / class_name))
    assert {"config.json", "model.safetensors", "ot_model.py", "README.md"} <= files
    code = "".join((root / class_name / f).read_text() for f in files if f.endswith(".py"))
    assert not re.search(r"^\s*(from|import)\s+hf_ot", code, re.M)  # the saved code never imports hf_ot


@pytest.mark.parametrize("missing", ["ot_model.py", "ot_gpt2.py"])
def test_missing_code_file_is_named(remote_results, missing):
    results, root = remote_results
    message = results[str(root / f"missing-{missing}")]
    assert message != "loaded" and missing in message


def test_auto_map_names_every_applicable_auto_class(tmp_path):
    model = hf_ot.convert(make_base("bert", "BertForSequenceClassification"))
    folder = save_model(model, tmp_path / "m")
    auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "ot_bert.OTBertConfig",
        "AutoModel": "ot_bert.OTBertModel",
        "AutoModelForMaskedLM": "ot_bert.OTBertForMaskedLM",
        "AutoModelForSequenceClassification": "ot_bert.OTBertForSequenceClassification",
        "AutoModelForTokenClassification": "ot_bert.OTBertForTokenClassification",
    }
    gpt2 = save_model(hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel")), tmp_path / "g")
    assert (gpt2 / "generation_config.json").is_file()


def test_model_card_metadata_and_content():
    model = hf_ot.convert(make_base("t5", "T5ForConditionalGeneration"), ot_num_steps=3, ot_solver="heun")
    results = [
        EvalResult(
            task_type="translation",
            dataset_type="bentrevett/multi30k",
            dataset_name="Multi30k",
            dataset_split="test",
            metric_type="bleu",
            metric_value=12.5,
        )
    ]
    card = render_model_card(
        model,
        repo_id="me/ot-t5",
        base_model="google-t5/t5-small",
        datasets=["bentrevett/multi30k"],
        eval_results=results,
        training={"max_steps": 100},
    )
    parsed = ModelCard(str(card))
    data = parsed.data.to_dict()
    assert data["library_name"] == "transformers" and data["base_model"] == "google-t5/t5-small"
    assert {"hf_ot", "ot-transformer", "t5"} <= set(data["tags"])
    assert data["datasets"] == ["bentrevett/multi30k"] and data["metrics"] == ["sacrebleu"]  # sacreBLEU's 0-100
    assert data["model-index"][0]["results"][0]["metrics"][0]["value"] == 12.5
    text = parsed.text
    for needle in (
        "| solver | `heun` |",
        "| steps M | 3 |",
        "| lambda | 0.1 |",
        "AutoModelForSeq2SeqLM",
        f"{model.num_parameters():,}",
        "| max_steps | 100 |",
        "| Multi30k | test | BLEU (`sacrebleu`) | 12.5 |",
    ):
        assert needle in text, needle
    # without results: no model-index
    assert "model-index" not in render_model_card(model).data.to_dict()


def _digest(folder):
    h = hashlib.sha256()
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def saved_folder(tmp_path):
    return save_model(hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2), tmp_path / "ot")


class FakeApi:
    def __init__(self, fail=None):
        self.calls, self.fail = [], fail

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))
        if self.fail:
            raise self.fail

    def create_commit(self, repo_id, operations, **kwargs):
        files = {op.path_in_repo: op.path_or_fileobj.read() for op in operations}
        self.calls.append(("create_commit", {"repo_id": repo_id, "files": files, **kwargs}))


def test_push_plan_and_upload_calls(saved_folder):
    plan = push_to_hub(saved_folder, "me/ot-gpt2", dry_run=True)
    assert plan.repo_id == "me/ot-gpt2"
    assert {
        "config.json",
        "model.safetensors",
        "ot_model.py",
        "ot_flow.py",
        "ot_config.py",
        "ot_solver.py",
        "ot_speculative.py",
        "ot_gpt2.py",
        "README.md",
        "generation_config.json",
    } == set(plan.files)
    assert plan.commit_message.startswith("Upload OT-Transformer")
    api = FakeApi()
    push_to_hub(saved_folder, "me/ot-gpt2", commit_message="first", token="hf_fake", api=api)
    assert api.calls[0][:2] == ("create_repo", "me/ot-gpt2")
    upload = api.calls[1][1]
    assert upload["repo_id"] == "me/ot-gpt2" and upload["commit_message"] == "first"
    assert upload["files"] == {name: (saved_folder / name).read_bytes() for name in plan.files}


def test_push_without_token_or_network_fails_clearly_and_keeps_folder(saved_folder, monkeypatch):
    before = _digest(saved_folder)
    monkeypatch.setattr(hf_ot.hub, "get_token", lambda: None)
    with pytest.raises(PushError, match="hf auth login"):
        push_to_hub(saved_folder, "me/ot-gpt2")
    with pytest.raises(PushError, match="unchanged"):
        push_to_hub(saved_folder, "me/ot-gpt2", token="hf_fake", api=FakeApi(fail=ConnectionError("no route")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the real client, offline: refuses before any network access
    with pytest.raises(PushError, match="Push to me/ot-gpt2 failed"):
        push_to_hub(saved_folder, "me/ot-gpt2", token="hf_fake")
    assert _digest(saved_folder) == before


def test_push_cli(saved_folder, capsys, monkeypatch):
    from hf_ot.cli import main

    assert main(["push", str(saved_folder), "me/ot", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["repo_id"] == "me/ot"
    monkeypatch.setattr(hf_ot.hub, "get_token", lambda: None)
    assert main(["push", str(saved_folder), "me/ot"]) == 1  # a failure, not a usage error
    err = capsys.readouterr().err
    assert "No Hugging Face token" in err and "Traceback" not in err
    with pytest.raises(PushError, match="no config.json"):
        plan_push(saved_folder.parent, "me/ot")


def test_broken_folders_name_the_problem(saved_folder, tmp_path):
    import shutil

    # (a missing code file is checked where it matters, in the interpreter without hf_ot: see below)
    # unknown mode in the config
    broken = Path(shutil.copytree(saved_folder, tmp_path / "bad_mode"))
    cfg = json.loads((broken / "config.json").read_text())
    cfg["ot_mode"] = "teleport"
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="ot_mode must be one of"):
        AutoModelForCausalLM.from_pretrained(broken)
    # weights of the wrong shape
    broken = Path(shutil.copytree(saved_folder, tmp_path / "bad_shape"))
    weights = load_file(broken / "model.safetensors")
    weights["transformer.h.0.attn.c_attn.weight"] = torch.zeros(5, 5)
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    # transformers' own behaviour and exception: a RuntimeError whose fix is ignore_mismatched_sizes=True
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        AutoModelForCausalLM.from_pretrained(broken)
    # a base family hf_ot does not support
    from transformers import XLNetConfig

    XLNetConfig(n_layer=1, d_model=16, n_head=2, d_inner=16, vocab_size=10).save_pretrained(tmp_path / "xlnet")
    with pytest.raises(ValueError, match="Unsupported base family 'xlnet'"):
        hf_ot.convert(str(tmp_path / "xlnet"))


def test_save_refuses_to_clobber_and_failed_save_loses_nothing(saved_folder, monkeypatch):
    before = _digest(saved_folder)
    model = hf_ot.convert(make_base("bert", "BertModel"))
    with pytest.raises(ValueError, match="already holds a model"):
        save_model(model, saved_folder)

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(type(model), "save_pretrained", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_model(model, saved_folder, overwrite=True)
    assert _digest(saved_folder) == before
    assert [p.name for p in saved_folder.parent.iterdir()] == ["ot"]  # no temporary folders left behind
    loaded = AutoModel.from_pretrained(saved_folder)
    assert type(loaded).__name__ == "OTGPT2Model"


def test_push_of_a_plain_transformers_folder_says_what_it_is(tmp_path):
    # a recipe's baseline (model.ot: null) saves a plain model: "no model code" read as a broken OT folder
    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(tmp_path / "baseline")
    with raises_naming(PushError, "baseline", "plain transformers model", "'gpt2'", "hf upload"):
        push_to_hub(tmp_path / "baseline", "me/baseline", dry_run=True)
