"""Saved OT models reload identically (own class and Auto classes); cached decoding equals full recompute."""

import inspect
import itertools

import pytest
import torch
from conftest import (
    DECODER_LM_HEADS,
    HEADS,
    SEQ2SEQ_LM_HEADS,
    inputs_for,
    is_encoder_decoder,
    main_output,
    make_base,
    make_inputs,
)
from helpers import raises_naming
from transformers import AutoConfig, AutoModel, DynamicCache, EncoderDecoderCache, GPT2LMHeadModel

import hf_ot
from hf_ot.registry import TASK_AUTO_CLASSES, family_of

pytestmark = pytest.mark.core  # the model, cache and generation tests: CI runs them on the oldest transformers too


@pytest.mark.parametrize("family,class_name", HEADS)
def test_save_and_reload_identical(tmp_path, family, class_name):
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=2, ot_solver="heun", ot_mode="paper").eval()
    model.save_pretrained(tmp_path)
    inputs = inputs_for(family, class_name, pad_last=1)
    again = type(model).from_pretrained(tmp_path).eval()
    assert AutoConfig.from_pretrained(tmp_path).model_type == model.config.model_type
    task = next((t for t, c in family_of(family).tasks.items() if c is type(model)), None)
    by_auto = TASK_AUTO_CLASSES[task].from_pretrained(tmp_path).eval() if task else again
    assert type(by_auto) is type(model)
    with torch.no_grad():
        ref = model(**inputs, output_reg=True)
        for other in (again, by_auto):
            out = other(**inputs, output_reg=True)
            assert torch.equal(main_output(out), main_output(ref))
            assert torch.equal(out.reg, ref.reg)


CACHE_GRID = list(itertools.product([1, 2, 4], ["euler", "heun", "rk4"], ["residual", "paper"]))
# every further family: M in {1, 3} x {euler, rk4}, and paper mode once
SMALL_GRID = list(itertools.product([1, 3], ["euler", "rk4"], ["residual"])) + [(3, "rk4", "paper")]
GENERATIVE_HEADS = DECODER_LM_HEADS + SEQ2SEQ_LM_HEADS
CACHE_CASES = [
    (f, c, *g) for f, c in GENERATIVE_HEADS for g in (CACHE_GRID if f in ("gpt2", "t5", "bart") else SMALL_GRID)
]


# the cache's name (argument and output field) in the installed transformers: past_key_values at 5.17, cache in the
# newest 5.x
CACHE_NAME = "cache" if "cache" in inspect.signature(GPT2LMHeadModel.forward).parameters else "past_key_values"


def _incremental_logits(model, prefix_kwargs, ids_key, ids, n_prefix):
    """Logits of positions n_prefix-1.. computed with the cache: the prefix at once, then one token at a time."""
    cache = None
    steps = []
    for t in range(n_prefix, ids.shape[1] + 1):
        chunk = ids[:, :t] if cache is None else ids[:, t - 1 : t]
        out = model(**prefix_kwargs, **{ids_key: chunk, CACHE_NAME: cache}, use_cache=True)
        cache = getattr(out, CACHE_NAME)
        steps.append(out.logits[:, -1])
    return torch.stack(steps, 1), cache


@pytest.mark.parametrize("family,class_name,steps,solver,mode", CACHE_CASES)
def test_cached_decoding_equals_full_recompute(family, class_name, steps, solver, mode):
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=steps, ot_solver=solver, ot_mode=mode).eval()
    g = torch.Generator().manual_seed(0)
    if not is_encoder_decoder(family):
        ids = torch.randint(4, 99, (2, 8), generator=g)
        fixed, key = {}, "input_ids"
    else:
        src = torch.randint(4, 99, (2, 7), generator=g)
        with torch.no_grad():
            enc = model.get_encoder()(input_ids=src)
        ids = torch.randint(4, 99, (2, 6), generator=g)
        fixed, key = {"encoder_outputs": enc}, "decoder_input_ids"
    with torch.no_grad():
        full = model(**fixed, **{key: ids}, use_cache=False).logits
        inc, cache = _incremental_logits(model, fixed, key, ids, 3)
    assert (inc - full[:, 2:]).abs().max().item() <= 1e-5
    # one self-attention slot per (step, stage, layer); cross-attention K/V once per layer
    evaluations = steps * len(hf_ot.SOLVERS[solver][1])
    layers = model.config.ot_decoder_layers()
    self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
    filled = [layer for layer in self_cache.layers if layer.get_seq_length() > 0]
    assert len(filled) == evaluations * layers
    if isinstance(cache, EncoderDecoderCache):
        # sized to what is used: L layers shared by every field evaluation, all of them filled
        assert len(cache.cross_attention_cache.layers) == layers
        assert all(layer.get_seq_length() > 0 for layer in cache.cross_attention_cache.layers)
    # the config is itself (transformers' callers write through get_text_config); the unrolled copy sizes caches
    if not model.config.is_encoder_decoder:  # (T5's own config answers with a decoder copy)
        assert model.config.get_text_config(decoder=True) is model.config
    assert len(DynamicCache(config=model.config.ot_cache_config()).layers) == evaluations * layers


