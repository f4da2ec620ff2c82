"""copy.deepcopy of an OT model: the copy reads its own config wherever it is called (the whole model, a stack or an
inner OT model on its own), the original keeps its outputs, and the copy works on once the original is gone."""

import copy
import gc

import pytest
import torch
from conftest import inputs_for, main_output, make_base

import hf_ot


def outputs(model, part, inputs):
    """The whole model's main output and that of `part` (a submodule called on its own)."""
    with torch.no_grad():
        return main_output(model(**inputs)), main_output(model.get_submodule(part)(**inputs))


def assert_outputs_equal(got, expected):
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize(
    "family, class_name, part",
    [
        ("gpt2", "GPT2LMHeadModel", "transformer"),  # a stack called on its own reads its flow's owner
        ("llama", "LlamaForSequenceClassification", "model"),  # an inner OT model reads its outer model's config
    ],
)
def test_a_deep_copy_follows_its_own_config_and_outlives_the_original(family, class_name, part):
    inputs = inputs_for(family, class_name)
    original = hf_ot.convert(make_base(family, class_name), ot_num_steps=2).eval()
    at_two = outputs(original, part, inputs)
    at_five = outputs(hf_ot.convert(make_base(family, class_name), ot_num_steps=5).eval(), part, inputs)
    assert not torch.allclose(at_two[0], at_five[0])  # the setting shows in the outputs

    twin = copy.deepcopy(original)
    twin.config.ot_num_steps = 5
    assert_outputs_equal(outputs(twin, part, inputs), at_five)
    assert_outputs_equal(outputs(original, part, inputs), at_two)
    assert all(flow.owner_config() is twin.config for flow in twin.ot_flows())

    del original
    gc.collect()
    assert_outputs_equal(outputs(twin, part, inputs), at_five)
    twin.config.ot_num_steps = 2  # still its own config that it reads
    assert_outputs_equal(outputs(twin, part, inputs), at_two)
