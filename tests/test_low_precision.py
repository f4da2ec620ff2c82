"""bf16 / fp16 models integrate their ODE state in float32 by default (the blocks run in the model's dtype)."""

from __future__ import annotations

import pytest
import torch
from conftest import make_base
from helpers import raises_naming

import hf_ot


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_unit_step_in_low_precision_is_the_base_model_exactly(dtype):
    base = make_base("gpt2", "GPT2Model").to(dtype)
    model = hf_ot.convert(make_base("gpt2", "GPT2Model"), ot_num_steps=1).to(dtype).eval()
    ids = torch.randint(4, 99, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = model(ids).last_hidden_state
        assert got.dtype == dtype
        assert torch.equal(got, base(ids).last_hidden_state)


def test_float32_state_keeps_small_increments_at_large_m():
    """Reference: the fp32 model. With the state in bf16, increments dt * f round away at M=128."""
    model = hf_ot.convert(make_base("gpt2", "GPT2Model"), ot_num_steps=128).eval()
    ids = torch.randint(4, 99, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        x0, ref = model(ids, output_hidden_states=[0, -1]).hidden_states[::128]
        model.to(torch.bfloat16)
        errors = {}
        for state in ("float32", "model"):
            model.config.ot_state_dtype = state
            out = model(ids, output_hidden_states=[0, -1]).hidden_states[-1]
            errors[state] = (out.float() - ref).abs().max().item() / (ref - x0).abs().max().item()
    assert errors["float32"] < 0.05
    assert errors["float32"] * 3 < errors["model"]


def test_state_dtype_is_checked():
    with raises_naming(ValueError, "ot_state_dtype", "['float32', 'model']"):
        hf_ot.convert(make_base("gpt2", "GPT2Model")).config.__class__(ot_state_dtype="float16")
