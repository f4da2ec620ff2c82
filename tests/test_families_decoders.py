"""What is specific to the Llama-style, GPT-NeoX and OPT decoder-only families.

The shared tests (equivalence, contracts, save/cache/generation, hub, PEFT) cover these families through HEADS in
tests/tiny_decoders.py; here: conversion paths, multi-step and paper-mode outputs against the base model, and
sliding-window layers, whose KV cache must keep each slot's layer type and stay right past the window.
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from conftest import base_config, make_base, make_inputs
from tiny_decoders import HEADS, WINDOW
from transformers import DynamicCache, LlamaForCausalLM

import hf_ot

pytestmark = pytest.mark.core  # the model, cache and generation tests: CI runs them on the oldest transformers too

CAUSAL_LM = [(f, c) for f, c in HEADS if c.endswith("ForCausalLM")]
BASE_MODELS = [(f, c) for f, c in HEADS if c.endswith("Model")]
SLIDING = [(f, c) for f, c in CAUSAL_LM if getattr(base_config(f), "sliding_window", None)]
# the cache's name (argument and output field) in the installed transformers: past_key_values at 5.17, cache in the
# newest 5.x
_NEW_CACHE_NAME = "cache" in inspect.signature(LlamaForCausalLM.forward).parameters


@pytest.mark.parametrize("family,class_name", HEADS)
def test_converts_from_folder_and_model_picking_the_class(tmp_path, family, class_name):
    base = make_base(family, class_name)
    base.save_pretrained(tmp_path)
    inputs = make_inputs(family, pad_last=2)
    with torch.no_grad():
        expected = base(**inputs)[0]
    for source in (str(tmp_path), base):
        model = hf_ot.convert(source).eval()
        assert type(model).__name__ == "OT" + class_name  # from config.architectures / the loaded class
        assert model.ot_loading_info == {"missing_keys": [], "unexpected_keys": []}
        with torch.no_grad():
            assert (model(**inputs)[0] - expected).abs().max().item() <= 1e-5


@pytest.mark.parametrize("family,class_name", CAUSAL_LM)
def test_residual_euler_with_unit_steps_is_the_unrolled_base(family, class_name):
    # dt = 1: X_{k+1} = X_k + (S(X_k) - X_k) = S(X_k), so M steps are the base stack applied M times: a base model
    # with M x L layers (the same weights, the same layer types) is the reference, with padding and sliding windows.
    steps = 2
    base = make_base(family, class_name)
    layers = base.config.num_hidden_layers
    unrolled_config = base_config(family, num_hidden_layers=steps * layers)
    if getattr(base.config, "layer_types", None) is not None:
        unrolled_config.layer_types = list(base.config.layer_types) * steps
    unrolled = type(base)(unrolled_config).eval()
    state = {}
    for name, value in base.state_dict().items():
        match = re.search(r"\.layers\.(\d+)\.", name)
        if match is None:
            state[name] = value
            continue
        for k in range(steps):  # block l is also block k * L + l
            state[name.replace(match.group(0), f".layers.{k * layers + int(match.group(1))}.")] = value
    assert unrolled.load_state_dict(state, strict=True)
    model = hf_ot.convert(base, ot_num_steps=steps, ot_terminal_time=float(steps)).eval()
    inputs = make_inputs(family, pad_last=2, src_len=11)
    with torch.no_grad():
        expected = unrolled(**inputs).logits
        out = model(**inputs).logits
    assert (out - expected).abs().max().item() <= 1e-5


@pytest.mark.parametrize("family,class_name", BASE_MODELS)
def test_paper_mode_has_the_final_norm_inside_the_field(family, class_name):
    # paper, M = T = 1: X(1) = X0 + norm(S(X0)), and the stack's own norm after the loop is not applied again;
    # the base model gives X0 (hidden_states[0]) and norm(S(X0)) (last_hidden_state).
    base = make_base(family, class_name)
    model = hf_ot.convert(base, ot_mode="paper").eval()
    inputs = make_inputs(family, pad_last=2)
    with torch.no_grad():
        ref = base(**inputs, output_hidden_states=True)
        out = model(**inputs).last_hidden_state
    assert (out - (ref.hidden_states[0] + ref.last_hidden_state)).abs().max().item() <= 1e-5


@pytest.mark.parametrize("family,class_name", BASE_MODELS)
def test_paper_mode_without_layer_norms(family, class_name):
    # block_layer_norms=False removes every norm of the field (RMSNorm, Gemma's RMSNorm, Qwen3's q/k norms,
    # LayerNorm) and the final norm: the reference is the base model with those modules replaced by identities.
    base = make_base(family, class_name)
    model = hf_ot.convert(base, ot_mode="paper", ot_block_layer_norms=False).eval()
    norms = [name for name, m in base.named_modules() if type(m).__name__.endswith(("RMSNorm", "LayerNorm"))]
    assert norms and not set(model.state_dict()) & {f"{n}.weight" for n in norms}
    for name in norms:
        parent, _, child = name.rpartition(".")
        setattr(base.get_submodule(parent), child, torch.nn.Identity())
    inputs = make_inputs(family, pad_last=2)
    with torch.no_grad():
        ref = base(**inputs, output_hidden_states=True)
        out = model(**inputs).last_hidden_state
    assert (out - (ref.hidden_states[0] + ref.last_hidden_state)).abs().max().item() <= 1e-5


@pytest.mark.parametrize("family,class_name", SLIDING)
def test_sliding_window_applies_to_the_test_sequences(family, class_name):
    # The window of the tiny configs is shorter than the test sequences: without it the base model differs, so the
    # equivalence and cache tests exercise the sliding path.
    inputs = make_inputs(family)
    assert inputs["input_ids"].shape[1] > WINDOW
    with torch.no_grad():
        windowed = make_base(family, class_name)(**inputs).logits
        full = make_base(family, class_name, sliding_window=64)(**inputs).logits  # wider than the sequence
    assert (windowed - full).abs().max().item() > 1e-4


@pytest.mark.parametrize("solver", ["euler", "rk4"])
@pytest.mark.parametrize("family,class_name", SLIDING)
def test_unrolled_cache_keeps_each_slot_layer_type(family, class_name, solver):
    # caches are sized from the unrolled config (generate's caches too): slot e * L + l must have block l's type, as the
    # base model's own cache (the reference) gives block l.
    base = make_base(family, class_name)
    model = hf_ot.convert(base, ot_num_steps=3, ot_solver=solver)
    evaluations = 3 * hf_ot.num_stages(solver)
    expected = [type(layer) for layer in DynamicCache(config=base.config).layers] * evaluations
    assert "DynamicSlidingWindowLayer" in {t.__name__ for t in expected}
    assert [type(layer) for layer in DynamicCache(config=model.config.ot_cache_config()).layers] == expected
    text_config = model.config.ot_cache_config()
    assert text_config.num_hidden_layers == evaluations * base.config.num_hidden_layers
    if getattr(base.config, "layer_types", None) is not None:
        assert text_config.layer_types == list(base.config.layer_types) * evaluations
    assert model.config.num_hidden_layers == base.config.num_hidden_layers  # the model's own config is not unrolled


@pytest.mark.parametrize("steps,solver", [(1, "euler"), (3, "rk4")])
@pytest.mark.parametrize("family,class_name", SLIDING)
def test_sliding_window_cache_past_the_window_equals_full_recompute(family, class_name, steps, solver):
    # 14 tokens, window 4: the sliding slots drop old keys many times over; the full-prefix recompute is the reference.
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=steps, ot_solver=solver).eval()
    ids = torch.randint(4, 99, (2, 14), generator=torch.Generator().manual_seed(0))
    cache, logits = None, []
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False).logits
        for t in range(2, ids.shape[1] + 1):
            chunk = ids[:, :t] if cache is None else ids[:, t - 1 : t]
            out = (
                model(input_ids=chunk, cache=cache, use_cache=True)
                if _NEW_CACHE_NAME
                else model(input_ids=chunk, past_key_values=cache, use_cache=True)
            )
            cache = out.cache if _NEW_CACHE_NAME else out.past_key_values
            logits.append(out.logits[:, -1])
    assert (torch.stack(logits, 1) - full[:, 1:]).abs().max().item() <= 1e-4
    sliding = [layer for layer in cache.layers if type(layer).__name__ == "DynamicSlidingWindowLayer"]
    assert sliding and all(layer.keys.shape[-2] < WINDOW for layer in sliding)  # the window really cut the cache


def test_gpt_neox_checkpoint_keys_renamed_as_transformers_does(tmp_path):
    # GPT-NeoX / Pythia checkpoints store the LM head as `embed_out`; transformers renames it to `lm_head` for
    # GPTNeoXForCausalLM, and the OT class must take the same rename (else a random head, reported as missing).
    from safetensors import safe_open

    base = make_base("gpt_neox", "GPTNeoXForCausalLM")
    base.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert "embed_out.weight" in set(f.keys())
    model = hf_ot.convert(str(tmp_path))
    assert model.ot_loading_info == {"missing_keys": [], "unexpected_keys": []}
    assert torch.equal(model.lm_head.weight, base.lm_head.weight)


OPT_350M_STYLE = dict(do_layer_norm_before=False, word_embed_proj_dim=16)  # post-LN, no final norm, project in/out


@pytest.mark.parametrize("mode", ["residual", "paper"])
def test_opt_without_final_norm_and_with_projections(mode):
    base = make_base("opt", "OPTForCausalLM", **OPT_350M_STYLE)
    assert base.model.decoder.final_layer_norm is None and base.model.decoder.project_in is not None
    inputs = make_inputs("opt", pad_last=2)
    model = hf_ot.convert(base, ot_mode=mode).eval()
    decoder = base.model.decoder
    stack_output = []  # S(X0): the last block's output, before project_out
    handle = decoder.layers[-1].register_forward_hook(lambda module, args, output: stack_output.append(output))
    with torch.no_grad():
        ref = decoder(**inputs, output_hidden_states=True)
        handle.remove()
        out = model.model.decoder(**inputs).last_hidden_state
        # residual: the base model; paper with no final norm: f(X) = S(X), so X(1) = X0 + S(X0), then project_out
        expected = (
            ref.last_hidden_state if mode == "residual" else decoder.project_out(ref.hidden_states[0] + stack_output[0])
        )
        assert (out - expected).abs().max().item() <= 1e-5
    model = hf_ot.convert(base, ot_num_steps=3, ot_solver="rk4", ot_mode=mode).eval()
    ids = torch.randint(4, 99, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(input_ids=ids).logits
        out = model(input_ids=ids[:, :5], use_cache=True)
        cache = out.cache if _NEW_CACHE_NAME else out.past_key_values
        steps = []
        for t in range(5, 8):
            out = (
                model(input_ids=ids[:, t : t + 1], cache=cache, use_cache=True)
                if _NEW_CACHE_NAME
                else model(input_ids=ids[:, t : t + 1], past_key_values=cache, use_cache=True)
            )
            steps.append(out.logits[:, -1])
    assert (torch.stack(steps, 1) - full[:, 5:]).abs().max().item() <= 1e-4


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
    model = hf_ot.convert(base, ot_num_steps=3, ot_solver="rk4").eval()
    ids = torch.randint(4, 99, (1, 5), generator=torch.Generator().manual_seed(1))
    kwargs = dict(attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        cached = model.generate(ids, use_cache=True, **kwargs)
        uncached = model.generate(ids, use_cache=False, **kwargs)
    assert torch.equal(cached, uncached)
    # and the flag is used in the flow: the same weights without it give other logits
    plain = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=3, ot_solver="rk4").eval()
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, plain(ids).logits, atol=1e-4)
