"""Defects a probe of the commands on a user's own data found, whose fix belongs in a module another change is
rewriting: each test is xfail(strict) until that fix lands (then it passes and the marker must go)."""

import pickle

import pytest

from hf_ot.recipes.config import load_config


@pytest.mark.xfail(strict=True, reason="recipes/run.py: a baseline's TrainingArguments are transformers' own")
def test_a_baselines_pickled_training_arguments_hold_no_token(tmp_path):
    # Trainer pickles its arguments into training_args.bin in every checkpoint; push_to_hub uploads them
    from hf_ot.recipes.run import training_arguments

    cfg = load_config("quickstart", ["model.ot=null", "training.hub_token=hf_secretSecret123"])
    args = training_arguments(cfg, str(tmp_path), is_ot=False)
    assert args.hub_token == "hf_secretSecret123"  # kept for the upload itself
    assert b"hf_secretSecret123" not in pickle.dumps(args)
