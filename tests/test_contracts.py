"""The information boundaries of the three families hold at every M, solver and vector-field mode."""

import itertools

import pytest
import torch
from conftest import DECODER_LM_HEADS, ENCODER_MLM_HEADS, PAD, SEQ2SEQ_LM_HEADS, make_base

import hf_ot

pytestmark = pytest.mark.core  # the model, cache and generation tests: CI runs them on the oldest transformers too

GRID = list(itertools.product([1, 3], ["euler", "heun", "rk4"], ["residual", "paper"]))
ATOL = 1e-5


def ot_model(family, class_name, steps, solver, mode, **base_overrides):
    base = make_base(family, class_name, **base_overrides)
    return hf_ot.convert(base, ot_num_steps=steps, ot_solver=solver, ot_mode=mode).eval()


@pytest.mark.parametrize("family,class_name", DECODER_LM_HEADS)
@pytest.mark.parametrize("steps,solver,mode", GRID)
def test_decoder_only_future_change_does_not_reach_the_past(family, class_name, steps, solver, mode):
    model = ot_model(family, class_name, steps, solver, mode)
    ids = torch.randint(4, 99, (2, 8), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[:, 5] = (changed[:, 5] + 7) % 95 + 4
    with torch.no_grad():
        a, b = model(ids).logits, model(changed).logits
    assert (a[:, :5] - b[:, :5]).abs().max().item() <= ATOL
    assert (a[:, 5:] - b[:, 5:]).abs().max().item() > 1e-4


@pytest.mark.parametrize("family,class_name", ENCODER_MLM_HEADS)
@pytest.mark.parametrize("steps,solver,mode", GRID)
def test_encoder_only_padding_changes_nothing_valid(family, class_name, steps, solver, mode):
    model = ot_model(family, class_name, steps, solver, mode, attn_implementation="eager")
    ids = torch.randint(4, 99, (2, 6), generator=torch.Generator().manual_seed(0))
    padded = torch.cat([ids, torch.full((2, 3), PAD)], dim=1)
    mask = torch.cat([torch.ones(2, 6, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long)], dim=1)
    with torch.no_grad():
        plain = model(ids, attention_mask=torch.ones_like(ids), output_reg=True)
        pad = model(padded, attention_mask=mask, output_attentions=True, output_reg=True)
    assert (plain.logits - pad.logits[:, :6]).abs().max().item() <= ATOL
    assert torch.allclose(plain.reg, pad.reg, rtol=1e-5, atol=1e-7)
    # bidirectional: a later valid token reaches an earlier position
    changed = ids.clone()
    changed[:, 4] = (changed[:, 4] + 7) % 95 + 4
    with torch.no_grad():
        other = model(changed, attention_mask=torch.ones_like(ids))
    assert (other.logits[:, 0] - plain.logits[:, 0]).abs().max().item() > 1e-5
    if pad.attentions is None:  # a family whose attention outputs are not recorded
        return
    # every attention map (one per layer per field evaluation) gives padded keys exactly zero weight from every
    # valid query (what padded queries attend to reaches no valid output)
    evaluations = steps * len(hf_ot.SOLVERS[solver][1])
    assert len(pad.attentions) == evaluations * model.config.num_hidden_layers
    for attn in pad.attentions:
        assert attn[..., :6, 6:].abs().max().item() == 0.0


@pytest.mark.parametrize("family,class_name", SEQ2SEQ_LM_HEADS)
@pytest.mark.parametrize("steps,solver,mode", GRID)
def test_encoder_decoder_boundaries(family, class_name, steps, solver, mode):
    model = ot_model(family, class_name, steps, solver, mode)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 99, (2, 7), generator=g)
    src[:, 5:] = PAD
    src_mask = torch.ones_like(src)
    src_mask[:, 5:] = 0
    tgt = torch.randint(4, 99, (2, 5), generator=g)

    def logits(s, t):
        with torch.no_grad():
            return model(input_ids=s, attention_mask=src_mask, decoder_input_ids=t, output_reg=True)

    ref = logits(src, tgt)
    # a padded source position changes nothing (outputs or reg)
    pad_changed = src.clone()
    pad_changed[:, 6] = 42
    out = logits(pad_changed, tgt)
    assert (out.logits - ref.logits).abs().max().item() <= ATOL
    assert torch.allclose(out.reg, ref.reg, rtol=1e-5, atol=1e-7)
    # a valid source position reaches every target position through cross-attention
    src_changed = src.clone()
    src_changed[:, 2] = (src_changed[:, 2] + 11) % 95 + 4
    out = logits(src_changed, tgt).logits
    assert (out - ref.logits).abs().amax(dim=(0, 2)).min().item() > 1e-5
    # a future target change leaves earlier target outputs unchanged
    tgt_changed = tgt.clone()
    tgt_changed[:, 3] = (tgt_changed[:, 3] + 5) % 95 + 4
    out = logits(src, tgt_changed).logits
    assert (out[:, :3] - ref.logits[:, :3]).abs().max().item() <= ATOL
    assert (out[:, 3:] - ref.logits[:, 3:]).abs().max().item() > 1e-4


@pytest.mark.parametrize("family,class_name", DECODER_LM_HEADS)
@pytest.mark.parametrize("steps,solver", [(1, "euler"), (3, "rk4")])
def test_decoder_only_right_padding_keeps_valid_outputs_and_reg(family, class_name, steps, solver):
    model = ot_model(family, class_name, steps, solver, "residual")
    ids = torch.randint(4, 99, (1, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        plain = model(ids, output_reg=True)
        right = model(
            torch.cat([ids, torch.full((1, 2), PAD)], 1),
            attention_mask=torch.tensor([[1] * 6 + [0] * 2]),
            output_reg=True,
        )
    assert (right.logits[:, :6] - plain.logits).abs().max().item() <= ATOL
    assert torch.allclose(right.reg, plain.reg, rtol=1e-5, atol=1e-7)


def test_padding_mask_found_when_passed_positionally():
    model = ot_model("gpt2", "GPT2Model", 2, "euler", "residual")
    ids = torch.randint(4, 99, (2, 6), generator=torch.Generator().manual_seed(4))
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3])
    with torch.no_grad():
        by_name = model(ids, attention_mask=mask, output_reg=True).reg
        # GPT2Model.forward(input_ids, cache, attention_mask, ...)
        positional = model(ids, None, mask, output_reg=True).reg
        unmasked = model(ids, output_reg=True).reg
    assert torch.equal(by_name, positional) and not torch.allclose(by_name, unmasked)
