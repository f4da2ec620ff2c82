"""`hf-ot evaluate` and hf_ot.recipes.evaluate: what is scored, on which data, and the errors that name the fix."""

import json

import pytest
import torch
from conftest import make_base, set_flags, tiny_run
from datasets import Dataset
from helpers import assert_nothing_trained, quick_cfg, raises_naming, warns_naming
from transformers.trainer_pt_utils import LabelSmoother

import hf_ot
from hf_ot import OTTrainer, OTTrainingArguments
from hf_ot.cli import main
from hf_ot.errors import UsageError
from hf_ot.recipes import build_char_tokenizer, load_config, run_recipe

_EVAL_SCRIPT = """
import json, os, sys, torch
sys.path.insert(0, {tests!r})
from conftest import make_base
from datasets import Dataset
from hf_ot import convert
from hf_ot.training import OTTrainer, OTTrainingArguments
model = convert(make_base("bert", "BertForSequenceClassification"), num_steps=2, reg_lambda=0.1)
with torch.no_grad():
    model.classifier.bias.copy_(torch.tensor([0.0, 5.0]))  # rows of class 0 cost much more than the others
ids = torch.randint(4, 99, (7, 6), generator=torch.Generator().manual_seed(0)).tolist()
rows = Dataset.from_dict({{"input_ids": ids, "labels": [0, 1, 1, 1, 1, 1, 1]}})
args = OTTrainingArguments(output_dir=sys.argv[1], report_to="none", use_cpu=True, per_device_eval_batch_size=4)
metrics = OTTrainer(model=model, args=args, eval_dataset=rows).evaluate()
if int(os.environ.get("RANK", "0")) == 0:
    open(os.path.join(sys.argv[1], "metrics.json"), "w").write(json.dumps(metrics))
"""


def _lm_data():
    ids = torch.randint(4, 99, (8, 10), generator=torch.Generator().manual_seed(0)).tolist()
    return Dataset.from_dict({"input_ids": ids, "labels": ids})


def _smoothed_loss(outputs, labels, num_items_in_batch=None):
    return LabelSmoother(epsilon=0.1)(outputs, labels, shift_labels=True)


def _task_loss_and_reg(model, data):
    ids = torch.tensor(data["input_ids"])
    with torch.no_grad():
        out = model.eval()(input_ids=ids, labels=ids)
    return out.loss.item(), out.reg.item()


def _two_sets():
    g = torch.Generator().manual_seed(1)
    first, second = torch.randint(4, 99, (4, 10), generator=g).tolist(), torch.randint(4, 20, (4, 10), generator=g)
    return (Dataset.from_dict({"input_ids": ids, "labels": ids}) for ids in (first, second.tolist()))


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

    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2)
    folder = save_model(model, tmp_path / "model", tokenizer=build_char_tokenizer("abcdefghij klmnop"))
    marker = tmp_path / "marker.txt"
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker), model_type=model_type))
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = model_type
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    return folder, marker


def test_evaluations_missing_validation_file_is_named_by_its_key(tmp_path, monkeypatch):
    from hf_ot.recipes.evaluate import classification_eval_set

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,pos\na dull film,neg\n" * 5)
    cfg = load_config("sst2_minilm", ["data.train_file=reviews.csv", "data.validation_file=missing.csv"])
    with raises_naming(FileNotFoundError, "data.validation_file", "'missing.csv'", "not found", "--set"):
        classification_eval_set(cfg, tokenizer=None, label_names=["neg", "pos"])


