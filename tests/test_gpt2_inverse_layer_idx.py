"""GPT-2's `scale_attn_by_inverse_layer_idx=True`: each block scales its attention by 1 / (l + 1) of its own fixed
index l, in every field evaluation (the KV cache is routed by views, no `layer_idx` is rewritten)."""

from __future__ import annotations

import torch
from conftest import make_base

import hf_ot


def test_m1_equals_the_base_model_with_the_flag():
    base = make_base("gpt2", "GPT2LMHeadModel", scale_attn_by_inverse_layer_idx=True)
    plain = make_base("gpt2", "GPT2LMHeadModel")  # the same weights: the flag changes the outputs
    model = hf_ot.convert(base).eval()
    assert model.config.scale_attn_by_inverse_layer_idx is True
    ids = torch.randint(4, 99, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = base(ids).logits
        torch.testing.assert_close(model(ids).logits, want, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(plain(ids).logits, want, atol=1e-4)


def test_cached_greedy_generation_equals_uncached_at_m3_rk4():
    base = make_base("gpt2", "GPT2LMHeadModel", scale_attn_by_inverse_layer_idx=True)
    model = hf_ot.convert(base, num_steps=3, solver="rk4").eval()
    ids = torch.randint(4, 99, (1, 5), generator=torch.Generator().manual_seed(1))
    kwargs = dict(attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        cached = model.generate(ids, use_cache=True, **kwargs)
        uncached = model.generate(ids, use_cache=False, **kwargs)
    assert torch.equal(cached, uncached)
    # and the flag is used in the flow: the same weights without it give other logits
    plain = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=3, solver="rk4").eval()
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, plain(ids).logits, atol=1e-4)
