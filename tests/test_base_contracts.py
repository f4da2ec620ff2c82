"""Contracts of transformers' base classes the OT classes keep: get_text_config() is the config itself (callers write
through it), and from_pretrained initialises missing weights exactly as the base class does."""

from __future__ import annotations

import pytest
import torch
import transformers
from conftest import HEADS, base_config

from hf_ot.models.ot_model import base_class_of
from hf_ot.registry import family_of

FAMILIES = sorted({f for f, _ in HEADS})


def _ot_config(family, **ot):
    return family_of(family).config_class.from_base_config(base_config(family), **ot)


@pytest.mark.parametrize("family", FAMILIES)
def test_get_text_config_is_the_config_where_the_base_says_so(family):
    base = base_config(family)
    config = _ot_config(family, ot_num_steps=3, ot_solver="heun")
    for kwargs in ({}, {"decoder": True}):
        if base.get_text_config(**kwargs) is base:
            assert config.get_text_config(**kwargs) is config
    # a write through it reaches the config, as transformers' RoPE-scaling tests and torchao integration do
    if base.get_text_config(decoder=True) is base:
        config.get_text_config(decoder=True).tie_word_embeddings = False
        assert config.tie_word_embeddings is False


ROPE = [f for f in FAMILIES if getattr(base_config(f), "rope_parameters", None) is not None]


@pytest.mark.parametrize("rope_type", ["linear", "dynamic", "yarn"])
@pytest.mark.parametrize("family", ROPE)
def test_rope_scaling_written_through_the_text_config_is_used(family, rope_type):
    """The OT model built from a config whose RoPE was changed through get_text_config differs from the unchanged one
    (the write was not lost) and equals the base model with the same change at M=1 (as transformers' own
    test_model_rope_scaling_from_config_{linear,dynamic,yarn} write it)."""
    cls_name = next(c for f, c in HEADS if f == family and c.endswith("Model"))
    # dynamic scaling changes nothing up to the trained length: run past it
    length = base_config(family).max_position_embeddings + 8 if rope_type == "dynamic" else 12
    outs = {}
    for scaled in (False, True):
        config = _ot_config(family)
        base = base_config(family)
        for cfg in (config, base):
            if scaled:
                text = cfg.get_text_config(decoder=True)
                params = dict(text.rope_parameters)
                change = {"rope_type": rope_type, "factor": 4.0}
                if all(isinstance(v, dict) for v in params.values()):  # per layer type (ModernBERT)
                    params = {k: {**v, **change} for k, v in params.items()}
                else:
                    params.update(change)
                text.rope_parameters = params
        ids = torch.randint(4, 99, (1, length), generator=torch.Generator().manual_seed(0))
        torch.manual_seed(0)
        try:
            with torch.no_grad():
                base_out = getattr(transformers, cls_name)(base).eval()(ids).last_hidden_state
        except (ValueError, KeyError, TypeError, ZeroDivisionError) as err:  # the base family refuses this scaling
            pytest.skip(f"{cls_name} (tiny config) refuses rope_type={rope_type!r}: {err!r}")
        torch.manual_seed(0)
        ot_model = next(c for c in family_of(family).model_classes if base_class_of(c).__name__ == cls_name)(config)
        with torch.no_grad():
            outs[scaled] = (ot_model.eval()(ids).last_hidden_state, base_out)
    assert not torch.allclose(outs[True][0], outs[False][0])
    torch.testing.assert_close(outs[True][0], outs[True][1])


@pytest.mark.parametrize("family,class_name", HEADS)
def test_missing_weights_are_initialised_as_the_base_class_does(family, class_name):
    """Seeded from_pretrained with no weights at all: every weight is a missing one, initialised by the family's own
    _init_weights (ModernBERT's scaled output projections, T5's dense layers, GPT-2's c_proj)."""
    row = family_of(family)
    ot_class = next(c for c in row.model_classes if base_class_of(c).__name__ == class_name)
    base = base_config(family)
    torch.manual_seed(0)
    reference = getattr(transformers, class_name).from_pretrained(None, config=base, state_dict={}).state_dict()
    torch.manual_seed(0)
    got = ot_class.from_pretrained(None, config=_ot_config(family, ot_num_steps=2), state_dict={}).state_dict()
    assert got.keys() == reference.keys()
    assert [k for k in got if not torch.equal(got[k], reference[k])] == []
