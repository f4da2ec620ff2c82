"""Every family's bare base model with an adaptive solver: a plain forward builds no KV cache (README, "Adaptive
depth"), as the heads do; a cache asked for explicitly is refused. A model that is its own stack (GPT2Model,
LlamaModel, ...) sets up its stack's frame inside its own call, which must see the adaptive default use_cache=False."""

import pytest
import torch
from conftest import inputs_for, is_encoder_decoder, make_base, make_inputs

import hf_ot
from hf_ot.models import FAMILIES
from hf_ot.models.ot_model import base_class_of

BASE_MODELS = [
    (family, base_class_of(row.tasks["base"]).__name__) for family, row in FAMILIES.items() if "base" in row.tasks
]


def _caches(family: str) -> bool:
    """Whether the family decodes with a KV cache: decoders (a causal-LM head) and encoder-decoders."""
    return is_encoder_decoder(family) or "causal-lm" in FAMILIES[family].tasks


def test_every_family_has_a_base_model():
    assert {f for f, _ in BASE_MODELS} == set(FAMILIES)


@pytest.mark.parametrize("family,class_name", BASE_MODELS)
def test_base_model_with_an_adaptive_solver_forwards_without_a_cache(family, class_name):
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=2, ot_solver="bosh3").eval()
    inputs = inputs_for(family, class_name, batch=2, src_len=7)
    with torch.no_grad():
        plain = model(**inputs)  # no use_cache given: the adaptive default builds no cache
        uncached = model(**inputs, use_cache=False)
    assert plain.num_field_evaluations.shape == (2,) and plain.num_field_evaluations.min() >= 3
    assert getattr(plain, "past_key_values", None) is None
    assert torch.equal(plain.num_field_evaluations, uncached.num_field_evaluations)
    torch.testing.assert_close(plain.last_hidden_state, uncached.last_hidden_state, rtol=0, atol=0)


@pytest.mark.parametrize("family,class_name", [(f, c) for f, c in BASE_MODELS if _caches(f)])
def test_base_model_with_an_adaptive_solver_refuses_an_explicit_cache(family, class_name):
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=2, ot_solver="bosh3").eval()
    inputs = make_inputs(family, batch=1, src_len=5)
    with torch.no_grad(), pytest.raises(ValueError, match="fixed-grid solver"):
        model(**inputs, use_cache=True)


def _lm_head(family: str) -> str:
    tasks = FAMILIES[family].tasks
    return base_class_of(tasks.get("causal-lm") or tasks["seq2seq-lm"]).__name__


@pytest.mark.parametrize("family", [f for f, _ in BASE_MODELS if _caches(f)])
def test_decoder_stack_called_on_its_own_with_an_adaptive_solver_builds_no_cache(family):
    """model.get_decoder()(...) runs the decoder stack outside the model's forward: the adaptive default applies there
    as well (the stack would otherwise build a cache from its config's use_cache)."""
    model = hf_ot.convert(make_base(family, _lm_head(family)), ot_num_steps=2, ot_solver="bosh3").eval()
    inputs = make_inputs(family, batch=2, src_len=7)
    decoder = model.get_decoder()
    if is_encoder_decoder(family):
        with torch.no_grad():
            memory = model.get_encoder()(input_ids=inputs["input_ids"]).last_hidden_state
        call = dict(input_ids=inputs["decoder_input_ids"], encoder_hidden_states=memory)
    else:
        call = dict(input_ids=inputs["input_ids"])
    with torch.no_grad():
        plain = decoder(**call)
        uncached = decoder(**call, use_cache=False)
        assert getattr(plain, "past_key_values", None) is None
        torch.testing.assert_close(plain.last_hidden_state, uncached.last_hidden_state, rtol=0, atol=0)
        with pytest.raises(ValueError, match="fixed-grid solver"):
            decoder(**call, use_cache=True)
