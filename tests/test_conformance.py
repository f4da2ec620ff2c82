"""Conformance: the conventions transformers holds its models to, checked on every family and head (conftest.HEADS, so
families added later are covered), at M = 1 (Euler) and at M = 2 with Heun.

Written from transformers' documented behaviour, not with its test mixins. References are independent of the code under
test: the base model (an OT model at M = 1, Euler, residual mode IS the base model), tensor operations that state what a
cache method is documented to do, decoding without a cache, and the state of the model before an operation.
Where an OT model differs by design, the OT behaviour is asserted instead (README: "Differences from the base model
(by design)"): the depth trajectory has M + 1 states per stack and its last state is X(t_M) before the final norm;
attentions are M x stages x L maps; `reg` / `task_loss` fields; reg None in inference without labels unless asked
for; self-attention cache slots M x stages x L and cross-attention cache layers L.

Not repeated here (tests/test_save_and_cache.py has them): plain save / reload through the own and Auto classes, and
greedy / sampling / beam generation with and without the cache.
"""

import copy
import dataclasses
import inspect

import pytest
import torch
import transformers
from conftest import (
    DECODER_LM_HEADS,
    HEADS,
    SEQ2SEQ_LM_HEADS,
    VOCAB,
    inputs_for,
    is_encoder_decoder,
    main_output,
    make_base,
    make_inputs,
)
from transformers.cache_utils import EncoderDecoderCache

import hf_ot

pytestmark = pytest.mark.core  # the model, cache and generation tests: CI runs them on the oldest transformers too

SETTINGS = [pytest.param(1, "euler", id="M1-euler"), pytest.param(2, "heun", id="M2-heun")]
GENERATIVE_HEADS = DECODER_LM_HEADS + SEQ2SEQ_LM_HEADS
CLASSIFIER_HEADS = [(f, c) for f, c in HEADS if c.endswith(("ForSequenceClassification", "ForTokenClassification"))]
ATOL = 1e-5


def evaluations(solver, steps):
    return steps * len(hf_ot.SOLVERS[solver][1])


def eager(model):
    """Eager attention (attention maps are returned) in every sub-model: transformers 5.17's set_attn_implementation
    does not reach the copies of the config T5's stacks hold."""
    model.set_attn_implementation("eager")
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and getattr(config, "_attn_implementation", "eager") != "eager":
            config._attn_implementation = "eager"
    return model


def build(family, class_name, steps, solver, seed=0, **overrides):
    """(base, OT) with eager attention; the OT model has the base model's weights."""
    base = eager(make_base(family, class_name, seed=seed, **overrides))
    model = eager(hf_ot.convert(base, ot_num_steps=steps, ot_solver=solver).eval())
    return base, model


def labels_for(class_name, inputs, num_labels):
    g = torch.Generator().manual_seed(7)
    ids = inputs["input_ids"]
    if class_name.endswith("ForSequenceClassification"):
        return torch.randint(0, num_labels, (ids.shape[0],), generator=g)
    if class_name.endswith("ForTokenClassification"):
        return torch.randint(0, num_labels, ids.shape, generator=g)
    if class_name.endswith(("ForConditionalGeneration", "MTModel")):
        return inputs["decoder_input_ids"]
    if class_name.endswith(("LMHeadModel", "ForCausalLM", "ForMaskedLM")):
        return ids
    return None  # base models and encoders have no loss


def assert_same(got, want, path="output"):
    """Element for element, recursively (tensors exactly: the same computation in the same order on the CPU)."""
    if torch.is_tensor(want):
        assert torch.is_tensor(got) and torch.equal(got, want), path
    elif isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), f"{path}: {len(got)} vs {len(want)}"
        for i, (a, b) in enumerate(zip(got, want)):
            assert_same(a, b, f"{path}[{i}]")
    elif isinstance(want, transformers.Cache):  # two forwards: two caches of the same content
        assert type(got) is type(want), path
        assert_same([kv for layer in _kv(got) for kv in layer], [kv for layer in _kv(want) for kv in layer], path)
    else:
        assert got == want, path


def stacks(model):
    """(role, final norm or None) of every integrated stack of `model`, in forward order of roles."""
    adapter = model.ot_adapter
    found = {}
    for module in model.modules():
        if isinstance(module, adapter.stack_classes):
            flow = module.get_submodule(adapter.layers)
            norm = module.get_submodule(adapter.final_norm) if adapter.final_norm else None
            found[flow.role] = norm
    return found


