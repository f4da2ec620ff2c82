"""What training tells its user: an OT model trained by a trainer that would silently leave reg out says so itself,
recipes log what they run on, check their report_to backends before any data is read, and write a training-curve
figure."""

import warnings

import pytest
import torch
from conftest import make_base
from helpers import assert_names

import hf_ot
from hf_ot.models import RegNotTrainedWarning


def _train(trainer_cls, model, tmp_path, **args):
    from datasets import Dataset
    from transformers import TrainingArguments

    ids = torch.randint(4, 99, (4, 8), generator=torch.Generator().manual_seed(0))
    ds = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    cls = hf_ot.OTTrainingArguments if trainer_cls is hf_ot.OTTrainer else TrainingArguments
    trainer = trainer_cls(
        model=model,
        train_dataset=ds,
        args=cls(
            output_dir=str(tmp_path / "t"),
            max_steps=1,
            per_device_train_batch_size=2,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
            **args,
        ),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    return [str(w.message) for w in caught if issubclass(w.category, RegNotTrainedWarning)]


def _ot(**kwargs):
    return hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2, ot_lambda=0.5, **kwargs)


def test_plain_trainer_on_an_ot_model_without_reg_warns_once_naming_both_fixes(tmp_path):
    from transformers import Trainer

    model = _ot()
    found = _train(Trainer, model, tmp_path)
    assert len(found) == 1 and "OTTrainer" in found[0] and "ot_reg_in_loss = True" in found[0]
    assert _train(Trainer, model, tmp_path) == []  # once


def test_peft_model_under_a_plain_trainer_warns_too(tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import Trainer

    assert len(_train(Trainer, get_peft_model(_ot(), LoraConfig(r=2)), tmp_path)) == 1


@pytest.mark.parametrize("case", ["reg_in_loss", "ot_trainer", "lambda_zero"])
def test_no_warning_where_reg_is_trained_or_unweighted(tmp_path, case):
    from transformers import Trainer

    if case == "reg_in_loss":
        assert _train(Trainer, _ot(ot_reg_in_loss=True), tmp_path) == []
    elif case == "ot_trainer":
        assert _train(hf_ot.OTTrainer, _ot(), tmp_path) == []
    else:
        assert _train(Trainer, hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_lambda=0.0), tmp_path) == []


def test_recipe_evaluates_and_checkpoints_by_default_logs_its_scale_and_writes_curves(tmp_path, caplog):
    import json
    import logging

    from conftest import set_flags
    from helpers import toy_overrides

    from hf_ot.cli import main

    overrides = [o for o in toy_overrides("quickstart", tmp_path) if o != "training.max_steps=2"]
    run = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="hf_ot"):
        assert (
            main(
                [
                    "train",
                    "quickstart",
                    "--output-dir",
                    str(run),
                    *set_flags(overrides),
                    "--set",
                    "training.max_steps=5",
                ]
            )
            == 0
        )
    assert_names(caplog.text, "global batch 2", "2 per device", "1 processes", "1 accumulation")
    history = json.loads((run / "log_history.json").read_text())
    assert [h["step"] for h in history if "eval_task_loss" in h][:5] == [1, 2, 3, 4, 5]  # every max_steps // 5
    assert sorted(p.name for p in (run / "trainer").glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-5"]
    assert (run / "training_curves.png").stat().st_size > 1000


def test_a_missing_report_to_backend_fails_before_any_data_is_read(tmp_path, capsys):
    import importlib.util

    from hf_ot.cli import main

    if importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX"):
        pytest.skip("tensorboard is installed here")
    code = main(
        [
            "train",
            "quickstart",
            "--output-dir",
            str(tmp_path / "run"),
            "--set",
            "training.report_to=tensorboard",
            "--set",
            "data.source=file",
            "--set",
            f"data.train_file={tmp_path / 'no-such-file.txt'}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "tensorboard" in err and "no-such-file" not in err


def test_trl_sft_trainer_on_an_ot_model_without_reg_warns(tmp_path):
    pytest.importorskip("trl", reason="TRL is not installed")
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from hf_ot.recipes.tokenizer import build_char_tokenizer

    ids = torch.randint(4, 99, (4, 8), generator=torch.Generator().manual_seed(0))
    args = SFTConfig(
        output_dir=str(tmp_path / "sft"),
        max_steps=1,
        per_device_train_batch_size=2,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        dataset_kwargs={"skip_prepare_dataset": True},
    )  # already token ids
    trainer = SFTTrainer(
        model=_ot(),
        args=args,
        train_dataset=Dataset.from_dict({"input_ids": ids.tolist()}),
        processing_class=build_char_tokenizer("abcdefgh"),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    found = [str(w.message) for w in caught if issubclass(w.category, RegNotTrainedWarning)]
    assert len(found) == 1 and "OTTrainer" in found[0]


def test_an_accelerate_style_loop_on_an_ot_model_is_told_once_by_the_model():
    """A loop of its own (accelerate's, say) that backpropagates `outputs.loss` is told by the model, once, that reg is
    not in that loss, naming the fixes; with config.ot_reg_in_loss the loss is the OT objective and nothing is said."""
    ids = torch.randint(4, 99, (2, 8), generator=torch.Generator().manual_seed(0))
    model = _ot().train()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            model(input_ids=ids, labels=ids).loss.backward()
    found = [str(w.message) for w in caught if issubclass(w.category, RegNotTrainedWarning)]
    assert len(found) == 1 and "OTTrainer" in found[0] and "ot_reg_in_loss = True" in found[0]
    model = _ot(ot_reg_in_loss=True).train()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RegNotTrainedWarning)
        out = model(input_ids=ids, labels=ids)
    assert torch.allclose(out.loss, out.task_loss + 0.5 * out.reg)
