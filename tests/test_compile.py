"""Compiled OT models give the eager model's outputs and gradients; regional compilation never recompiles for M or
the solver. The compiler here is dynamo + AOT autograd ('aot_eager'): it traces and differentiates exactly what
inductor would compile, in seconds (benchmarks/compile.py runs inductor and checks its losses against eager too).
Tolerances: 1e-5 absolute on logits, reg, loss and every gradient (fp32; the same kernels run in another order)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import base_config
from torch._dynamo.testing import CompileCounterWithBackend
from transformers import GPT2LMHeadModel

import hf_ot

pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # every test counts graphs from zero

ATOL = 1e-5


def ot_gpt2(**settings):
    torch.manual_seed(0)
    model = hf_ot.convert(GPT2LMHeadModel(base_config("gpt2")), **{"ot_num_steps": 2, **settings})
    return model.train()


def train_step(model, ids):
    model.zero_grad(set_to_none=True)
    out = model(ids, labels=ids)
    (out.loss + 0.5 * out.reg).backward()
    # torch.compile(model) wraps the model: its parameter names gain an `_orig_mod.` prefix
    grads = {
        name.removeprefix("_orig_mod."): p.grad.clone() for name, p in model.named_parameters() if p.grad is not None
    }
    return out, grads


def assert_same_step(compiled, eager, ids):
    out_c, grads_c = train_step(compiled, ids)
    out_e, grads_e = train_step(eager, ids)
    torch.testing.assert_close(out_c.logits, out_e.logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(out_c.reg, out_e.reg, atol=ATOL, rtol=0)
    torch.testing.assert_close(out_c.loss, out_e.loss, atol=ATOL, rtol=0)
    assert grads_c.keys() == grads_e.keys() and grads_e
    for name in grads_e:
        torch.testing.assert_close(grads_c[name], grads_e[name], atol=ATOL, rtol=0, msg=name)


@pytest.mark.parametrize("mode", ["residual", "paper"])
def test_regional_compile_equals_eager_and_changing_m_or_solver_does_not_recompile(mode):
    model = ot_gpt2(ot_mode=mode)
    eager = copy.deepcopy(model)
    counter = CompileCounterWithBackend("aot_eager")
    assert hf_ot.compile(model, backend=counter) is model
    ids = torch.randint(3, 99, (2, 12), generator=torch.Generator().manual_seed(0))

    assert_same_step(model, eager, ids)
    assert counter.frame_count == 1  # one graph serves both blocks (and every application of them)
    for steps, solver in [(3, "euler"), (2, "heun"), (1, "rk4"), (5, "euler")]:
        for m in (model, eager):
            m.config.ot_num_steps, m.config.ot_solver = steps, solver
        assert_same_step(model, eager, ids)
    assert counter.frame_count == 1  # no recompile for any M or solver


def test_whole_model_torch_compile_equals_eager():
    model = ot_gpt2(ot_num_steps=3, ot_solver="heun")
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="aot_eager")
    ids = torch.randint(3, 99, (2, 12), generator=torch.Generator().manual_seed(1))
    assert_same_step(compiled, eager, ids)


def test_regionally_compiled_model_generates_like_eager_without_compiling_cached_calls():
    model = ot_gpt2(ot_num_steps=3).eval()
    eager = copy.deepcopy(model)
    counter = CompileCounterWithBackend("aot_eager")
    hf_ot.compile(model, backend=counter)
    ids = torch.randint(3, 99, (1, 6), generator=torch.Generator().manual_seed(2))
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        assert torch.equal(model.generate(ids, **kwargs), eager.generate(ids, **kwargs))
    # Every block call carried the KV cache (one slot per application): it ran eager, nothing was compiled.
    assert counter.frame_count == 0


def test_training_forward_builds_no_kv_cache_unless_asked():
    model = ot_gpt2(ot_num_steps=3)
    ids = torch.randint(3, 99, (2, 8), generator=torch.Generator().manual_seed(3))
    out = model(ids, labels=ids)
    assert out.cache is None  # transformers' default (config.use_cache) would fill M x L slots nobody reads
    asked = model(ids, labels=ids, use_cache=True)
    assert asked.cache is not None and asked.cache.get_seq_length() == 8
    torch.testing.assert_close(out.logits, asked.logits, atol=1e-6, rtol=0)
    with torch.no_grad():
        assert model.eval()(ids).cache is not None  # inference keeps the base model's default


def test_eval_forward_without_a_cache_runs_compiled():
    """In eval mode transformers' decoders build a KV cache by default, which sends every block call to the eager
    path (README); with use_cache=False the compiled blocks run, and give the eager loss."""
    model = ot_gpt2(ot_num_steps=3).eval()
    eager = copy.deepcopy(model)
    ids = torch.randint(3, 99, (2, 8), generator=torch.Generator().manual_seed(4))
    counter = CompileCounterWithBackend("aot_eager")
    hf_ot.compile(model, backend=counter)
    with torch.no_grad():
        model(ids, labels=ids)
        assert counter.frame_count == 0  # the default cache: eager
        compiled = model(ids, labels=ids, use_cache=False)
        assert counter.frame_count == 1
        torch.testing.assert_close(compiled.loss, eager(ids, labels=ids).loss, atol=1e-6, rtol=0)


def test_compile_refuses_a_model_without_flows():
    with pytest.raises(ValueError, match="hf_ot.convert"):
        hf_ot.compile(GPT2LMHeadModel(base_config("gpt2")))
