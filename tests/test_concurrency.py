"""One model, many callers: forwards from several threads / asyncio tasks equal the same forwards run alone, and no
forward (finished, raised, interrupted, compiled) leaves a trace on the modules or the config."""

from __future__ import annotations

import asyncio
import copy
import threading

import pytest
import torch
from conftest import HEADS, inputs_for, is_encoder_decoder, main_output, make_base

import hf_ot
from hf_ot.models.ot_flow import DepthFlow, _final_norm
from hf_ot.models.ot_model import base_class_of

GENERATIVE_TASKS = ("seq2seq-lm", "causal-lm")


def _main_head(family):
    """One head per family, from the family table: the generating head where there is one (seq2seq / causal LM),
    else the masked LM, else the first listed."""
    tasks = hf_ot.models.FAMILIES[family].tasks
    for task in (*GENERATIVE_TASKS, "masked-lm"):
        if task in tasks:
            return base_class_of(tasks[task]).__name__
    return next(c for f, c in HEADS if f == family)


FAMILIES = sorted({f for f, _ in HEADS})
MAIN_HEADS = [(f, _main_head(f)) for f in FAMILIES]


def _model(family, class_name, mode, num_steps=3):
    base = make_base(family, class_name)
    return hf_ot.convert(base, ot_num_steps=num_steps, ot_solver="rk4", ot_mode=mode).eval()


def _input_sets(family, class_name, n=5):
    """Different inputs per call (batch, lengths, padding), so interleaved calls would mix visibly."""
    return [
        inputs_for(family, class_name, batch=1 + i % 3, src_len=6 + i, tgt_len=4 + i % 3, pad_last=i % 2, seed=10 + i)
        for i in range(n)
    ]


def _run(model, inputs):
    with torch.no_grad():
        out = model(**inputs, output_hidden_states=True, output_reg=True)
    hidden = [
        h
        for name in ("hidden_states", "encoder_hidden_states", "decoder_hidden_states")
        for h in (getattr(out, name, None) or ())
    ]
    return main_output(out), out.reg, hidden


def _same(a, b) -> bool:
    logits_a, reg_a, hidden_a = a
    logits_b, reg_b, hidden_b = b
    return (
        torch.equal(logits_a, logits_b)
        and torch.equal(reg_a, reg_b)
        and len(hidden_a) == len(hidden_b)
        and all(torch.equal(x, y) for x, y in zip(hidden_a, hidden_b))
    )


def _threads(target, n):
    errors = []

    def guarded(i):
        try:
            target(i)
        except BaseException as err:  # noqa: BLE001 (reported below)
            errors.append(err)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.parametrize("mode", ["residual", "paper"])
@pytest.mark.parametrize("family,class_name", MAIN_HEADS)
def test_threads_get_their_single_thread_outputs(family, class_name, mode):
    model = _model(family, class_name, mode)
    sets = _input_sets(family, class_name)
    reference = [_run(model, inputs) for inputs in sets]
    mismatches = []

    def worker(i):
        for k in range(50):
            j = (i + k) % len(sets)
            if not _same(_run(model, sets[j]), reference[j]):
                mismatches.append((i, k))

    _threads(worker, 4)
    assert not mismatches
    # and the model is still the model: a single-threaded forward afterwards is unchanged
    assert _same(_run(model, sets[0]), reference[0])


GENERATING = [(f, c) for f, c in MAIN_HEADS if any(t in hf_ot.models.FAMILIES[f].tasks for t in GENERATIVE_TASKS)]


def test_every_generating_family_generates_from_two_threads():
    """The generating heads come from the family table (marian's MarianMTModel included)."""
    generating = {f for f, row in hf_ot.models.FAMILIES.items() if any(t in row.tasks for t in GENERATIVE_TASKS)}
    assert {f for f, _ in GENERATING} == generating
    assert ("marian", "MarianMTModel") in GENERATING


@pytest.mark.parametrize("mode", ["residual", "paper"])
@pytest.mark.parametrize("family,class_name", GENERATING)
def test_generate_from_two_threads(family, class_name, mode):
    model = _model(family, class_name, mode)
    prompts = [torch.randint(4, 99, (1, 4 + i), generator=torch.Generator().manual_seed(i)) for i in range(4)]

    def generate(ids):
        with torch.no_grad():
            return model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=6,
                do_sample=False,
                use_cache=True,
                pad_token_id=0,
            )

    reference = [generate(ids) for ids in prompts]
    results = {}

    def worker(i):
        for k in range(4):
            j = (i + k) % len(prompts)
            results[(i, k)] = torch.equal(generate(prompts[j]), reference[j])

    _threads(worker, 2)
    assert all(results.values()) and len(results) == 8