@pytest.mark.parametrize("config", ["sst2_minilm", "translation_t5"])
def test_evaluating_with_a_recipe_of_another_task_is_a_usage_error(tmp_path, capsys, monkeypatch, config):
    # a causal LM evaluated with --config sst2_minilm loaded as a GPT-2 classifier and ended in "IndexError: index
    # out of range in self"; with translation_t5: "Unrecognized configuration class ... for AutoModelForSeq2SeqLM"
    # and a list of ~100 config classes. The folder's config says its task: the error can name both
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,pos\na dull film,neg\n" * 10)
    (tmp_path / "pairs.jsonl").write_text('{"source": "ein Hund", "target": "a dog"}\n' * 20)
    flags = set_flags(tiny_run("training.save_strategy=no", max_steps=1))
    assert main(["train", "quickstart", "--output-dir", "run", *flags]) == 0
    capsys.readouterr()
    data = "reviews.csv" if config == "sst2_minilm" else "pairs.jsonl"
    assert main(["evaluate", "run/model", "--config", config, "--set", f"data.train_file={data}"]) == 2
    assert "causal-lm" in capsys.readouterr().err


def test_evaluations_label_names_cannot_reorder_the_models_classes(tmp_path, monkeypatch):
    # `hf-ot evaluate runs/reviews/model --set data.label_names=[pos,neg]` of a model whose id2label is {0: neg,
    # 1: pos}: the labels were numbered pos=0, neg=1 and compared with the model's ids (accuracy inverted), no word
    from transformers import AutoTokenizer

    from hf_ot.conversion_check import default_base
    from hf_ot.recipes.evaluate import classification_eval_set

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,pos\na dull film,neg\n" * 5)
    overrides = ["data.train_file=reviews.csv", "data.validation_file=reviews.csv", "data.label_names=[pos, neg]"]
    cfg = load_config("sst2_minilm", overrides)
    tokenizer = AutoTokenizer.from_pretrained(default_base())
    try:
        _, _, labels = classification_eval_set(cfg, tokenizer, label_names=["neg", "pos"])
    except Exception as err:  # refused, naming the disagreement: as good
        assert "data.label_names" in str(err)
    else:
        assert labels == [1, 0] * 5  # the model's ids: pos is its class 1


@pytest.mark.parametrize(
    "recipe, setting",
    [
        ("sst2_minilm", "data.streaming=true"),  # a classifier read its CSV into Arrow as ever
        ("sst2_minilm", "data.block_size=32"),  # causal-lm only
        ("quickstart", "data.label_names=[neg, pos]"),  # classification only
        ("quickstart", "evaluation.num_beams=4"),  # translation only: a causal LM is scored teacher-forced
    ],
)
def test_a_key_of_another_task_is_refused_or_warned_about(recipe, setting, caplog, recwarn):
    # as model.ot.decoder_num_steps on a one-stack model is refused ("apply to encoder-decoder families only")
    key = setting.partition("=")[0]
    try:
        load_config(recipe, [setting])
    except Exception as err:
        assert key in str(err)
    else:
        assert key in caplog.text + " ".join(str(w.message) for w in recwarn)


@pytest.mark.parametrize("label, wrong_fix", [("pos", "add them"), ("2", "data.num_labels")])
def test_evaluations_unknown_class_names_the_validation_file_and_the_models_classes(
    tmp_path, monkeypatch, label, wrong_fix
):
    # `hf-ot evaluate runs/reviews/model --config sst2_minilm --set data.validation_file=one.csv` of a model whose
    # classes are bad/good, one.csv labelled pos: "train split (one.csv): labels ['pos'] are not in
    # data.label_names=['bad', 'good'] (or the model's): add them." The file is the validation file, and adding
    # pos to data.label_names is then refused ("disagrees with the model's classes"): the model has no class pos.
    # Likewise a label 2: "Set data.num_labels to the number of classes (3 ...) and name each in data.label_names"
    from hf_ot.recipes.evaluate import classification_eval_set

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,good\na dull film,bad\n" * 5)
    (tmp_path / "one.csv").write_text(f"text,label\nonly one row,{label}\n")
    cfg = load_config("sst2_minilm", ["data.train_file=reviews.csv", "data.validation_file=one.csv"])
    with pytest.raises(Exception, match="one.csv") as err:
        classification_eval_set(cfg, tokenizer=None, label_names=["bad", "good"])
    message = str(err.value)
    assert "train split" not in message and wrong_fix not in message


