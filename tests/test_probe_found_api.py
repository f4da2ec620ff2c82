"""Defects a probe of hf_ot from Python (a transformers / PEFT / Trainer user) found; each test fails before its fix."""

import pytest
import torch
from conftest import make_base
from datasets import Dataset
from transformers.trainer_pt_utils import LabelSmoother

import hf_ot
from hf_ot import OTTrainer, OTTrainingArguments


def _lm_data():
    ids = torch.randint(4, 99, (8, 10), generator=torch.Generator().manual_seed(0)).tolist()
    return Dataset.from_dict({"input_ids": ids, "labels": ids})


def _smoothed_loss(outputs, labels, num_items_in_batch=None):
    return LabelSmoother(epsilon=0.1)(outputs, labels, shift_labels=True)


# OTTrainer(args=OTTrainingArguments(..., label_smoothing_factor=0.1)).evaluate() (or compute_loss_func=...) raised
# "OTGPT2LMHeadModel returned no `reg`": Trainer takes the labels out of the inputs for its own loss, and an
# evaluation forward without labels returned no reg. It should evaluate: eval_loss = the smoothed loss + lambda * reg.
@pytest.mark.parametrize("how", ["label_smoothing_factor", "compute_loss_func"])
def test_evaluation_with_trainers_own_loss_gets_reg(tmp_path, how):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2, reg_lambda=0.5)
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
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2, reg_lambda=0.5)
    args = OTTrainingArguments(output_dir=str(tmp_path), report_to=[], label_smoothing_factor=0.1)
    trainer = OTTrainer(model=model, args=args)
    batch = {k: torch.tensor(v) for k, v in _lm_data()[:4].items()}
    model.train(mode == "train")
    with torch.no_grad():
        loss = trainer.compute_loss(model, dict(batch))
        out = model(input_ids=batch["input_ids"], output_reg=True)
    expected = _smoothed_loss(out, batch["labels"]) + 0.5 * out.reg
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