def test_asyncio_tasks_interleaving_stack_calls():
    """Two tasks, each calling the encoder stack on its own and the whole model, through asyncio.to_thread."""
    family, class_name = "t5", "T5ForConditionalGeneration"
    model = _model(family, class_name, "residual")
    sets = _input_sets(family, class_name, n=4)
    with torch.no_grad():
        reference = [
            (
                model.get_encoder()(input_ids=s["input_ids"], attention_mask=s["attention_mask"]).last_hidden_state,
                _run(model, s),
            )
            for s in sets
        ]

    def both(j):
        with torch.no_grad():
            encoded = model.get_encoder()(input_ids=sets[j]["input_ids"], attention_mask=sets[j]["attention_mask"])
        return torch.equal(encoded.last_hidden_state, reference[j][0]) and _same(_run(model, sets[j]), reference[j][1])

    async def task(i):
        return [await asyncio.to_thread(both, (i + k) % len(sets)) for k in range(10)]

    async def main():
        return await asyncio.gather(task(0), task(1))

    assert all(all(r) for r in asyncio.run(main()))


# -- snapshots: a forward writes nothing on modules or the config


def _value_key(value):
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        return value
    if isinstance(value, (tuple, list)) and all(isinstance(v, (bool, int, float, str, type(None))) for v in value):
        return tuple(value)
    if isinstance(value, dict):
        return ("dict", tuple((k, id(v)) for k, v in value.items()))
    return ("object", id(value), type(value))


def module_snapshot(model):
    modules = {
        name: (id(module), type(module), {k: _value_key(v) for k, v in vars(module).items()})
        for name, module in model.named_modules(remove_duplicate=False)
    }
    configs = {
        id(c): copy.deepcopy(c.__dict__) for c in (getattr(m, "config", None) for m in model.modules()) if c is not None
    }
    state = {k: v.clone() for k, v in model.state_dict().items()}
    return modules, configs, state


def assert_unchanged(model, before):
    modules, configs, state = module_snapshot(model)
    assert modules.keys() == before[0].keys()
    for name in modules:
        assert modules[name] == before[0][name], f"module {name!r} changed"
    assert configs == before[1]
    assert state.keys() == before[2].keys() and all(torch.equal(state[k], before[2][k]) for k in state)


class _Boom(Exception):
    pass


def _raise_in_second_block(kind):
    def hook(module, args):
        if torch.is_grad_enabled() or True:
            raise kind("stop inside a block")

    return hook


SNAPSHOT_HEADS = [("gpt2", "GPT2LMHeadModel"), ("bert", "BertForMaskedLM"), ("t5", "T5ForConditionalGeneration")]


