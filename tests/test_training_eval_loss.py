"""OTTrainer's evaluation loss: eval_task_loss is the mean token NLL over the whole evaluation set
(each batch weighs by its counted targets: a causal LM's shifted labels other than -100, a seq2seq model's labels
other than -100, a classifier's examples), so exp(eval_task_loss), the recipes' eval_perplexity, is exp(mean token
NLL) as run_clm and lm-evaluation-harness report it. OTTrainingArguments defaults DDP's find_unused_parameters to
False (no warning on every launched run)."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import make_base

import hf_ot

pytest.importorskip("datasets")
pytest.importorskip("accelerate")

# per example: how many label positions are kept (the rest are -100); batches of 2 -> [8, 1], [8, 8], [2]
KEPT = [8, 1, 8, 8, 2]
LENGTH = 8


def _evaluate(model, rows, args_cls=None):
    from datasets import Dataset

    args_cls = args_cls or hf_ot.OTTrainingArguments
    trainer_cls = hf_ot.OTSeq2SeqTrainer if args_cls is hf_ot.OTSeq2SeqTrainingArguments else hf_ot.OTTrainer
    trainer = trainer_cls(
        model=model,
        eval_dataset=Dataset.from_dict(rows),
        args=args_cls(
            output_dir="unused",
            per_device_eval_batch_size=2,
            report_to="none",
            use_cpu=True,
            disable_tqdm=True,
        ),
    )
    return trainer.evaluate()


def _labels(ids):
    labels = ids.clone()
    for row, kept in enumerate(KEPT):
        labels[row, kept:] = -100
    return labels


def _check(metrics, token_nlls, batch_means):
    mean_nll = sum(n.sum().item() for n in token_nlls) / sum(n.numel() for n in token_nlls)
    assert metrics["eval_task_loss"] == pytest.approx(mean_nll, abs=2e-6)
    assert math.exp(metrics["eval_task_loss"]) == pytest.approx(math.exp(mean_nll), rel=1e-5)  # eval_perplexity
    equal_weights = sum(batch_means) / len(batch_means)  # what it was: a mean of per-batch means
    assert abs(equal_weights - mean_nll) > 1e-3  # the batches differ enough for the test to tell the two apart


def _batch_means(token_nlls):
    batches = [token_nlls[i : i + 2] for i in range(0, len(token_nlls), 2)]
    return [torch.cat(b).mean().item() for b in batches]


def test_causal_lm_eval_task_loss_is_the_mean_token_nll():
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2).eval()
    ids = torch.randint(4, 99, (len(KEPT), LENGTH), generator=torch.Generator().manual_seed(0))
    labels = _labels(ids)
    metrics = _evaluate(model, {"input_ids": ids.tolist(), "labels": labels.tolist()})
    token_nlls = []
    with torch.no_grad():
        for row in range(len(KEPT)):
            logits = model(input_ids=ids[row : row + 1]).logits[0, :-1]
            target = labels[row, 1:]  # shifted, as the causal LM's loss does
            keep = target != -100
            token_nlls.append(F.cross_entropy(logits[keep], target[keep], reduction="none"))
    _check(metrics, token_nlls, _batch_means(token_nlls))


def test_seq2seq_eval_task_loss_is_the_mean_token_nll():
    model = hf_ot.convert(make_base("t5", "T5ForConditionalGeneration"), ot_num_steps=2).eval()
    g = torch.Generator().manual_seed(1)
    source = torch.randint(4, 99, (len(KEPT), 6), generator=g)
    target = torch.randint(4, 99, (len(KEPT), LENGTH), generator=g)
    labels = _labels(target)
    metrics = _evaluate(
        model,
        {"input_ids": source.tolist(), "labels": labels.tolist()},
        args_cls=hf_ot.OTSeq2SeqTrainingArguments,
    )
    token_nlls = []
    with torch.no_grad():
        for row in range(len(KEPT)):
            logits = model(input_ids=source[row : row + 1], labels=labels[row : row + 1]).logits[0]
            keep = labels[row] != -100  # not shifted: the decoder input is the shifted labels
            token_nlls.append(F.cross_entropy(logits[keep], labels[row][keep], reduction="none"))
    _check(metrics, token_nlls, _batch_means(token_nlls))


def test_classification_eval_task_loss_weighs_examples_equally():
    model = hf_ot.convert(make_base("bert", "BertForSequenceClassification", num_labels=3), ot_num_steps=2).eval()
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(4, 99, (5, 6), generator=g)
    labels = torch.tensor([0, 1, 2, 1, 0])
    metrics = _evaluate(model, {"input_ids": ids.tolist(), "labels": labels.tolist()})
    with torch.no_grad():
        nll = F.cross_entropy(model(input_ids=ids).logits, labels, reduction="none")
    assert metrics["eval_task_loss"] == pytest.approx(nll.mean().item(), abs=2e-6)  # batches [2, 2, 1]: by example


@pytest.mark.parametrize("args_cls", ["OTTrainingArguments", "OTSeq2SeqTrainingArguments"])
def test_ddp_find_unused_parameters_defaults_to_false(args_cls):
    cls = getattr(hf_ot, args_cls)
    assert cls(output_dir="unused", use_cpu=True).ddp_find_unused_parameters is False
    assert cls(output_dir="unused", use_cpu=True, ddp_find_unused_parameters=True).ddp_find_unused_parameters is True
    from transformers import HfArgumentParser

    (parsed,) = HfArgumentParser(cls).parse_args_into_dataclasses(["--output_dir", "unused", "--use_cpu"])
    assert parsed.ddp_find_unused_parameters is False