def hidden_state_fields(output):
    names = [f.name for f in dataclasses.fields(output)]
    if "encoder_last_hidden_state" in names:
        return {"encoder": "encoder_hidden_states", "decoder": "decoder_hidden_states"}
    return {role: "hidden_states" for role in ("encoder", "decoder")}


def attention_fields(output):
    names = {f.name for f in dataclasses.fields(output)}
    fields = [n for n in ("attentions", "encoder_attentions", "decoder_attentions", "cross_attentions") if n in names]
    return [n for n in fields if getattr(output, n) is not None]


# ------------------------------------------------------------------------------------------------------ outputs


@pytest.mark.parametrize("steps,solver", SETTINGS)
@pytest.mark.parametrize("family,class_name", HEADS)
def test_outputs_dict_tuple_hidden_states_and_attentions(family, class_name, steps, solver):
    base, model = build(family, class_name, steps, solver)
    inputs = inputs_for(family, class_name, batch=2, pad_last=1)
    labels = labels_for(class_name, inputs, model.config.num_labels)
    if labels is not None:
        inputs["labels"] = labels
    flags = dict(output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        out = model(**inputs, **flags)
        as_tuple = model(**inputs, **flags, return_dict=False)
        ref = base(**inputs, **flags)

    # reg: returned with labels (and in training or when asked for); None in inference without labels (by design)
    assert (out.reg is not None) == (labels is not None)
    assert out.task_loss is None  # only set when config.ot_reg_in_loss makes loss the OT objective
    # the tuple is the dict's to_tuple(), element for element; its fields are the base output's, in the base
    # order, with reg appended
    assert isinstance(as_tuple, tuple)
    assert_same(as_tuple, out.to_tuple())
    base_keys = [k for k in ref.keys() if not (isinstance(ref[k], tuple) and len(ref[k]) == 0)]
    ot_keys = [k for k in out.keys() if not (isinstance(out[k], tuple) and len(out[k]) == 0)]
    assert ot_keys == base_keys + (["reg"] if labels is not None else [])
    if labels is not None:
        assert as_tuple[0] is not None and as_tuple[0].dim() == 0  # loss first, as documented
        assert torch.equal(as_tuple[-1], out.reg)

    # hidden states: the depth trajectory X(t_0), ..., X(t_M) of each stack (M + 1 states, by design)
    roles = stacks(model)
    fields = hidden_state_fields(out)
    for role, norm in roles.items():
        trajectory, base_states = out[fields[role]], ref[fields[role]]
        assert len(trajectory) == steps + 1
        assert all(state.shape == base_states[0].shape for state in trajectory)
        assert torch.allclose(trajectory[0], base_states[0], atol=ATOL)  # X(0): the stack's input, as the base's
        if steps == 1 and solver == "euler":
            # X(t_M) is the state before the final norm: with the final norm applied it is the base's last state
            last = norm(trajectory[-1]) if norm is not None else trajectory[-1]
            assert torch.allclose(last, base_states[-1], atol=ATOL), role

    # attention maps: M x stages x L per attention kind, each of the base's shape; at M = 1 (Euler) the base's maps
    kinds = attention_fields(ref)
    assert attention_fields(out) == kinds and any(len(ref[name]) for name in kinds)
    for name in kinds:
        maps, base_maps = out[name], ref[name]
        assert len(maps) == evaluations(solver, steps) * len(base_maps), name
        for i, attn in enumerate(maps):
            assert attn.shape == base_maps[i % len(base_maps)].shape
            if steps == 1 and solver == "euler":
                assert torch.allclose(attn, base_maps[i], atol=ATOL), f"{name}[{i}]"
    if steps == 1 and solver == "euler":
        assert torch.allclose(main_output(out), main_output(ref), atol=ATOL)

    # index selection (transformers 5.x: a list or an int captures only those states; None elsewhere)
    with torch.no_grad():
        chosen = model(**inputs, output_hidden_states=[0, -1])
        one = model(**inputs, output_hidden_states=1, return_dict=False)
    for role in roles:
        full = out[fields[role]]
        selected = chosen[fields[role]]
        assert len(selected) == steps + 1
        for i, state in enumerate(selected):
            if i in (0, steps):
                assert torch.equal(state, full[i])
            else:
                assert state is None
    # the tuple with an int selection: the trajectories hold only state 1
    trajectories = [x for x in one if isinstance(x, tuple) and len(x) == steps + 1]
    assert len(trajectories) == len(roles)
    for trajectory in trajectories:
        assert [i for i, s in enumerate(trajectory) if s is not None] == [1]


# ------------------------------------------------------------------------------------------------- save / load


@pytest.mark.parametrize("steps,solver", SETTINGS)
@pytest.mark.parametrize("family,class_name", HEADS)
def test_sharded_safetensors_round_trip(tmp_path, family, class_name, steps, solver):
    _, model = build(family, class_name, steps, solver)
    inputs = inputs_for(family, class_name, batch=2)
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    shards = list(tmp_path.glob("*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "model.safetensors.index.json").exists()
    again = eager(type(model).from_pretrained(tmp_path).eval())  # as saved
    expected, loaded = model.state_dict(), again.state_dict()
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], expected[k]) for k in expected)
    with torch.no_grad():
        assert torch.equal(main_output(again(**inputs)), main_output(model(**inputs)))