def test_a_bad_max_new_tokens_shows_the_value_given():
    # "Config key 'evaluation.max_new_tokens' must be int >= 1, got <hidden>.": credentials are hidden by the
    # "token" in the key's name, which a number of tokens also has
    with pytest.raises(UsageError, match="evaluation.max_new_tokens") as err:
        load_config("translation_t5", ["evaluation.max_new_tokens=-5"])
    assert "-5" in str(err.value)


def test_evaluations_file_without_labels_is_not_called_the_train_split(tmp_path, monkeypatch):
    # `hf-ot evaluate MODEL --config sst2_minilm --set data.validation_file=ev.csv`, ev.csv without a label column:
    # "train split (ev.csv): column(s) ['label'] not found": the evaluation's file is no train split
    from hf_ot.recipes.evaluate import classification_eval_set

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,good\na dull film,bad\n" * 5)
    (tmp_path / "ev.csv").write_text("text\nnice\nawful\n")
    cfg = load_config("sst2_minilm", ["data.train_file=reviews.csv", "data.validation_file=ev.csv"])
    with pytest.raises(Exception, match="ev.csv") as err:
        classification_eval_set(cfg, tokenizer=None, label_names=["bad", "good"])
    assert "train split" not in str(err.value), str(err.value)


def test_evaluations_validation_folder_of_test_files_is_read_or_named(tmp_path, monkeypatch):
    # `hf-ot evaluate ... --set data.validation_file=evd`, evd/test.csv: "evd has no split 'train' (it has
    # ['test']): set data.train_split." (data.train_split names the training data's split; with
    # data.validation_split=test as well: the same error); training: KeyError 'train' (the test above)
    from hf_ot.recipes.evaluate import classification_eval_set

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,good\na dull film,bad\n" * 5)
    (tmp_path / "evd").mkdir()
    (tmp_path / "evd" / "test.csv").write_text("text,label\nnice,good\nawful,bad\n")
    cfg = load_config("sst2_minilm", ["data.train_file=reviews.csv", "data.validation_file=evd"])
    tokenizer = lambda texts, **kw: {"input_ids": [[1]] * len(texts), "special_tokens_mask": [[0]] * len(texts)}  # noqa: E731
    try:
        *_, labels = classification_eval_set(cfg, tokenizer, label_names=["bad", "good"])
    except Exception as err:
        assert "evd" in str(err) and "data.train_split" not in str(err), str(err)
    else:
        assert labels == [1, 0]


def test_a_text_metric_asked_of_a_classifier_is_refused_or_warned_about(caplog, recwarn):
    # `hf-ot evaluate runs/reviews/model --config sst2_minilm --set evaluation.metrics=[bleu]` (and `hf-ot train`):
    # exit 0, no BLEU in the result and nothing said, where a misspelt name is refused and evaluation.num_beams on a
    # causal LM is (test_a_key_of_another_task_is_refused_or_warned_about)
    from hf_ot.recipes.evaluate import text_metric_names

    try:
        text_metric_names(load_config("sst2_minilm", ["evaluation.metrics=[bleu]"]))
    except Exception as err:
        assert "evaluation.metrics" in str(err), str(err)
    else:
        assert "evaluation.metrics" in caplog.text + " ".join(str(w.message) for w in recwarn)


def test_evaluations_saved_dataset_is_scored_by_the_models_class_names(tmp_path, monkeypatch):
    # `hf-ot evaluate runs/reviews/model --config sst2_minilm --set data.validation_file=saved` of a model whose
    # id2label is {0: neg, 1: pos}, `saved` a save_to_disk folder with label ClassLabel(names=[pos, neg]): its ids
    # (pos=0) were compared with the model's (0 is neg): every row scored against the other class, no word
    from datasets import ClassLabel, Dataset, Features, Value

    from hf_ot.recipes.evaluate import classification_eval_set

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,pos\na dull film,neg\n" * 5)
    features = Features(text=Value("string"), label=ClassLabel(names=["pos", "neg"]))
    rows = {"text": ["a good film", "a dull film"] * 3, "label": [0, 1] * 3}  # pos, neg, ...
    Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "saved"))
    cfg = load_config("sst2_minilm", ["data.train_file=reviews.csv", "data.validation_file=saved"])
    tokenizer = lambda texts, **kw: {"input_ids": [[1]] * len(texts), "special_tokens_mask": [[0]] * len(texts)}  # noqa: E731
    try:
        *_, labels = classification_eval_set(cfg, tokenizer, label_names=["neg", "pos"])
    except Exception as err:  # refused, naming the two orders: as good
        assert "saved" in str(err), str(err)
    else:
        assert labels == [1, 0] * 3  # the model's ids: pos is its class 1


