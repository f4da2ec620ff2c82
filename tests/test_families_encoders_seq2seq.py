"""What is specific to the encoder-only (RoBERTa, XLM-R, ELECTRA, DistilBERT, ModernBERT) and encoder-decoder (mT5,
mBART, Marian) families; the contracts every family shares are in test_equivalence / test_contracts /
test_save_and_cache / test_hub, parametrised over tests/tiny_encoders.py and tests/tiny_seq2seq.py.

The depth-flow references below run the BASE model's own forward (its masks per layer type, rotary embeddings,
position biases) and only swap the input of its first block with hooks: S(x) is the base stack's blocks applied to x,
and the test integrates dX/dt = f(X) by hand with Euler steps.
"""

import pytest
import torch
from conftest import PAD, make_base
from tiny_encoders import HEADS as ENCODER_HEADS
from tiny_seq2seq import HEADS as SEQ2SEQ_HEADS
from transformers import AutoModelForSeq2SeqLM

import hf_ot
from hf_ot.cards import task_of

pytestmark = pytest.mark.core  # the model, cache and generation tests: CI runs them on the oldest transformers too

TOL = 1e-5


def _stack_map(run, first_block, last_block):
    """(x0, S): the input of the base stack's first block in `run()`, and x -> the last block's output when the first
    block receives x instead (everything else as the base forward computes it)."""
    state = {}

    def swap_input(module, args, kwargs):
        state["x0"] = args[0]
        if "x" in state:
            return (state["x"], *args[1:]), kwargs
        return None

    def take_output(module, args, kwargs, out):
        state["y"] = out[0] if isinstance(out, tuple) else out

    handles = [
        first_block.register_forward_pre_hook(swap_input, with_kwargs=True),
        last_block.register_forward_hook(take_output, with_kwargs=True),
    ]

    def stack(x):
        state["x"] = x
        with torch.no_grad():
            run()
        return state["y"]

    with torch.no_grad():
        run()
    return state["x0"], stack, handles


def _euler_reference(stack, x0, steps, paper, final_norm, valid):
    """X(T=1) after `steps` Euler steps of f (residual: S(x) - x; paper: final_norm(S(x))), the stack's output
    (the final norm after the loop in residual mode; inside f in paper mode) and reg = sum_k dt * mean f^2 over valid
    positions."""
    dt = 1.0 / steps
    x, reg = x0, torch.zeros(())
    weights = valid.unsqueeze(-1).float()
    for _ in range(steps):
        y = stack(x)
        f = (final_norm(y) if final_norm is not None else y) if paper else y - x
        reg = reg + dt * (f.pow(2).sum(-1, keepdim=True) * weights).sum() / (weights.sum() * f.shape[-1])
        x = x + dt * f
    out = x if paper or final_norm is None else final_norm(x)
    return out, reg


def _padded_ids(batch=2, length=12, pad=3):
    ids = torch.randint(4, 99, (batch, length), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    ids[0, -pad:] = PAD
    mask[0, -pad:] = 0
    return ids, mask


@pytest.mark.parametrize("mode", ["residual", "paper"])
def test_modernbert_local_and_global_layers_keep_their_masks_in_every_evaluation(mode):
    """Sequences of 12 with a local window of 4 (shorter than the sequence): the flow at M=3 equals the hand-integrated
    base stack, whose forward picks each layer's mask and rotary embeddings by its attention_type."""
    base = make_base("modernbert", "ModernBertModel", attn_implementation="eager")
    assert base.config.layer_types == ["full_attention", "sliding_attention"]
    ids, mask = _padded_ids()
    assert base.config.local_attention < ids.shape[1]
    layers = base.layers
    x0, stack, handles = _stack_map(lambda: base(ids, attention_mask=mask), layers[0], layers[-1])
    try:
        expected, expected_reg = _euler_reference(stack, x0, 3, mode == "paper", base.final_norm, mask)
    finally:
        for h in handles:
            h.remove()
    model = hf_ot.convert(base, ot_num_steps=3, ot_mode=mode).eval()
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_reg=True)
    valid = mask.bool()
    assert (out.last_hidden_state - expected)[valid].abs().max().item() <= TOL
    assert torch.allclose(out.reg, expected_reg, rtol=1e-5, atol=1e-7)
    # the local window really cuts attention here: all-global layers give another function
    full = make_base(
        "modernbert", "ModernBertModel", attn_implementation="eager", layer_types=["full_attention", "full_attention"]
    )
    model_full = hf_ot.convert(full, ot_num_steps=3, ot_mode=mode).eval()
    with torch.no_grad():
        other = model_full(ids, attention_mask=mask).last_hidden_state
    assert (other - out.last_hidden_state)[valid].abs().max().item() > 1e-4