# one half-precision dtype per setting (bfloat16 at M = 1, float16 at M = 2), the bound on the largest output error
HALF = [
    pytest.param(1, "euler", torch.bfloat16, 0.05, id="M1-euler-bf16"),
    pytest.param(2, "heun", torch.float16, 0.01, id="M2-heun-fp16"),
]


@pytest.mark.parametrize("steps,solver,dtype,tol", HALF)
@pytest.mark.parametrize("family,class_name", HEADS)
def test_half_precision_round_trip(tmp_path, family, class_name, steps, solver, dtype, tol):
    """from_pretrained(dtype=...): every weight in the dtype the base class loads it in (its keep-in-fp32 modules stay
    fp32), outputs near fp32, and the half-precision model saves and reloads as it is."""
    base, model = build(family, class_name, steps, solver)
    inputs = inputs_for(family, class_name, batch=2)
    model.save_pretrained(tmp_path / "ot")
    base.save_pretrained(tmp_path / "base")
    half = type(model).from_pretrained(tmp_path / "ot", dtype=dtype).eval()
    base_half = type(base).from_pretrained(tmp_path / "base", dtype=dtype)
    assert {k: v.dtype for k, v in half.state_dict().items()} == {k: v.dtype for k, v in base_half.state_dict().items()}
    with torch.no_grad():
        fp32 = main_output(model(**inputs))
        out = half(**inputs, output_reg=True)
    assert torch.isfinite(out.reg)
    assert (main_output(out).float() - fp32).abs().max() <= tol * fp32.abs().max()
    half.save_pretrained(tmp_path / "half")
    reloaded = type(model).from_pretrained(tmp_path / "half").state_dict()
    state = half.state_dict()
    assert reloaded.keys() == state.keys()
    assert all(torch.equal(v, state[k]) and v.dtype == state[k].dtype for k, v in reloaded.items())


@pytest.mark.parametrize("steps,solver", SETTINGS)
@pytest.mark.parametrize("family,class_name", CLASSIFIER_HEADS)
def test_other_head_size_needs_ignore_mismatched_sizes(tmp_path, family, class_name, steps, solver):
    _, model = build(family, class_name, steps, solver)
    saved_labels = model.config.num_labels
    other_labels = saved_labels + 3
    model.save_pretrained(tmp_path)
    cls = type(model)
    # transformers' behaviour: a RuntimeError whose fix is ignore_mismatched_sizes=True
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        cls.from_pretrained(tmp_path, num_labels=other_labels)
    other, info = cls.from_pretrained(
        tmp_path, num_labels=other_labels, ignore_mismatched_sizes=True, output_loading_info=True
    )
    assert other.config.num_labels == other_labels
    mismatched = {key for key, *_ in info["mismatched_keys"]}
    assert mismatched  # the classifier's output layer
    saved = model.state_dict()
    for key, value in other.state_dict().items():
        if key in mismatched:
            assert value.shape[0] == other_labels and saved[key].shape[0] == saved_labels
        else:
            assert torch.equal(value, saved[key]), key
    inputs = inputs_for(family, class_name, batch=2)
    with torch.no_grad():
        assert other.eval()(**inputs).logits.shape[-1] == other_labels


# ---------------------------------------------------------------------------------------------------- resizing


