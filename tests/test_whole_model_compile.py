"""Whole-model compilation: an OT model's forward is ONE graph under torch.compile(fullgraph=True), and so is the
decoding step that generate(cache_implementation="static") compiles; neither recompiles when the prompt length
changes, and the compiled model gives the eager model's outputs, also from several threads at once. References: the
same model run eagerly, and the base model compiled the same way (it compiles as often as the OT model).

Plus the other contracts transformers' model tests check: the renamed cache argument's deprecation warning reaches the
caller as the base model's does, generative OT classes list GenerationMixin among their bases, and an OT model
pickles (torch.save of the whole model). The compiler is dynamo with the eager backend: it traces exactly what
inductor would compile, in seconds."""

from __future__ import annotations

import copy
import io
import pickle
import threading
import warnings

import pytest
import torch
from conftest import inputs_for, main_output, make_base
from transformers import DynamicCache, GenerationMixin
from transformers.generation.configuration_utils import CompileConfig

import hf_ot
from hf_ot.models import FAMILIES
from hf_ot.models.ot_model import base_class_of

pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # every test counts graphs from zero


class CountingBackend:
    """A dynamo backend that counts the graphs it is given (one per compile, recompiles included) and runs them as
    traced. generate deep-copies its CompileConfig: the count lives in a shared list."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def __deepcopy__(self, memo):
        return self


def ot(family, class_name, **settings):
    return hf_ot.convert(make_base(family, class_name), **{"ot_num_steps": 2, "ot_solver": "heun", **settings})


FORWARD = [
    ("gpt2", "GPT2LMHeadModel", "residual"),
    pytest.param("gpt2", "GPT2LMHeadModel", "paper", marks=pytest.mark.slow),
    ("llama", "LlamaForCausalLM", "residual"),
    ("bert", "BertForMaskedLM", "residual"),
    pytest.param("t5", "T5ForConditionalGeneration", "residual", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("family,class_name,mode", FORWARD)
def test_forward_is_one_graph_equal_to_eager_and_compiles_as_often_as_the_base_model(family, class_name, mode):
    model = ot(family, class_name, ot_mode=mode).eval()
    base = make_base(family, class_name).eval()
    counts = []
    for m in (model, base):
        torch._dynamo.reset()
        backend = CountingBackend()
        compiled = torch.compile(m, backend=backend, fullgraph=True)  # a graph break raises
        for length in (9, 7, 5):
            inputs = inputs_for(family, class_name, src_len=length, tgt_len=length - 2, pad_last=1, seed=length)
            with torch.no_grad():
                out = compiled(**inputs, use_cache=False) if family != "bert" else compiled(**inputs)
                ref = m(**inputs, use_cache=False) if family != "bert" else m(**inputs)
            torch.testing.assert_close(main_output(out), main_output(ref), atol=1e-5, rtol=0)
        counts.append(len(backend.graphs))
    assert counts[0] == counts[1] <= 2  # the base's automatic-dynamic recompile at most, no more


def test_training_step_compiles_as_one_graph_with_eager_gradients():
    model = ot("gpt2", "GPT2LMHeadModel", ot_num_steps=3).train()
    eager = copy.deepcopy(model)
    backend = CountingBackend()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    ids = torch.randint(4, 99, (2, 8), generator=torch.Generator().manual_seed(0))
    losses = []
    for m in (compiled, eager):
        out = m(ids, labels=ids)
        (out.loss + 0.5 * out.reg).backward()
        losses.append((out.loss.detach(), out.reg.detach()))
    assert len(backend.graphs) == 1
    torch.testing.assert_close(losses[0], losses[1], atol=1e-6, rtol=0)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=0, msg=name)


def _generate(model, ids, compile_config=None):
    kwargs = dict(max_new_tokens=5, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        if compile_config is None:  # eager reference: the dynamic cache (nothing compiled)
            return model.generate(ids, **kwargs)
        return model.generate(ids, cache_implementation="static", compile_config=compile_config, **kwargs)


GENERATE = [
    ("gpt2", "GPT2LMHeadModel"),
    ("llama", "LlamaForCausalLM"),
    ("t5", "T5ForConditionalGeneration"),
]


@pytest.mark.parametrize("family,class_name", GENERATE)
def test_static_cache_generate_compiles_one_decoding_graph_for_every_prompt_length(family, class_name):
    """Decoders: one graph for prompts of 9, 7 and 5 tokens. Encoder-decoders size the cross-attention cache by the
    source length, so the base model recompiles once (dynamic source length) and the OT model as often."""
    graphs = []
    for model in (
        ot(family, class_name, ot_num_steps=3, ot_solver="euler").eval(),
        make_base(family, class_name).eval(),
    ):
        torch._dynamo.reset()
        backend = CountingBackend()
        config = CompileConfig(backend=backend, fullgraph=True, mode=None)
        config._compile_all_devices = True  # transformers compiles the decoding step on its own only on accelerators
        for length in (9, 7, 5):  # the static cache of the first generate is reused (shorter prompts fit in it)
            ids = torch.randint(4, 99, (1, length), generator=torch.Generator().manual_seed(length))
            assert torch.equal(_generate(model, ids, config), _generate(model, ids))
        graphs.append(len(backend.graphs))
    assert graphs[0] == graphs[1]  # no graph break (fullgraph), no recompile the base model does not have
    if family != "t5":
        assert graphs[0] == 1


def test_threads_running_one_compiled_model_get_their_eager_outputs():
    model = ot("gpt2", "GPT2LMHeadModel", ot_num_steps=3).eval()
    compiled = torch.compile(model, backend=CountingBackend(), fullgraph=True)
    sets = [inputs_for("gpt2", "GPT2LMHeadModel", batch=2, src_len=7, pad_last=i % 2, seed=i) for i in range(4)]
    with torch.no_grad():
        reference = [model(**s, use_cache=False, output_reg=True) for s in sets]
        compiled(**sets[0], use_cache=False, output_reg=True)  # compiled before the threads start
    results = {}

    def worker(t):
        for k in range(8):
            j = (t + k) % len(sets)
            with torch.no_grad():
                out = compiled(**sets[j], use_cache=False, output_reg=True)
            results[(t, k)] = torch.equal(out.logits, reference[j].logits) and torch.equal(out.reg, reference[j].reg)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 24 and all(results.values())


@pytest.mark.parametrize("family,class_name", [("gpt2", "GPT2LMHeadModel"), ("llama", "LlamaForCausalLM")])
def test_the_old_cache_argument_name_warns_the_caller_once_and_its_cache_is_used(family, class_name):
    model = ot(family, class_name).eval()
    ids = torch.randint(4, 99, (1, 5), generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings(record=True) as seen, torch.no_grad():
        warnings.simplefilter("always")
        old = model(ids, past_key_values=DynamicCache(), use_cache=True)
    caught = [w for w in seen if "past_key_values" in str(w.message)]
    assert len(caught) == 1 and caught[0].category is FutureWarning and "Use `cache`" in str(caught[0].message)
    # attributed outside hf_ot (to the module call, as for a base model whose forward warns itself), so that the
    # default filters show it at the caller's call rather than once for hf_ot's line
    assert "hf_ot" not in caught[0].filename
    with torch.no_grad():
        new = model(ids, cache=DynamicCache(), use_cache=True)
    assert torch.equal(old.logits, new.logits) and old.cache.get_seq_length() == 5  # the cache given was used


def test_generative_ot_classes_list_generation_mixin_among_their_bases():
    generative = [
        c for f in FAMILIES.values() for c in f.model_classes if issubclass(base_class_of(c), GenerationMixin)
    ]
    assert generative and all(GenerationMixin in c.__bases__ for c in generative)


@pytest.mark.parametrize(
    "family,class_name",
    [("gpt2", "GPT2LMHeadModel"), ("t5", "T5ForConditionalGeneration"), ("llama", "LlamaForSequenceClassification")],
)
def test_an_ot_model_pickles_and_the_copy_computes_the_same(family, class_name):
    model = ot(family, class_name).eval()
    inputs = inputs_for(family, class_name, pad_last=1)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    copies = [pickle.loads(pickle.dumps(model)), torch.load(buffer, weights_only=False)]
    with torch.no_grad():
        reference = model(**inputs, output_reg=True)
        for twin in copies:
            out = twin(**inputs, output_reg=True)
            assert torch.equal(main_output(out), main_output(reference)) and torch.equal(out.reg, reference.reg)
            assert all(flow.owner_config() is twin.config for flow in twin.ot_flows())  # its own settings
            twin.config.ot_num_steps = 4  # and only its own
            assert not torch.equal(main_output(twin(**inputs)), main_output(model(**inputs)))