@pytest.mark.parametrize(
    "family,class_name,final_norm",
    [
        ("mbart", "MBartForConditionalGeneration", "layer_norm"),
        ("mt5", "MT5ForConditionalGeneration", "final_layer_norm"),
        ("marian", "MarianMTModel", None),
    ],
)
def test_paper_mode_final_norm_is_inside_the_field(family, class_name, final_norm):
    """Paper mode: f(X) = final_norm(S(X)) and the stack returns X(T) (no norm after); against the hand-integrated
    base encoder, and the decoder gets the same treatment (its output differs from residual mode)."""
    base = make_base(family, class_name)
    ids, mask = _padded_ids()
    encoder = base.get_encoder()
    blocks = encoder.block if family == "mt5" else encoder.layers
    norm = getattr(encoder, final_norm) if final_norm else None
    x0, stack, handles = _stack_map(lambda: encoder(input_ids=ids, attention_mask=mask), blocks[0], blocks[-1])
    try:
        expected, expected_reg = _euler_reference(stack, x0, 2, True, norm, mask)
    finally:
        for h in handles:
            h.remove()
    model = hf_ot.convert(base, ot_num_steps=2, ot_decoder_num_steps=1, ot_mode="paper").eval()
    norm_module = getattr(model.get_encoder(), final_norm) if final_norm else None
    dec = torch.randint(4, 99, (2, 5), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_reg=True)
    valid = mask.bool()
    assert (out.encoder_last_hidden_state - expected)[valid].abs().max().item() <= TOL
    assert out.reg.item() > expected_reg.item()  # encoder reg plus the decoder's
    if final_norm:  # the norm is back in its place after the forward (PEFT and state_dict see the base model)
        assert getattr(model.get_encoder(), final_norm) is norm_module