@pytest.mark.parametrize("steps,solver", SETTINGS)
@pytest.mark.parametrize("family,class_name", HEADS)
def test_resize_token_embeddings(family, class_name, steps, solver):
    _, model = build(family, class_name, steps, solver)
    inputs = inputs_for(family, class_name, batch=2)
    output_embeddings = model.get_output_embeddings()
    tied = output_embeddings is not None and output_embeddings.weight is model.get_input_embeddings().weight
    with torch.no_grad():
        before = main_output(model(**inputs))
    new = VOCAB + 5
    model.resize_token_embeddings(new)
    assert model.get_input_embeddings().weight.shape[0] == new
    assert model.config.get_text_config().vocab_size == new
    if output_embeddings is not None:
        assert model.get_output_embeddings().weight.shape[0] == new
        assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) == tied
    with torch.no_grad():
        after = main_output(model(**inputs))
        # the old tokens keep their vectors: the same outputs over the old vocabulary
        if output_embeddings is not None:
            assert after.shape[-1] == new
            after = after[..., :VOCAB]
        assert torch.allclose(after, before, atol=ATOL)
        uses_new = {k: v.clone() for k, v in inputs.items()}
        uses_new["input_ids"][:, 1] = new - 1
        assert torch.isfinite(main_output(model(**uses_new))).all()


# ---------------------------------------------------------------------------------------- gradient checkpointing


def _gradients(model, inputs):
    model.zero_grad(set_to_none=True)
    out = model(**inputs)
    loss = getattr(out, "loss", None)
    loss = loss if loss is not None else main_output(out).float().pow(2).mean()
    (loss + out.reg).backward()  # reg is returned in training and carries its own gradient path
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("steps,solver", SETTINGS)
@pytest.mark.parametrize("family,class_name", HEADS)
def test_gradient_checkpointing_gives_the_same_gradients(family, class_name, steps, solver):
    _, model = build(family, class_name, steps, solver)
    if not model.supports_gradient_checkpointing:
        pytest.skip(f"{class_name} does not support gradient checkpointing in transformers")
    inputs = inputs_for(family, class_name, batch=2, pad_last=1)
    labels = labels_for(class_name, inputs, model.config.num_labels)
    if labels is not None:
        inputs["labels"] = labels
    model.train()  # dropout is 0 in the tiny configs
    # a module inside the first block counts its runs (transformers checkpoints the block's forward, inside its hooks)
    block = next(iter(model.ot_flows()[0]))  # outside a forward a flow yields its real blocks
    inner = next(m for m in block.modules() if m is not block and list(m.parameters(recurse=False)))
    calls = []
    inner.register_forward_hook(lambda *_: calls.append(1))
    plain = _gradients(model, inputs)
    runs = len(calls)
    assert runs >= evaluations(solver, steps)  # the block is applied once per field evaluation
    calls.clear()
    model.gradient_checkpointing_enable()
    checkpointed = _gradients(model, inputs)
    # checkpointed: every block application runs again in backward (activations recomputed, not stored)
    assert len(calls) == 2 * runs
    assert checkpointed.keys() == plain.keys() and len(plain) > 0
    for name, grad in plain.items():
        assert torch.allclose(checkpointed[name], grad, atol=1e-6, rtol=1e-5), name


# -------------------------------------------------------------------------------------------------- generation


def _prompt(family, batch):
    inputs = make_inputs(family, batch=batch)
    inputs.pop("decoder_input_ids", None)
    if not is_encoder_decoder(family) and batch > 1:  # left padding for decoder-only models
        inputs["input_ids"][0, :2] = 0
        inputs["attention_mask"][0, :2] = 0
    return inputs


COMMON = dict(max_new_tokens=5, min_new_tokens=5, pad_token_id=0, do_sample=False)


@pytest.mark.parametrize("steps,solver", SETTINGS)
@pytest.mark.parametrize("family,class_name", GENERATIVE_HEADS)
def test_assisted_and_static_cache_decoding_equal_uncached(family, class_name, steps, solver):
    base, model = build(family, class_name, steps, solver)
    inputs = _prompt(family, batch=1)  # assisted decoding takes one sequence
    reference = model.generate(**inputs, **COMMON, use_cache=False)
    # assisted decoding is documented to give greedy decoding's tokens: a draft equal to the base model (every draft
    # token right at M = 1) and one from other weights (drafts rejected, the cache cropped back)
    for draft in (base, make_base(family, class_name, seed=1)):
        assert torch.equal(model.generate(**inputs, **COMMON, assistant_model=draft), reference)
    # the OT model as the draft of its base model (OT cache cropped inside the assistant)
    assert torch.equal(
        base.generate(**inputs, **COMMON, assistant_model=model), base.generate(**inputs, **COMMON, use_cache=False)
    )
    # a static cache, batched with padding; every layer of it holds data afterwards
    inputs = _prompt(family, batch=2)
    reference = model.generate(**inputs, **COMMON, use_cache=False)
    out = model.generate(**inputs, **COMMON, cache_implementation="static", return_dict_in_generate=True)
    assert torch.equal(out.sequences, reference)
    cache = _cache_of(out)
    assert type(_self_attention(cache)).__name__ == "StaticCache"
    _assert_layout(model, cache, filled=lambda layer: layer.is_initialized and layer.get_seq_length() > 0)