def test_eval_task_loss_on_two_processes_is_the_one_process_value(tmp_path):
    # `torchrun --nproc_per_node=2 -m hf_ot.cli train ...` with 7 validation rows: accelerate pads the last batch of
    # the second process with a copy of row 0 (even batches), and OTTrainer's eval_task_loss and eval_reg (and
    # eval_perplexity = exp(eval_task_loss)) weigh that copy as a row of the data: 8 rows, not 7
    import json
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "evaluate.py"
    script.write_text(_EVAL_SCRIPT.format(tests=str(Path(__file__).parent)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "RANK", "WORLD_SIZE", "LOCAL_"))}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1]), env.get("PYTHONPATH", "")])  # this hf_ot
    results = {}
    for n in (1, 2):
        (out := tmp_path / str(n)).mkdir()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torchrun = str(Path(sys.executable).parent / "torchrun")
        command = [torchrun, "--nproc_per_node", str(n), "--master_port", str(port), str(script), str(out)]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[n] = json.loads((out / "metrics.json").read_text())
    for key in ("eval_task_loss", "eval_reg"):
        assert results[2][key] == pytest.approx(results[1][key], rel=1e-4), key


@pytest.mark.parametrize("recipe", ["quickstart", "sst2_minilm"])
def test_evaluations_json_names_only_the_validation_file_it_read(tmp_path, recipe):
    # hf-ot evaluate runs/notes/model --config quickstart --set data.validation_file=other_notes.txt: "data":
    # "pydoc_data.topics (CPython reference manual), other_notes.txt"; sst2_minilm alike ("train.tsv, ...") though
    # only the validation file is evaluated (the recipe's training data is not read)
    from hf_ot.cli._common import check_data_of

    cfg = load_config(recipe, [f"data.validation_file={tmp_path / 'other.txt'}"])
    assert check_data_of(str(tmp_path / "model"), cfg, ["data.validation_file=other.txt"]) == "other.txt"


def test_evaluating_on_validation_line_files_reads_no_test_files(tmp_path):
    # hf-ot evaluate runs/lines/model --config translation_t5 --set data.validation_source=tr.de --set
    # data.validation_target=tr.en (installed, outside a checkout): "data.test_source: file '../shared/data/multi30k/
    # test_2016_flickr.de.gz' not found": the recipe's test files (kept: no training key was given) were read too
    from hf_ot.recipes.data import load_translation
    from hf_ot.recipes.evaluate import evaluation_split

    (tmp_path / "tr.de").write_text("".join(f"ein Hund {i}\n" for i in range(4)))
    (tmp_path / "tr.en").write_text("".join(f"a dog {i}\n" for i in range(4)))
    keys = [f"data.validation_source={tmp_path / 'tr.de'}", f"data.validation_target={tmp_path / 'tr.en'}"]
    missing = [f"data.test_source={tmp_path / 'gone.de'}", f"data.test_target={tmp_path / 'gone.en'}"]  # (not shipped)
    split = evaluation_split(load_translation, load_config("translation_t5", keys + missing).data)
    assert split["source"] == [f"ein Hund {i}" for i in range(4)] and split["target"][3] == "a dog 3"


