"""A training batch whose labels are all -100 has a NaN loss by construction; the
error names that cause (a data problem), not divergence and a learning rate to lower."""

import pytest
import torch
from conftest import make_base
from datasets import Dataset

import hf_ot
from hf_ot.training import OTTrainer, OTTrainingArguments, TrainingDiverged


def test_a_batch_without_targets_is_named_not_called_divergence(tmp_path):
    ids = torch.randint(4, 99, (4, 10), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[2] = -100  # the third example has nothing to predict (truncated away, say)
    ds = Dataset.from_dict({"input_ids": ids.tolist(), "labels": labels.tolist()})
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2)
    args = OTTrainingArguments(
        output_dir=str(tmp_path),
        report_to="none",
        use_cpu=True,
        seed=0,
        max_steps=4,
        per_device_train_batch_size=1,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = OTTrainer(model=model, args=args, train_dataset=ds)
    trainer._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(ds)  # the order above
    with pytest.raises(ValueError, match=r"step 3 has no target to predict: every label is -100") as err:
        trainer.train()
    assert not isinstance(err.value, TrainingDiverged)
    assert "learning rate is fine" in str(err.value) and "lower the learning rate" not in str(err.value)
    assert trainer.state.global_step == 2  # the step was not applied