CONTRASTIVE_ON_HUB = "/" in str(
    transformers.generation.utils.GENERATION_MODES_MAPPING.get(
        transformers.generation.utils.GenerationMode.CONTRASTIVE_SEARCH, ""
    )
)


@pytest.mark.skipif(
    CONTRASTIVE_ON_HUB,
    reason=f"transformers {transformers.__version__} moved contrastive search to "
    "the Hub (custom_generate transformers-community/contrastive-search): needs the network",
)
@pytest.mark.parametrize("family,class_name", GENERATIVE_HEADS)
def test_contrastive_search_cached_equals_uncached(family, class_name):
    _, model = build(family, class_name, 2, "heun")
    inputs = _prompt(family, batch=2)
    extra = dict(penalty_alpha=0.6, top_k=4)
    assert torch.equal(
        model.generate(**inputs, **COMMON, **extra), model.generate(**inputs, **COMMON, **extra, use_cache=False)
    )


@pytest.mark.slow
@pytest.mark.parametrize("family,class_name", [("gpt2", "GPT2LMHeadModel"), ("bart", "BartForConditionalGeneration")])
def test_compiled_static_cache_decoding_equals_uncached(family, class_name):
    """generate()'s compiled decoding (static cache, torch.compile of the forward). transformers compiles only on
    accelerators unless the compile config allows every device; aot_eager keeps the tracing and functionalisation of
    the cache updates but skips code generation (minutes on this CPU)."""
    _, model = build(family, class_name, 2, "heun")
    inputs = _prompt(family, batch=2)
    reference = model.generate(**inputs, **COMMON, use_cache=False)
    config = transformers.CompileConfig(backend="aot_eager", fullgraph=False, mode=None)
    config._compile_all_devices = True
    torch._dynamo.reset()
    out = model.generate(**inputs, **COMMON, cache_implementation="static", compile_config=config)
    assert hasattr(model, "_compiled_call")  # the decoding steps ran compiled
    assert torch.equal(out, reference)


# ---------------------------------------------------------------------------------------------- cache objects


def _cache_of(generate_output):
    cache = getattr(generate_output, "cache", None)
    return cache if cache is not None else generate_output.past_key_values


def _self_attention(cache):
    return cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache


def _assert_layout(model, cache, filled):
    """By design: M x stages x L self-attention layers, L cross-attention layers; every layer holds data."""
    config = model.config
    layers = config.ot_decoder_layers()
    steps, _ = config.ot_steps_and_time("decoder")
    self_layers = _self_attention(cache).layers
    assert len(self_layers) == evaluations(config.ot_solver, steps) * layers
    assert all(filled(layer) for layer in self_layers)
    if isinstance(cache, EncoderDecoderCache):
        assert len(cache.cross_attention_cache.layers) == layers
        assert all(filled(layer) for layer in cache.cross_attention_cache.layers)


def _kv(cache):
    """Every layer's (keys, values), self-attention then cross-attention."""
    caches = (
        [cache.self_attention_cache, cache.cross_attention_cache] if isinstance(cache, EncoderDecoderCache) else [cache]
    )
    return [(layer.keys, layer.values) for c in caches for layer in c.layers]


def _apply(cache, method, *args):
    """(the cache after `method`, None) or (None, the exception it raised)."""
    cache = copy.deepcopy(cache)
    try:
        getattr(cache, method)(*args)
    except Exception as err:  # noqa: BLE001 (compared with the base cache's behaviour)
        return None, err
    return cache, None


# the cache argument's name in the installed transformers: past_key_values at 5.17, cache in the newest 5.x
CACHE_NAME = (
    "cache" if "cache" in inspect.signature(transformers.GPT2LMHeadModel.forward).parameters else "past_key_values"
)


def _decoder_only_inputs(inputs, sequences, rows):
    """Ids, mask and the position ids generate() gives left-padded rows (count of valid tokens before each)."""
    seq = sequences[rows]
    mask = torch.cat([inputs["attention_mask"][rows], torch.ones_like(seq[:, inputs["input_ids"].shape[1] :])], 1)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    return seq, mask, positions


