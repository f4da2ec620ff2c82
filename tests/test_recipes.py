"""Recipes end to end (tiny settings), their input checks, and a 2-process run against a 1-process run."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, TINY_LM, set_flags
from helpers import assert_names, assert_nothing_trained, quick_cfg, raises_naming
from huggingface_hub import ModelCard
from transformers import AutoModelForCausalLM

from hf_ot.cli import main
from hf_ot.recipes import build_char_tokenizer, load_config, run_recipe

SHARED = REPO.parent / "shared" / "data"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data (the recipes' offline data) is absent")


def test_quickstart_recipe_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "recipes/configs/quickstart.yaml",
                "--output-dir",
                str(out),
                *set_flags(TINY_LM),
            ]
        )
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    for key in ("eval_task_loss", "eval_reg", "perplexity", "bleu", "rouge1", "rougeL"):
        assert key in results
    assert results["perplexity"] > 1
    folder = out / "model"
    assert {"config.json", "model.safetensors", "ot_model.py", "ot_gpt2.py", "tokenizer.json", "README.md"} <= set(
        os.listdir(folder)
    )
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    assert model.config.ot_mode == "paper" and model.config.ot_num_steps == 2
    card = (folder / "README.md").read_text()
    assert "perplexity" in card and "| steps M | 2 |" in card
    history = json.loads((out / "log_history.json").read_text())
    assert sum("task_loss" in h for h in history) == 3


@needs_shared
@pytest.mark.parametrize(
    "config,overrides",
    [
        ("sst2_minilm.yaml", ["data.max_train_samples=64", "data.max_eval_samples=32", "data.max_length=24"]),
        (
            "sst2_minilm_elastic.yaml",
            ["data.max_train_samples=64", "data.max_eval_samples=32", "data.max_length=24"],
        ),
        (
            "translation_t5.yaml",
            [
                "data.max_train_samples=64",
                "data.max_eval_samples=16",
                "data.vocab_size=400",
                "evaluation.generate_samples=4",
                "evaluation.max_new_tokens=6",
                "model.scratch.d_model=32",
                "model.scratch.d_ff=64",
                "model.scratch.d_kv=8",
            ],
        ),
        (
            "translation_bart.yaml",
            [
                "data.max_train_samples=64",
                "data.max_eval_samples=16",
                "data.vocab_size=400",
                "evaluation.generate_samples=4",
                "evaluation.max_new_tokens=6",
                "model.scratch.d_model=32",
                "model.scratch.encoder_ffn_dim=64",
                "model.scratch.decoder_ffn_dim=64",
            ],
        ),
    ],
)
def test_task_recipes_run(tmp_path, config, overrides):
    cfg = load_config(
        f"recipes/configs/{config}",
        ["training.max_steps=2", "training.logging_steps=1", *overrides, f"output_dir={tmp_path / 'run'}"],
    )
    results = run_recipe(cfg)
    assert results["eval_task_loss"] > 0 and results["eval_reg"] >= 0
    assert ("accuracy" in results) if "sst2" in config else ("bleu" in results)
    assert (tmp_path / "run" / "model" / "config.json").is_file()
    tag = ModelCard.load(tmp_path / "run" / "model" / "README.md").data.pipeline_tag
    assert tag == ("text-classification" if "sst2" in config else "translation")
    if "elastic" in config:  # the grid it is trained for is measured and reported; the trained setting is saved
        settings = {(row["solver"], row["num_steps"]) for row in results["elasticity"]["rows"]}
        assert {("euler", 1), ("euler", 4), ("heun", 1)} <= settings
        assert max(m for _, m in settings) == 4  # evaluation.elasticity_max_steps of the recipe
        saved = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
        assert (saved["ot_num_steps"], saved["ot_lambda"]) == (4, 0.1)


def test_missing_data_file_fails_before_training(tmp_path):
    cfg = quick_cfg(tmp_path / "run", "data.source=file", "data.train_file=data/nowhere.txt")
    with pytest.raises(FileNotFoundError, match="nowhere.txt"):
        run_recipe(cfg)
    assert_nothing_trained(tmp_path / "run")


def test_wrong_columns_fail_before_training(tmp_path):
    for split in ("train", "validation"):
        (tmp_path / f"{split}.tsv").write_text("text\tsentiment\ngood film\t1\nbad film\t0\n")
    cfg = load_config(
        "recipes/configs/sst2_minilm.yaml",
        [
            f"data.train_file={tmp_path / 'train.tsv'}",
            f"data.validation_file={tmp_path / 'validation.tsv'}",
            f"output_dir={tmp_path / 'run'}",
        ],
    )
    with raises_naming(ValueError, "['label']", "not found", "['text', 'sentiment']"):
        run_recipe(cfg)
    assert_nothing_trained(tmp_path / "run")


def test_tokenizer_without_pad_token_fails_before_training(tmp_path):
    tok = build_char_tokenizer("abc def")
    tok.pad_token = None
    tok.save_pretrained(tmp_path / "tok")
    for split in ("train", "validation"):
        (tmp_path / f"{split}.tsv").write_text("sentence\tlabel\ngood film\t1\nbad film\t0\n")
    cfg = load_config(
        "recipes/configs/sst2_minilm.yaml",
        [
            f"tokenizer={tmp_path / 'tok'}",
            f"data.train_file={tmp_path / 'train.tsv'}",
            f"data.validation_file={tmp_path / 'validation.tsv'}",
            f"output_dir={tmp_path / 'run'}",
        ],
    )
    with pytest.raises(ValueError, match="no pad token"):
        run_recipe(cfg)
    assert_nothing_trained(tmp_path / "run")


@pytest.mark.parametrize("config, name", [("sst2_minilm", "char"), ("sst2_minilm", "bpe"), ("translation_t5", "char")])
def test_a_tokenizer_built_from_data_where_the_task_builds_none_is_refused_not_looked_up(
    tmp_path, monkeypatch, config, name
):
    from hf_ot.errors import UsageError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for split in ("train", "validation"):  # (columns of both tasks)
        (tmp_path / f"{split}.tsv").write_text(
            "sentence\tlabel\tsource\ttarget\ngood film\t1\ta\tb\nbad film\t0\tc\td\n"
        )
    sets = [f"data.{k}_file={tmp_path / k}.tsv" for k in ("train", "validation")]
    cfg = load_config(f"recipes/configs/{config}.yaml", [f"tokenizer={name}", *sets, f"output_dir={tmp_path / 'run'}"])
    with raises_naming(UsageError, f"tokenizer: {name}", "unset it", "minilm", "a Hub id", "a folder") as err:
        run_recipe(cfg)
    assert "internet" not in str(err.value)
    assert_nothing_trained(tmp_path)


def test_negative_lambda_fails_before_training(tmp_path):
    with raises_naming(ValueError, "model.ot.ot_lambda", "from 0"):
        run_recipe(quick_cfg(tmp_path / "run", "model.ot.ot_lambda=-0.5"))
    assert_nothing_trained(tmp_path / "run")


def test_an_empty_elasticity_grid_fails_before_training(tmp_path):
    with raises_naming(ValueError, "evaluation.elasticity_max_steps", ">= 1", "0"):
        run_recipe(quick_cfg(tmp_path / "run", "evaluation.elasticity=true", "evaluation.elasticity_max_steps=0"))
    assert_nothing_trained(tmp_path / "run")


def test_output_folder_holding_another_model_is_refused(tmp_path):
    from conftest import make_base

    make_base("bert", "BertModel").save_pretrained(tmp_path / "run")
    before = sorted(os.listdir(tmp_path / "run"))
    with pytest.raises(ValueError, match="holds files a recipe did not write"):
        run_recipe(quick_cfg(tmp_path / "run"), overwrite=True)
    assert sorted(os.listdir(tmp_path / "run")) == before
    assert main(["train", "recipes/configs/quickstart.yaml", "--output-dir", str(tmp_path / "run")]) == 2


@pytest.mark.skipif(
    shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists(),
    reason="torchrun is not installed",
)
def test_two_processes_match_one_process(tmp_path):
    """Same global batch (2 x 4 vs 1 x 8), same seed: the logged losses agree to float tolerance (rel 1e-5)."""
    common = [
        "--set",
        "training.max_steps=4",
        "--set",
        "training.logging_steps=1",
        "--set",
        "data.max_eval_blocks=8",
        "--set",
        "evaluation.metrics=[]",
        "--set",
        "data.block_size=64",
        "--set",
        "model.scratch.n_positions=64",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    torchrun = (
        str(Path(sys.executable).parent / "torchrun")
        if (Path(sys.executable).parent / "torchrun").exists()
        else shutil.which("torchrun")
    )
    runs = {
        "one": [
            sys.executable,
            "recipes/causal_lm.py",
            "recipes/configs/quickstart.yaml",
            "--set",
            "training.per_device_train_batch_size=8",
        ],
        "two": [
            torchrun,
            "--nproc_per_node",
            "2",
            "recipes/causal_lm.py",
            "recipes/configs/quickstart.yaml",
            "--set",
            "training.per_device_train_batch_size=4",
        ],
    }
    losses = {}
    for name, cmd in runs.items():
        proc = subprocess.run(
            [*cmd, *common, "--output-dir", str(tmp_path / name)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        history = json.loads((tmp_path / name / "log_history.json").read_text())
        losses[name] = [(h["loss"], h["task_loss"], h["reg"]) for h in history if "task_loss" in h]
    assert len(losses["one"]) == len(losses["two"]) == 4
    for a, b in zip(losses["one"], losses["two"]):
        assert a == pytest.approx(b, rel=1e-5)


# -------------------------------------------------------------------------------- numbers that say what they are


def test_perplexity_from_the_task_loss_and_teacher_forced_metrics_labelled(tmp_path):
    import math

    cfg = quick_cfg(
        tmp_path / "run", "model.ot.ot_lambda=100.0", "card.license=mit", quiet=False
    )  # a visible reg term in eval_loss
    results = run_recipe(cfg)
    assert results["eval_loss"] == pytest.approx(results["eval_task_loss"] + 100.0 * results["eval_reg"], rel=1e-4)
    assert results["eval_perplexity"] == pytest.approx(math.exp(results["eval_task_loss"]), rel=1e-6)
    assert results["eval_loss"] > results["eval_task_loss"] + 1e-3  # so exp(eval_loss) would overstate it
    assert results["text_metrics_protocol"].startswith("teacher-forced")
    card = (tmp_path / "run" / "model" / "README.md").read_text()
    assert "BLEU (teacher-forced next token)" in card
    assert "license: mit" in card  # card.license of the config reaches the card


def test_best_model_is_selected_on_the_task_loss_by_default(tmp_path):
    from datasets import Dataset

    from hf_ot.recipes import training_arguments
    from hf_ot.training import OTTrainer

    cfg = quick_cfg(
        tmp_path / "run",
        "training.load_best_model_at_end=true",
        "training.eval_strategy=steps",
        "training.eval_steps=1",
        "training.save_strategy=steps",
        "training.save_steps=1",
        "training.max_steps=3",
        quiet=False,
    )
    args = training_arguments(cfg, str(tmp_path / "run"))
    assert args.metric_for_best_model == "task_loss" and args.greater_is_better is False
    args.disable_tqdm = True
    tok = build_char_tokenizer("abcdefgh ")
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, len(tok), (16, 16), generator=g).tolist()
    data = Dataset.from_dict({"input_ids": ids, "labels": ids})
    from hf_ot.recipes import build_model

    trainer = OTTrainer(
        model=build_model(cfg.model, "causal-lm", tok),
        args=args,
        train_dataset=data,
        eval_dataset=data.select(range(4)),
    )
    trainer.train()
    task_losses = [h["eval_task_loss"] for h in trainer.state.log_history if "eval_task_loss" in h]
    assert len(task_losses) == 3 and trainer.state.best_metric == pytest.approx(min(task_losses))


def test_recipe_with_the_model_loss_switch(tmp_path):
    """model.ot.reg_in_loss: the model's loss is the objective; the recipe's results are those of OTTrainer's sum."""
    results = run_recipe(
        quick_cfg(tmp_path / "run", "model.ot.ot_reg_in_loss=true", "model.ot.ot_lambda=100.0", quiet=False)
    )
    assert results["eval_loss"] == pytest.approx(results["eval_task_loss"] + 100.0 * results["eval_reg"], rel=1e-4)
    history = json.loads((tmp_path / "run" / "log_history.json").read_text())
    steps = [h for h in history if "task_loss" in h]
    assert len(steps) == 3 and all(h["loss"] > h["task_loss"] for h in steps)
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model", trust_remote_code=True)
    assert saved.config.ot_reg_in_loss is True