@pytest.mark.parametrize(
    "family,class_name",
    [("llama", "LlamaForCausalLM"), ("gpt2", "GPT2LMHeadModel"), ("t5", "T5ForConditionalGeneration")],
)
@pytest.mark.parametrize(
    "change",
    [("ot_num_steps", 2), ("ot_num_steps", 4), ("ot_solver", "heun"), ("ot_terminal_time", 0.5), ("ot_mode", "paper")],
)
def test_a_cache_filled_under_other_settings_is_refused_untouched(family, class_name, change):
    """A cache filled at M=3 Euler continued after a change of M, solver, T or mode would read keys/values of other
    depth times (fewer slots: wrong logits; more: missing slots). It is refused with the fix, and left as it was:
    back at the old settings it continues, equal to a full recompute."""
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=3, ot_solver="euler").eval()
    g = torch.Generator().manual_seed(0)
    fixed, key = {}, "input_ids"
    if is_encoder_decoder(family):
        with torch.no_grad():
            fixed = {"encoder_outputs": model.get_encoder()(input_ids=torch.randint(4, 99, (2, 7), generator=g))}
        key = "decoder_input_ids"
    ids = torch.randint(4, 99, (2, 6), generator=g)
    with torch.no_grad():
        cache = getattr(model(**fixed, **{key: ids[:, :5]}, use_cache=True), CACHE_NAME)
        length = cache.get_seq_length()
        setattr(model.config, *change)
        with raises_naming(ValueError, "KV cache", "new cache"):
            model(**fixed, **{key: ids[:, 5:], CACHE_NAME: cache}, use_cache=True)
        assert cache.get_seq_length() == length
        setattr(
            model.config,
            change[0],
            {"ot_num_steps": 3, "ot_solver": "euler", "ot_terminal_time": 1.0, "ot_mode": "residual"}[change[0]],
        )
        last = model(**fixed, **{key: ids[:, 5:], CACHE_NAME: cache}, use_cache=True).logits[:, -1]
        full = model(**fixed, **{key: ids}, use_cache=False).logits[:, -1]
        assert (last - full).abs().max().item() <= 1e-5
        # a new cache under the new settings is fine
        setattr(model.config, *change)
        fresh = getattr(model(**fixed, **{key: ids[:, :5]}, use_cache=True), CACHE_NAME)
        last = model(**fixed, **{key: ids[:, 5:], CACHE_NAME: fresh}, use_cache=True).logits[:, -1]
        assert (last - model(**fixed, **{key: ids}, use_cache=False).logits[:, -1]).abs().max().item() <= 1e-5


def test_a_cache_filled_by_a_compiled_model_is_tagged_and_checked_later():
    """Under torch.compile the settings are only recorded (a static cache's length is a tensor); an eager forward
    that continues that cache under other settings is refused."""
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2).eval()
    ids = torch.randint(4, 99, (1, 6), generator=torch.Generator().manual_seed(0))
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad():
        cache = getattr(compiled(ids[:, :5], use_cache=True), CACHE_NAME)
        assert cache._ot_settings == (2, 1.0, "euler", False)
        model.config.ot_num_steps = 1
        with raises_naming(ValueError, "KV cache", "M=2"):
            model(ids[:, 5:], **{CACHE_NAME: cache}, use_cache=True)