def _continued_logits(model, family, inputs, sequences, cache, rows):
    """Logits of the tokens after the cache's, fed with the cache (`rows` of the batch)."""
    seen = cache.get_seq_length()
    with torch.no_grad():
        if is_encoder_decoder(family):
            src = {k: v[rows] for k, v in inputs.items()}
            enc = model.get_encoder()(**src)
            return model(
                encoder_outputs=enc,
                attention_mask=src["attention_mask"],
                decoder_input_ids=sequences[rows][:, seen:],
                **{CACHE_NAME: cache},
                use_cache=True,
            ).logits
        seq, mask, positions = _decoder_only_inputs(inputs, sequences, rows)
        return model(
            input_ids=seq[:, seen:],
            attention_mask=mask,
            position_ids=positions[:, seen:],
            **{CACHE_NAME: cache},
            use_cache=True,
        ).logits


def _full_logits(model, family, inputs, sequences, rows):
    with torch.no_grad():
        if is_encoder_decoder(family):
            src = {k: v[rows] for k, v in inputs.items()}
            return model(**src, decoder_input_ids=sequences[rows], use_cache=False).logits
        seq, mask, positions = _decoder_only_inputs(inputs, sequences, rows)
        return model(input_ids=seq, attention_mask=mask, position_ids=positions, use_cache=False).logits


@pytest.mark.parametrize("steps,solver", SETTINGS)
@pytest.mark.parametrize("family,class_name", GENERATIVE_HEADS)
def test_cache_methods_work_on_an_ot_cache_after_generation(family, class_name, steps, solver):
    base, model = build(family, class_name, steps, solver)
    inputs = _prompt(family, batch=2)
    out = model.generate(**inputs, **COMMON, return_dict_in_generate=True)
    base_out = base.generate(**inputs, **COMMON, return_dict_in_generate=True)
    cache, base_cache = _cache_of(out), _cache_of(base_out)
    sequences = out.sequences
    _assert_layout(model, cache, filled=lambda layer: layer.get_seq_length() > 0)
    # get_seq_length: the tokens processed (the last generated token was never fed back)
    processed = sequences.shape[1] - 1
    assert cache.get_seq_length() == processed == base_cache.get_seq_length()
    assert all(layer.get_seq_length() == processed for layer in _self_attention(cache).layers)

    # each method does to an OT cache what it does to the base model's cache (or fails as it does there)
    beam_idx = torch.tensor([1, 0])
    checks = {
        "reorder_cache": ((beam_idx,), lambda t: t.index_select(0, beam_idx)),
        "batch_repeat_interleave": ((2,), lambda t: t.repeat_interleave(2, dim=0)),
        "batch_select_indices": ((torch.tensor([1]),), lambda t: t[[1]]),
        "crop": ((-2,), None),
    }
    before = _kv(cache)
    for method, (args, tensor_op) in checks.items():
        changed, err = _apply(cache, method, *args)
        _, base_err = _apply(base_cache, method, *args)
        if base_err is not None:
            assert type(err) is type(base_err), f"{method}: {err!r} where the base cache raised {base_err!r}"
            continue
        assert err is None, f"{method} failed on the OT cache: {err!r}"
        if tensor_op is not None:
            for (k, v), (k0, v0) in zip(_kv(changed), before):
                assert torch.equal(k, tensor_op(k0)) and torch.equal(v, tensor_op(v0)), method
    # a cropped cache, and the cache of one selected row, continue decoding as a full recompute does
    for method, args, rows in (("crop", (-2,), [0, 1]), ("batch_select_indices", (torch.tensor([1]),), [1])):
        changed, err = _apply(cache, method, *args)
        if err is not None:
            continue  # raised as the base cache does (checked above)
        if method == "crop":
            assert changed.get_seq_length() == processed - 2
        logits = _continued_logits(model, family, inputs, sequences, changed, rows)
        full = _full_logits(model, family, inputs, sequences, rows)
        assert (logits - full[:, -logits.shape[1] :]).abs().max().item() <= ATOL, method
    # beam search: the cache holds batch x beams rows in every layer
    beams = model.generate(**inputs, **COMMON, num_beams=2, return_dict_in_generate=True)
    beam_cache = _cache_of(beams)
    _assert_layout(model, beam_cache, filled=lambda layer: layer.get_seq_length() > 0)
    assert all(k.shape[0] == 4 for k, _ in _kv(beam_cache))