def test_marian_sinusoidal_positions_survive_conversion_and_reload(tmp_path):
    """Marian does not save its sinusoidal position tables (transformers recomputes them at load): the OT model built
    from a saved folder, and reloaded from its own, holds the sinusoid (hand-computed)."""
    base = make_base("marian", "MarianMTModel")
    base.save_pretrained(tmp_path / "base")
    model = hf_ot.convert(str(tmp_path / "base"))
    assert model.ot_loading_info == {"missing_keys": [], "unexpected_keys": []}
    model.save_pretrained(tmp_path / "ot")
    again = type(model).from_pretrained(tmp_path / "ot")
    n, dim = base.config.max_position_embeddings, base.config.d_model
    pos = torch.arange(n, dtype=torch.float64).unsqueeze(1)
    rate = torch.tensor([10000 ** (2 * (j // 2) / dim) for j in range(dim)], dtype=torch.float64)
    angles = pos / rate
    sinusoid = torch.cat([angles[:, 0::2].sin(), angles[:, 1::2].cos()], dim=1).float()
    for m in (model, again):
        for stack in (m.model.encoder, m.model.decoder):
            assert torch.allclose(stack.embed_positions.weight, sinusoid, atol=1e-6)


@pytest.mark.parametrize("family,class_name", ENCODER_HEADS + SEQ2SEQ_HEADS)
def test_convert_from_a_loaded_model_picks_the_class_and_equals_the_base(family, class_name):
    base = make_base(family, class_name)
    model = hf_ot.convert(base).eval()
    assert type(model).__name__ == "OT" + class_name
    assert model.config.architectures == ["OT" + class_name]
    assert model.ot_loading_info == {"missing_keys": [], "unexpected_keys": []}
    ids, mask = _padded_ids(length=9)
    inputs = {"input_ids": ids, "attention_mask": mask}
    if base.config.is_encoder_decoder and not class_name.endswith("EncoderModel"):
        inputs["decoder_input_ids"] = ids[:, :5].clamp(min=4)
    with torch.no_grad():
        a, b = base(**inputs), model(**inputs)
    main = "logits" if "logits" in a else "last_hidden_state"
    assert (a[main] - b[main]).abs().max().item() <= TOL


def test_mt5_encoder_only_converts_and_matches_the_encoder_of_the_full_model(tmp_path):
    """An MT5EncoderModel checkpoint becomes OTMT5EncoderModel (from `architectures`), and at M=3 it computes what the
    encoder of the OT seq2seq model with the same weights computes (outputs and reg)."""
    full = make_base("mt5", "MT5ForConditionalGeneration")
    encoder_only = make_base("mt5", "MT5EncoderModel")  # its own config: MT5EncoderModel edits the one it gets
    result = encoder_only.load_state_dict(full.state_dict(), strict=False)
    assert not result.missing_keys
    encoder_only.save_pretrained(tmp_path)
    model = hf_ot.convert(str(tmp_path), ot_num_steps=3, ot_solver="heun").eval()
    assert type(model).__name__ == "OTMT5EncoderModel"
    assert model.ot_loading_info == {"missing_keys": [], "unexpected_keys": []}
    ot_full = hf_ot.convert(full, ot_num_steps=3, ot_solver="heun", ot_decoder_num_steps=1).eval()
    ids, mask = _padded_ids()
    with torch.no_grad():
        enc = model(input_ids=ids, attention_mask=mask, output_reg=True)
        ref = ot_full.get_encoder()(input_ids=ids, attention_mask=mask)
        seq = ot_full(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :1], output_reg=True)
    assert torch.allclose(enc.last_hidden_state, ref.last_hidden_state, atol=TOL)
    assert torch.allclose(enc.last_hidden_state, seq.encoder_last_hidden_state, atol=TOL)
    assert enc.reg.item() > 0 and seq.reg.item() > enc.reg.item()


@pytest.mark.parametrize(
    "family,class_name", [("mbart", "MBartForConditionalGeneration"), ("bart", "BartForConditionalGeneration")]
)
def test_conditional_generation_serves_seq2seq_lm(tmp_path, family, class_name):
    """transformers maps (m)BART's ForConditionalGeneration for both AutoModelForSeq2SeqLM and AutoModelForMaskedLM:
    the OT class serves both, task='seq2seq-lm' converts, and a saved folder loads with AutoModelForSeq2SeqLM."""
    model = hf_ot.convert(make_base(family, class_name), task="seq2seq-lm")
    assert type(model).__name__ == "OT" + class_name
    model.save_pretrained(tmp_path)
    assert type(AutoModelForSeq2SeqLM.from_pretrained(tmp_path)) is type(model)
    assert model.config.auto_map["AutoModelForSeq2SeqLM"].endswith("OT" + class_name)
    assert task_of(model) == "seq2seq-lm"  # its model card's pipeline tag


@pytest.mark.parametrize(
    "family,class_name",
    [("roberta", "RobertaModel"), ("xlm-roberta", "XLMRobertaForMaskedLM"), ("electra", "ElectraModel")],
)
def test_encoder_used_as_decoder_is_refused_at_conversion(family, class_name):
    base = make_base(family, class_name, is_decoder=True)
    with pytest.raises(ValueError, match="encoder-only: is_decoder"):
        hf_ot.convert(base)