def test_evaluating_on_a_short_validation_text_names_the_file(tmp_path):
    # hf-ot evaluate runs/notes/model --config quickstart --set data.validation_file=small.txt: "The validation split
    # has no complete block of data.block_size=128 tokens" named no file (and the block size is the model's)
    from hf_ot.recipes.evaluate import lm_eval_dataset
    from hf_ot.recipes.tokenizer import build_char_tokenizer

    (tmp_path / "small.txt").write_text("tiny note\n")
    cfg = load_config("quickstart", [f"data.validation_file={tmp_path / 'small.txt'}"])
    with raises_naming(ValueError, "block_size=64", "small.txt"):
        lm_eval_dataset(cfg, build_char_tokenizer("tiny ote\n"), block_size=64)


def test_evaluations_json_names_only_the_validation_line_files_it_read(tmp_path):
    # hf-ot evaluate runs/lines/model --config translation_t5 --set data.validation_source=tr.de --set
    # data.validation_target=tr.en: "data": "train.de.gz, train.en.gz, tr.de, tr.en, test_2016_flickr.de.gz, ..."
    from hf_ot.cli._common import check_data_of

    keys = [f"data.validation_source={tmp_path / 'tr.de'}", f"data.validation_target={tmp_path / 'tr.en'}"]
    assert check_data_of(str(tmp_path / "model"), load_config("translation_t5", keys), keys) == "tr.de, tr.en"


# OTTrainer(args=OTTrainingArguments(..., label_smoothing_factor=0.1)).evaluate() (or compute_loss_func=...) raised
# "OTGPT2LMHeadModel returned no `reg`": Trainer takes the labels out of the inputs for its own loss, and an
# evaluation forward without labels returned no reg. It should evaluate: eval_loss = the smoothed loss + lambda * reg.
@pytest.mark.parametrize("how", ["label_smoothing_factor", "compute_loss_func"])
def test_evaluation_with_trainers_own_loss_gets_reg(tmp_path, how):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2, ot_lambda=0.5)
    data = _lm_data()
    smoothing = {"label_smoothing_factor": 0.1} if how == "label_smoothing_factor" else {}
    loss_func = {"compute_loss_func": _smoothed_loss} if how == "compute_loss_func" else {}
    args = OTTrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=8, report_to=[], **smoothing)
    metrics = OTTrainer(model=model, args=args, eval_dataset=data, **loss_func).evaluate()
    with torch.no_grad():
        reg = model.eval()(input_ids=torch.tensor(data["input_ids"]), output_reg=True).reg
    assert metrics["eval_reg"] == pytest.approx(reg.item(), rel=1e-4, abs=1e-6)


# OTTrainer with label_smoothing_factor=0.1 on an OT causal LM scored each position against its own token: Trainer
# shifts the labels only for the classes in its causal-LM mapping, which OT classes are not in, so training minimised
# the wrong objective, silently. It should train (and evaluate) the smoothed next-token loss + lambda * reg.
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_label_smoothing_of_an_ot_causal_lm_predicts_the_next_token(tmp_path, mode):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2, ot_lambda=0.5)
    args = OTTrainingArguments(output_dir=str(tmp_path), report_to=[], label_smoothing_factor=0.1)
    trainer = OTTrainer(model=model, args=args)
    batch = {k: torch.tensor(v) for k, v in _lm_data()[:4].items()}
    model.train(mode == "train")
    with torch.no_grad():
        loss = trainer.compute_loss(model, dict(batch))
        out = model(input_ids=batch["input_ids"], output_reg=True)
    expected = _smoothed_loss(out, batch["labels"]) + 0.5 * out.reg
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


# trainer.predict(B) then trainer.evaluate(A): eval_task_loss and eval_reg were those of A and B together (predict
# left its batches' sums for the next evaluation's log), and predict's metrics had neither. Each should be its own.
def test_predict_then_evaluate_reports_each_sets_own_task_loss_and_reg(tmp_path):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2)
    first, second = _two_sets()
    args = OTTrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=4, report_to=[])
    trainer = OTTrainer(model=model, args=args)
    predicted = trainer.predict(second).metrics
    evaluated = trainer.evaluate(first)
    for metrics, prefix, data in ((predicted, "test", second), (evaluated, "eval", first)):
        task, reg = _task_loss_and_reg(model, data)
        assert metrics[f"{prefix}_task_loss"] == pytest.approx(task, rel=1e-5)
        assert metrics[f"{prefix}_reg"] == pytest.approx(reg, rel=1e-4, abs=1e-6)