def test_streamed_text_trains_and_evaluates(tmp_path, monkeypatch):
    """data.streaming gives IterableDatasets (corpora larger than disk): the recipe's blocks are those of the same
    text in Arrow files (the validation rows read into memory for evaluation), and the recipe trains on the stream."""
    from datasets import IterableDatasetDict

    from hf_ot.recipes import causal_lm_datasets
    from hf_ot.recipes import data as data_lib

    cfg = quick_cfg(tmp_path / "streamed" / "run", quiet=False)
    _, arrow_train, arrow_val = causal_lm_datasets(cfg)
    real = data_lib.text_splits
    monkeypatch.setattr(
        data_lib,
        "text_splits",
        lambda data: IterableDatasetDict({name: split.to_iterable_dataset() for name, split in real(data).items()}),
    )
    _, train, val = causal_lm_datasets(cfg)
    assert val["input_ids"] == arrow_val["input_ids"]
    assert [[int(i) for i in row["input_ids"]] for row in train.take(20)] == arrow_train["input_ids"][:20]
    results = run_recipe(cfg)
    history = json.loads((tmp_path / "streamed" / "run" / "log_history.json").read_text())
    assert sum("task_loss" in h for h in history) == 3 and results["eval_samples"] == len(arrow_val)


def test_elasticity_grid_reaches_results_and_card_and_keeps_the_trained_setting(tmp_path):
    """evaluation.elasticity: the validation loss at every solver x M' (1..2M) in results.json and on the card;
    a row equals the saved model's loss at that setting computed here; the saved config keeps the trained M."""
    import torch
    from transformers import AutoTokenizer

    from hf_ot.calibration import CARD_BEGIN
    from hf_ot.recipes.evaluate import calibration_batches
    from hf_ot.run_folders import foreign_entries

    cfg = quick_cfg(tmp_path / "run", "evaluation.elasticity=true", "data.max_eval_blocks=4", quiet=False)
    results = run_recipe(cfg)
    grid = results["elasticity"]
    assert {(r["solver"], r["num_steps"]) for r in grid["rows"]} == {
        (s, m) for s in ("euler", "heun", "rk4") for m in (1, 2, 3, 4)
    }
    assert (grid["trained"]["solver"], grid["trained"]["num_steps"]) == ("euler", 2)
    folder = tmp_path / "run" / "model"
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert (model.config.ot_num_steps, model.config.ot_solver) == (2, "euler")
    row = next(r for r in grid["rows"] if (r["solver"], r["num_steps"]) == ("heun", 1))
    model.config.ot_solver, model.config.ot_num_steps = "heun", 1
    batches, _, _ = calibration_batches(cfg, AutoTokenizer.from_pretrained(folder), cfg.evaluation.max_batches)
    with torch.no_grad():
        losses = [(model(**b).loss.item(), b["input_ids"].numel()) for b in batches]
    by_hand = sum(loss * n for loss, n in losses) / sum(n for _, n in losses)
    assert row["metric"] == pytest.approx(by_hand, rel=1e-4)
    card = (folder / "README.md").read_text()
    assert card.count(CARD_BEGIN) == 1 and "The config keeps the trained setting" in card
    assert (folder / "calibration.png").is_file() and foreign_entries(folder) == []
    assert json.loads((tmp_path / "run" / "results.json").read_text())["elasticity"]["rows"] == grid["rows"]