@pytest.mark.parametrize("mode", ["residual", "paper"])
@pytest.mark.parametrize("family,class_name", SNAPSHOT_HEADS)
def test_no_forward_leaves_a_trace(family, class_name, mode):
    model = _model(family, class_name, mode)
    inputs = inputs_for(family, class_name, pad_last=1)
    reference = _run(model, inputs)
    flow = model.ot_flows()[-1]
    block = list(flow._modules.values())[1]
    for kind in (_Boom, KeyboardInterrupt):  # raised inside a block, and interrupted
        handle = block.register_forward_pre_hook(_raise_in_second_block(kind))
        before = module_snapshot(model)
        with pytest.raises(kind):
            _run(model, inputs)
        assert_unchanged(model, before)
        handle.remove()
    before = module_snapshot(model)
    if is_encoder_decoder(family):  # a stack called on its own, as generate's encoder pass does
        with torch.no_grad():
            model.get_encoder()(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    assert _same(_run(model, inputs), reference)
    with torch.no_grad():
        model(**inputs, use_cache=True) if family != "bert" else model(**inputs)
    assert_unchanged(model, before)
    assert all(type(b) is not DepthFlow and not type(b).__name__.startswith("_") for b in flow)  # real blocks


# a decoder, an encoder, an encoder-decoder, in both modes; those compiling for more than ~20 s on a CPU are slow
COMPILED = [
    pytest.param(f, c, mode, marks=[pytest.mark.slow] if f == "t5" or (f, mode) == ("gpt2", "paper") else [])
    for f, c in SNAPSHOT_HEADS
    for mode in ("residual", "paper")
]


@pytest.mark.parametrize("family,class_name,mode", COMPILED)
def test_no_trace_under_torch_compile(family, class_name, mode):
    torch._dynamo.reset()
    # one RK4 step (its four stages) per block: torch.compile traces every step, and a trace a forward left would be
    # there after one as after three
    model = _model(family, class_name, mode, num_steps=1)
    inputs = inputs_for(family, class_name)
    reference = _run(model, inputs)
    compiled = torch.compile(model, backend="aot_eager")  # (torch tags the model it wraps: not a forward's doing)
    before = module_snapshot(model)
    with torch.no_grad():
        out = compiled(**inputs, output_reg=True)
    torch.testing.assert_close(out.logits, reference[0])
    torch.testing.assert_close(out.reg, reference[1])
    assert_unchanged(model, before)


def test_paper_mode_final_norm_survives_concurrent_forwards():
    """The norm module stays in place; the pass-through after the integration is per call."""
    model = _model("gpt2", "GPT2LMHeadModel", "paper")
    norm = model.transformer.ln_f
    inputs = inputs_for("gpt2", "GPT2LMHeadModel")
    reference = _run(model, inputs)
    _threads(lambda i: [_run(model, inputs) for _ in range(20)], 3)
    assert model.transformer.ln_f is norm
    assert _same(_run(model, inputs), reference)
    x = torch.randn(2, 3, 32)
    torch.testing.assert_close(norm(x), torch.nn.functional.layer_norm(x, (32,), norm.weight, norm.bias, norm.eps))


# -- an interrupted forward (KeyboardInterrupt: torch runs no post-hook) of a model that is its own stack, and of a
# stack called on its own, leaves no frame behind


def _raise(kind):
    def hook(*_):
        raise kind("interrupted")

    return hook


INTERRUPTED = [
    ("gpt2", "GPT2Model", "model"),  # OTGPT2Model: the model is its own stack
    ("bert", "BertModel", "model"),
    ("t5", "T5ForConditionalGeneration", "encoder"),  # model.get_encoder()(...): a stack called on its own
]


@pytest.mark.parametrize("mode", ["residual", "paper"])
@pytest.mark.parametrize("family,class_name,target", INTERRUPTED)
def test_an_interrupted_forward_of_a_stack_leaves_no_frame(family, class_name, target, mode):
    model = _model(family, class_name, mode)
    stack = model if target == "model" else model.get_encoder()
    flow = next(m for m in stack.modules() if isinstance(m, DepthFlow))
    blocks = list(flow._modules.values())
    norm = _final_norm(stack, model.ot_adapter)
    inputs = inputs_for(family, class_name, pad_last=1)
    inputs = {k: inputs[k] for k in ("input_ids", "attention_mask")}
    with torch.no_grad():
        reference = stack(**inputs).last_hidden_state
    # inside a block (before the integration finished), and in the final norm (after it: the pass-through is armed)
    places = [(blocks[1], "register_forward_pre_hook")]
    if norm is not None:
        places.append((norm, "register_forward_hook"))
    for module, register in places:
        for kind in (KeyboardInterrupt, _Boom):
            before = module_snapshot(model)
            handle = getattr(module, register)(_raise(kind))
            with pytest.raises(kind), torch.no_grad():
                stack(**inputs)
            handle.remove()
            assert_unchanged(model, before)
            assert list(flow) == blocks and flow[0] is blocks[0]  # the real blocks, not stand-ins
            if norm is not None:
                x = torch.randn(2, 3, norm.weight.shape[0])
                assert not torch.equal(norm(x), x)  # the final norm normalises outside a forward
    with torch.no_grad():
        assert torch.equal(stack(**inputs).last_hidden_state, reference)


# -- another OT model called inside an OT model's forward runs its own call


def test_a_foreign_model_called_inside_a_forward_runs_its_own_call():
    outer = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel", seed=0), ot_num_steps=3, ot_solver="rk4").eval()
    foreign = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel", seed=1), ot_num_steps=1, ot_solver="euler").eval()
    ids = torch.randint(4, 99, (2, 6), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        alone = foreign(ids, output_reg=True)
        reference = outer(ids, output_reg=True)
    inside = {}

    def hook(module, args, output):  # inside the outer model's call and its stack's forward
        inside["out"] = foreign(ids, output_reg=True)

    handle = outer.transformer.wte.register_forward_hook(hook)
    try:
        with torch.no_grad():
            got = outer(ids, output_reg=True)
    finally:
        handle.remove()
    assert torch.equal(inside["out"].logits, alone.logits)
    assert inside["out"].reg is not None and torch.equal(inside["out"].reg, alone.reg)
    assert torch.equal(got.logits, reference.logits) and torch.equal(got.reg, reference.reg)
    # and a foreign stack called on its own inside the forward reads its own model's settings
    handle = outer.transformer.wte.register_forward_hook(
        lambda *_: inside.__setitem__("stack", foreign.transformer(ids).last_hidden_state)
    )
    try:
        with torch.no_grad():
            got = outer(ids, output_reg=True)
    finally:
        handle.remove()
    with torch.no_grad():
        assert torch.equal(inside["stack"], foreign.transformer(ids).last_hidden_state)
    assert torch.equal(got.logits, reference.logits) and torch.equal(got.reg, reference.reg)