# OTTrainer(eval_dataset={"a": A, "b": B}) logged both sets' task loss and reg as eval_task_loss / eval_reg (and
# evaluate(metric_key_prefix="test") as eval_*), so metric_for_best_model="eval_b_task_loss" raised a KeyError. They
# should carry the evaluation's prefix, as eval_a_loss does.
def test_task_loss_and_reg_carry_the_evaluations_metric_prefix(tmp_path):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2)
    first, second = _two_sets()
    expected = {name: _task_loss_and_reg(model, data) for name, data in (("a", first), ("b", second))}
    args = OTTrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=4, report_to=[])
    trainer = OTTrainer(model=model, args=args, eval_dataset={"a": first, "b": second})
    metrics = trainer.evaluate()
    for name, (task, reg) in expected.items():
        assert metrics[f"eval_{name}_task_loss"] == pytest.approx(task, rel=1e-5)
        assert metrics[f"eval_{name}_reg"] == pytest.approx(reg, rel=1e-4, abs=1e-6)
    assert "eval_task_loss" not in metrics


# OTSeq2SeqTrainer(args=OTSeq2SeqTrainingArguments(predict_with_generate=True), compute_metrics=...).evaluate():
# eval_loss was the task loss alone (Seq2SeqTrainer's generation path takes it from a plain forward) and eval_task_loss
# / eval_reg were missing. It should report what OTTrainer reports: eval_loss = task loss + lambda * reg, and both.
def test_evaluation_that_generates_reports_the_ot_objective(tmp_path):
    model = hf_ot.convert(make_base("t5", "T5ForConditionalGeneration"), ot_num_steps=2, ot_lambda=0.5)
    g = torch.Generator().manual_seed(2)
    source, target = torch.randint(4, 99, (4, 9), generator=g), torch.randint(4, 99, (4, 5), generator=g)
    data = Dataset.from_dict({"input_ids": source.tolist(), "labels": target.tolist()})
    args = hf_ot.OTSeq2SeqTrainingArguments(
        output_dir=str(tmp_path), per_device_eval_batch_size=4, report_to=[], predict_with_generate=True
    )
    args.generation_max_length = 4
    trainer = hf_ot.OTSeq2SeqTrainer(model=model, args=args, compute_metrics=lambda p: {"rows": len(p.predictions)})
    metrics = trainer.evaluate(data)
    with torch.no_grad():
        out = model.eval()(input_ids=source, labels=target)
    assert metrics["eval_rows"] == 4
    assert metrics["eval_task_loss"] == pytest.approx(out.loss.item(), rel=1e-5)
    assert metrics["eval_reg"] == pytest.approx(out.reg.item(), rel=1e-4, abs=1e-6)
    assert metrics["eval_loss"] == pytest.approx((out.loss + 0.5 * out.reg).item(), rel=1e-5)


# transformers.Trainer(args=TrainingArguments(label_smoothing_factor=0.1)) training an OT causal LM with
# config.ot_reg_in_loss = True trained without a word a loss without reg and against unshifted labels (Trainer computes
# the smoothed loss from the logits itself, shifting only its own causal-LM classes). It should warn, naming OTTrainer.
def test_a_plain_trainers_label_smoothing_on_an_ot_model_is_warned_about(tmp_path):
    from transformers import Trainer, TrainingArguments

    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2, ot_lambda=0.5, ot_reg_in_loss=True)
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, report_to=[], save_strategy="no", label_smoothing_factor=0.1
    )
    with warns_naming(hf_ot.RegNotTrainedWarning, "label smoother", "reg", "shift", "OTTrainer"):
        Trainer(model=model, args=args, train_dataset=_lm_data()).train()