@pytest.mark.parametrize("family,class_name", GENERATIVE_HEADS)
@pytest.mark.parametrize("solver", ["euler", "rk4"])
def test_generate_cached_equals_uncached(family, class_name, solver):
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=3, ot_solver=solver).eval()
    inputs = make_inputs(family, batch=3, pad_last=0)
    inputs.pop("decoder_input_ids", None)
    if not is_encoder_decoder(family):  # left padding for decoder-only models
        inputs["input_ids"][0, :2] = 0
        inputs["attention_mask"][0, :2] = 0
    common = dict(max_new_tokens=6, min_new_tokens=6, pad_token_id=0)
    for extra in ({"do_sample": False}, {"num_beams": 3, "do_sample": False}):
        a = model.generate(**inputs, **common, **extra, use_cache=True)
        b = model.generate(**inputs, **common, **extra, use_cache=False)
        assert torch.equal(a, b)
    torch.manual_seed(5)
    a = model.generate(**inputs, **common, do_sample=True, top_k=20)
    torch.manual_seed(5)
    b = model.generate(**inputs, **common, do_sample=True, top_k=20, use_cache=False)
    assert torch.equal(a, b)


def test_auto_model_after_import(tmp_path):
    model = hf_ot.convert(make_base("bert", "BertModel"), ot_num_steps=2)
    model.save_pretrained(tmp_path)
    assert type(AutoModel.from_pretrained(tmp_path)).__name__ == "OTBertModel"


@pytest.mark.parametrize("family,class_name", [("gpt2", "GPT2LMHeadModel"), ("bart", "BartForConditionalGeneration")])
def test_generate_stops_at_eos_and_pads(family, class_name):
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=2, ot_solver="heun").eval()
    inputs = make_inputs(family, batch=3)
    inputs.pop("decoder_input_ids", None)
    model.generation_config.eos_token_id = None  # a free run: no end of sequence at all
    free = model.generate(**inputs, max_new_tokens=6, do_sample=False, pad_token_id=0)
    start = inputs["input_ids"].shape[1] if family == "gpt2" else 1
    eos = int(free[0, start + 1])  # row 0 emits this token as its 2nd new token: make it the end of sequence
    outs = [
        model.generate(
            **inputs, max_new_tokens=6, do_sample=False, eos_token_id=eos, pad_token_id=0, use_cache=use_cache
        )
        for use_cache in (True, False)
    ]
    assert torch.equal(outs[0], outs[1])
    row = outs[0][0, start:].tolist()
    assert eos in row and all(t == 0 for t in row[row.index(eos) + 1 :])  # padded after its end


@pytest.mark.parametrize("family,class_name", DECODER_LM_HEADS + SEQ2SEQ_LM_HEADS)
def test_a_standalone_decoder_stack_honours_the_callers_cache_under_either_keyword(family, class_name):
    """model.get_decoder()(ids, past_key_values=past): the caller's cache read as the base class reads it (the
    deprecated keyword of `cache`), equal to the full recompute, with the base's warning."""
    import warnings

    base = make_base(family, class_name).eval()
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=2, ot_solver="heun").eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 99, (2, 6), generator=g)
    for owner in (base, model):
        decoder = owner.get_decoder()
        fixed = {}
        if is_encoder_decoder(family):
            with torch.no_grad():
                fixed = {"encoder_hidden_states": owner.get_encoder()(torch.randint(4, 99, (2, 5), generator=g))[0]}
        names = inspect.signature(decoder.forward).parameters
        for keyword in sorted({"past_key_values"} | {"cache"} & set(names)):
            with torch.no_grad(), warnings.catch_warnings(record=True) as warned:
                warnings.simplefilter("always")
                full = decoder(input_ids=ids, use_cache=False, **fixed)[0]
                out = decoder(input_ids=ids[:, :4], use_cache=True, **fixed)
                past = getattr(out, CACHE_NAME)
                step = decoder(input_ids=ids[:, 4:], use_cache=True, **fixed, **{keyword: past})[0]
            assert (step - full[:, 4:]).abs().max().item() <= 1e-5, (type(decoder).__name__, keyword)
            if keyword not in names:  # the deprecated keyword: warned as the base class warns
                assert any(issubclass(w.category, FutureWarning) and keyword in str(w.message) for w in warned)
