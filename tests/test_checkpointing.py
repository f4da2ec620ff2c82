"""Depth-step gradient checkpointing (config.ot_checkpoint_steps): the same outputs and gradients as without it
(reference: the uncheckpointed forward and backward), one hidden state kept per solver step, clear errors.
Tolerance: 1e-6 absolute (the recompute runs the same kernels on the same inputs; dropout masks are replayed)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import base_config
from helpers import raises_naming
from torch.profiler import ProfilerActivity, profile
from transformers import GPT2LMHeadModel

import hf_ot

ATOL = 1e-6


def train_step(model, seed, **inputs):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the same dropout masks for both models
    out = model(**inputs)
    (out.loss + 0.7 * out.reg).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return out, grads


def assert_same_training_step(model, **inputs):
    checkpointed = copy.deepcopy(model)
    checkpointed.config.ot_checkpoint_steps = True
    out_c, grads_c = train_step(checkpointed.train(), 0, **inputs)
    out_r, grads_r = train_step(model.train(), 0, **inputs)
    torch.testing.assert_close(out_c.logits, out_r.logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(out_c.reg, out_r.reg, atol=ATOL, rtol=0)
    assert grads_c.keys() == grads_r.keys() and grads_r
    for name in grads_r:
        torch.testing.assert_close(grads_c[name], grads_r[name], atol=ATOL, rtol=0, msg=name)


@pytest.mark.parametrize("mode,solver", [("residual", "euler"), ("paper", "rk4"), ("residual", "heun")])
def test_step_checkpointing_gives_the_same_gradients_with_dropout(mode, solver):
    cfg = base_config("gpt2", resid_pdrop=0.1, attn_pdrop=0.1, embd_pdrop=0.1)
    torch.manual_seed(0)
    model = hf_ot.convert(GPT2LMHeadModel(cfg), ot_num_steps=3, ot_solver=solver, ot_mode=mode)
    ids = torch.randint(3, 99, (2, 10), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # padding: reg counts valid positions only
    assert_same_training_step(model, input_ids=ids, attention_mask=mask, labels=ids)


def test_step_checkpointing_t5_threads_position_biases_through_the_recompute(converted):
    _, model = converted("t5", "T5ForConditionalGeneration", ot_num_steps=2, ot_solver="heun")
    src = torch.randint(3, 99, (2, 7), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(3, 99, (2, 5), generator=torch.Generator().manual_seed(2))
    assert_same_training_step(model, input_ids=src, labels=tgt)


def held_after_forward(model, ids) -> int:
    """Bytes allocated during a training forward and still held when it returns (activations kept for backward,
    outputs): the allocator's own count, exact."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = model(ids, labels=ids)
    held = sum(event.self_cpu_memory_usage for event in prof.key_averages())
    (out.loss + out.reg).backward()
    return held


def growth_per_step_in_states(ids, width, **options) -> float:
    held = {}
    for steps in (2, 6):
        torch.manual_seed(0)
        cfg = base_config("gpt2", n_embd=width, n_inner=4 * width)
        model = hf_ot.convert(GPT2LMHeadModel(cfg), ot_num_steps=steps, ot_terminal_time=float(steps)).train()
        if options.get("blocks"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.ot_checkpoint_steps = options.get("steps", False)
        held[steps] = held_after_forward(model, ids)
    return (held[6] - held[2]) / 4 / (ids.numel() * width * 4)


def test_step_checkpointing_keeps_about_one_hidden_state_per_step():
    ids = torch.randint(3, 99, (4, 32), generator=torch.Generator().manual_seed(3))
    steps = growth_per_step_in_states(ids, 64, steps=True)
    blocks = growth_per_step_in_states(ids, 64, blocks=True)
    assert 0.9 <= steps <= 1.5  # the step's input state (the reg term is recomputed with the step)
    assert blocks >= 2.5  # block checkpointing: L = 2 block inputs + the state reg reads


def test_step_checkpointing_refuses_block_checkpointing_and_a_training_cache():
    torch.manual_seed(0)
    model = hf_ot.convert(GPT2LMHeadModel(base_config("gpt2")), ot_num_steps=2).train()
    model.config.ot_checkpoint_steps = True
    ids = torch.randint(3, 99, (1, 6))
    with pytest.raises(ValueError, match="use_cache=False"):
        model(ids, labels=ids, use_cache=True)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    with pytest.raises(ValueError, match="gradient_checkpointing_disable"):
        model(ids, labels=ids)
    with torch.no_grad():  # nothing is recomputed without a backward: inference runs as usual
        model.eval()(ids)


def test_step_checkpointing_setting_is_checked():
    with raises_naming(ValueError, "ot_checkpoint_steps", "True or False"):
        hf_ot.OTGPT2Config(ot_checkpoint_steps="yes")