@pytest.mark.usefixtures("in_repo")
def test_a_classifiers_unknown_metric_is_refused_before_the_data(tmp_path):
    # check_before_data checked evaluation.metrics for every task; since text_metric_names took its place (none for a
    # classifier) a misspelt name in a classification recipe trained for minutes and was then silently not computed
    from hf_ot.recipes.run import check_before_data, training_arguments

    cfg = load_config("recipes/configs/sst2_minilm.yaml", [f"output_dir={tmp_path}", "evaluation.metrics=[blue]"])
    with pytest.raises(ValueError, match=r"Unknown metric name\(s\) \['blue'\]"):  # (run_recipe's check, no data)
        check_before_data(cfg, training_arguments(cfg, str(tmp_path), cfg.is_ot))


@pytest.mark.usefixtures("in_repo")
def test_evaluate_refuses_ids_past_the_classes_of_a_model_with_unnamed_classes(monkeypatch):
    # a classifier saved without class names (transformers' LABEL_0, LABEL_1) has no names to check the evaluation
    # labels against: an id 2 was scored as a class it can never predict (accuracy silently lowered)
    from conftest import make_base

    from hf_ot.errors import UsageError
    from hf_ot.recipes import evaluate

    model = make_base("bert", "BertForSequenceClassification")
    assert model.config.id2label == {0: "LABEL_0", 1: "LABEL_1"}
    monkeypatch.setattr(evaluate, "load_for_eval", lambda *a, **k: (model, None))
    coverage = {"scored": 3, "of": 3}
    monkeypatch.setattr(evaluate, "eval_data", lambda *a, **k: (([[5, 6]], [[0, 0]], [0, 2, 1]), coverage))  # labels
    with raises_naming(UsageError, "one.csv", "labels [2]", "not classes of the model", "0..1"):
        evaluate.evaluate_folder("unused", "sst2_minilm", ["data.validation_file=one.csv"])


def test_evaluation_that_generates_runs_one_teacher_forced_forward_per_batch(tmp_path):
    # OTSeq2SeqTrainer(predict_with_generate=True).evaluate(): Seq2SeqTrainer's own teacher-forced forward and then
    # one more in compute_loss for the OT objective, two per batch
    from datasets import Dataset

    model = hf_ot.convert(make_base("t5", "T5ForConditionalGeneration"), ot_num_steps=2, ot_lambda=0.5)
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
        ("gpt2", "GPT2LMHeadModel", {"ot_solver": "bosh3"}),  # num_field_evaluations (batch,) stays out as well
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

    model = hf_ot.convert(make_base(family, head), ot_num_steps=2, **ot)  # (before Trainer sets anything on the base)
    evaluate(make_base(family, head), Seq2SeqTrainer, Seq2SeqTrainingArguments)
    evaluate(model, hf_ot.OTSeq2SeqTrainer, hf_ot.OTSeq2SeqTrainingArguments)
    assert shapes[hf_ot.OTSeq2SeqTrainer] == shapes[Seq2SeqTrainer]


@pytest.mark.usefixtures("in_repo")
def test_unknown_metric_in_a_recipe_fails_before_training(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="Unknown metric name"):
        run_recipe(quick_cfg(out, "evaluation.metrics=[bleu, rogue]"))
    assert_nothing_trained(out)


@pytest.mark.usefixtures("in_repo")
def test_evaluate_loads_hf_ot_types_without_running_the_folders_code(tmp_path):
    from hf_ot.recipes.evaluate import load_for_eval

    folder, marker = folder_with_own_code(tmp_path, "ot_gpt2")  # an hf_ot type whose auto_map was redirected
    model, _ = load_for_eval(str(folder))
    assert type(model) is hf_ot.OTGPT2LMHeadModel  # hf_ot's installed class
    assert not marker.exists()


@pytest.mark.usefixtures("in_repo")
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