def test_an_epoch_run_evaluates_and_checkpoints_five_times_too(tmp_path, monkeypatch):
    """max_steps=-1 with num_train_epochs: the recipe's default interval is 1/5 of the optimizer steps the epochs
    give (TrainingArguments' fractional steps; not every logging_steps, nor Trainer's 500)."""
    from conftest import tiny_run

    monkeypatch.chdir(REPO)
    out = tmp_path / "run"
    data = tmp_path / "corpus.txt"
    data.write_text("".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(60)))
    overrides = tiny_run(
        f"output_dir={out}",
        "data.source=file",
        f"data.train_file={data}",
        "training.max_steps=-1",
        "training.num_train_epochs=2",
        "training.logging_steps=1",
        max_steps=None,
    )
    run_recipe(load_config("quickstart", overrides))
    history = json.loads((out / "log_history.json").read_text())
    total = max(h["step"] for h in history)
    evals = [h["step"] for h in history if "eval_loss" in h]
    every = math.ceil(total * 0.2)  # TrainingArguments' fractional eval_steps / save_steps: ceil(0.2 * steps)
    assert total > 10 and evals[:4] == [every * i for i in range(1, 5)] and every * 5 >= total, (total, evals)
    checkpoints = sorted(int(p.name.split("-")[1]) for p in (out / "trainer").glob("checkpoint-*"))
    assert checkpoints and all(step % every == 0 or step == total for step in checkpoints), checkpoints


def test_a_cut_of_the_validation_examples_is_said(caplog):
    """data.max_eval_samples leaves validation examples unscored: said with what it keeps of how many."""
    from datasets import Dataset, DatasetDict

    from hf_ot.recipes.config import DataSection
    from hf_ot.recipes.splits import _limited

    ds = DatasetDict(
        train=Dataset.from_dict({"x": list(range(10))}), validation=Dataset.from_dict({"x": list(range(5))})
    )
    with caplog.at_level("WARNING", logger="hf_ot"):
        _limited(ds, DataSection.of({"max_eval_samples": 3}))
    assert ds["validation"]["x"] == [0, 1, 2]
    assert_names(caplog.text, "3 of 5", "data.max_eval_samples=3")
