"""Depth-speculative decoding: a draft of the same field at fewer solver steps, verified at the model's setting by
transformers' assisted decoding. Greedy output equals plain generation for every generative family, cached, with its
own KV cache, through trust_remote_code too; nothing is written on the model's config or modules."""

import textwrap
from pathlib import Path

import pytest
import torch
from conftest import (
    DECODER_LM_HEADS,
    REPO,
    SEQ2SEQ_LM_HEADS,
    is_encoder_decoder,
    make_base,
    make_inputs,
)
from helpers import WITHOUT_HF_OT, raises_naming, results_of_fresh_python

import hf_ot
from hf_ot.hub import save_model

GENERATIVE_HEADS = DECODER_LM_HEADS + SEQ2SEQ_LM_HEADS


def prompt(family, left_pad=0):
    inputs = make_inputs(family, batch=1, src_len=7)
    inputs.pop("decoder_input_ids", None)
    if left_pad and not is_encoder_decoder(family):
        inputs["input_ids"][0, :left_pad] = 0
        inputs["attention_mask"][0, :left_pad] = 0
    return inputs


@pytest.mark.parametrize("family,class_name", GENERATIVE_HEADS)
def test_greedy_speculative_equals_plain_generation(family, class_name):
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=3, ot_solver="euler").eval()
    before = model.config.to_dict()
    common = dict(max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=0)
    for left_pad in (0, 2):
        inputs = prompt(family, left_pad)
        plain = model.generate(**inputs, **common)
        for steps, solver in ((1, "heun"), (1, "euler"), (2, "rk4")):
            spec = model.generate(**inputs, **common, draft_num_steps=steps, draft_solver=solver)
            assert torch.equal(spec, plain), (family, steps, solver, left_pad)
    assert model.config.to_dict() == before  # per-call settings live on the draft's own config copy


def test_draft_shares_the_weights_and_keeps_its_own_settings_and_cache():
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=4, ot_solver="euler").eval()
    draft = model.ot_draft_model(ot_num_steps=1, ot_solver="heun", num_draft_tokens=3)
    assert draft.lm_head.weight is model.lm_head.weight
    assert dict(draft.named_parameters()).keys() == dict(model.named_parameters()).keys()
    assert (draft.config.ot_num_steps, draft.config.ot_solver) == (1, "heun")
    assert (model.config.ot_num_steps, model.config.ot_solver) == (4, "euler")
    assert draft.generation_config is not model.generation_config
    assert draft.generation_config.num_assistant_tokens == 3
    ids = prompt("gpt2")["input_ids"]
    with torch.no_grad():
        out = draft(ids, use_cache=True)
        cache = out.past_key_values
        assert cache._ot_settings[:3] == (1, 1.0, "heun")
        assert len(cache.layers) == 1 * 2 * model.config.n_layer  # the draft's own grid: M'=1, 2 Heun stages
        model.config.ot_num_steps = 1
        model.config.ot_solver = "heun"
        torch.testing.assert_close(model(ids).logits, out.logits)  # the draft is the model at the draft setting
    plain = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    with_assistant = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0, assistant_model=draft)
    assert torch.equal(plain, with_assistant)


def test_sampling_with_a_draft_runs_and_bad_drafts_are_refused():
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2).eval()
    ids = prompt("gpt2")["input_ids"]
    torch.manual_seed(0)
    out = model.generate(
        ids, max_new_tokens=6, min_new_tokens=6, do_sample=True, top_k=10, pad_token_id=0, draft_num_steps=1
    )
    assert out.shape == (1, ids.shape[1] + 6)
    with pytest.raises(ValueError, match="draft_solver='bosh3' is adaptive"):
        model.generate(ids, max_new_tokens=2, draft_solver="bosh3")
    with pytest.raises(ValueError, match=r"^draft_num_steps\b.*1 to 1024"):
        model.generate(ids, max_new_tokens=2, draft_num_steps=0)
    with pytest.raises(ValueError, match="^draft_solver must be one of"):
        model.generate(ids, max_new_tokens=2, draft_solver="rk5")
    with raises_naming(ValueError, "ot_num_steps", "1 to 1024"):
        model.ot_draft_model(ot_num_steps=0)
    with pytest.raises(ValueError, match="either draft_num_steps"):
        model.generate(ids, max_new_tokens=2, draft_num_steps=1, assistant_model=model.ot_draft_model())


def test_draft_model_takes_the_ot_names_and_warns_on_the_earlier_ones():
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2).eval()
    with pytest.warns(hf_ot.OTDeprecationWarning, match="ot_num_steps="):
        assert model.ot_draft_model(num_steps=3).config.ot_num_steps == 3
    with pytest.warns(hf_ot.OTDeprecationWarning, match="ot_solver="):
        assert model.ot_draft_model(solver="rk4").config.ot_solver == "rk4"
    with pytest.raises(ValueError, match="num_steps=3.*ot_num_steps=1"):
        model.ot_draft_model(num_steps=3, ot_num_steps=1)


REMOTE = WITHOUT_HF_OT + textwrap.dedent(
    """
    import json, sys
    import torch, transformers
    payload = torch.load(sys.argv[1], weights_only=False)
    results = {}
    for name, item in payload.items():
        auto = getattr(transformers, item["auto_class"])
        model = auto.from_pretrained(item["folder"], trust_remote_code=True).eval()
        spec = model.generate(**item["inputs"], max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0,
                              draft_num_steps=1, draft_solver="heun")
        model.config.ot_solver = "bosh3"
        with torch.no_grad():
            out = model(**item["inputs"], **item["extra"])
        results[name] = {"module": type(model).__module__, "equal": bool(torch.equal(spec, item["expected"])),
                         "evaluations": out.num_field_evaluations.tolist()}
    print("RESULTS" + json.dumps(results))
    """
)


def test_speculative_and_adaptive_through_trust_remote_code_without_hf_ot(tmp_path):
    payload = {}
    for family, class_name, auto in (
        ("gpt2", "GPT2LMHeadModel", "AutoModelForCausalLM"),
        ("bart", "BartForConditionalGeneration", "AutoModelForSeq2SeqLM"),
    ):
        model = hf_ot.convert(make_base(family, class_name), ot_num_steps=3).eval()
        folder = save_model(model, tmp_path / class_name)
        assert (Path(folder) / "ot_speculative.py").is_file()  # copied by save_pretrained (imported by ot_model.py)
        inputs = prompt(family)
        expected = model.generate(**inputs, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
        extra = {"decoder_input_ids": torch.tensor([[2, 5, 6]])} if family == "bart" else {}
        payload[class_name] = {
            "folder": str(folder),
            "auto_class": auto,
            "inputs": inputs,
            "expected": expected,
            "extra": extra,
        }
    torch.save(payload, tmp_path / "payload.pt")
    results = results_of_fresh_python(REMOTE, tmp_path / "payload.pt", REPO, cwd=tmp_path)
    for name, r in results.items():
        assert not r["module"].startswith("hf_ot") and r["equal"], (name, r)
        assert min(r["evaluations"]) >= 3, (name, r)


def test_num_draft_tokens_fixes_the_round_and_the_confidence_threshold_can_cut_it():
    """num_draft_tokens=k drafts k tokens every round (transformers' confidence stop off), while a confidence
    threshold stops a round at the first token the draft doubts (a random model doubts every token)."""
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=3, ot_solver="euler").eval()
    ids = prompt("gpt2")["input_ids"][:1]
    common = dict(max_new_tokens=20, min_new_tokens=20, do_sample=False, pad_token_id=0)
    plain = model.generate(ids, **common)

    def calls(**kwargs):
        counts = {"target": 0, "draft": 0}

        def count(module, args):
            counts["target" if module is model else "draft"] += 1

        handle = model.register_forward_pre_hook(count)  # the draft is a copy over the same hooks
        try:
            out = model.generate(ids, **common, draft_num_steps=1, draft_solver="euler", **kwargs)
        finally:
            handle.remove()
        assert torch.equal(out, plain)
        return counts

    fixed = calls(num_draft_tokens=4)
    # every round but the last drafts 4 tokens (the last stops at the length limit)
    assert fixed["draft"] >= 4 * (fixed["target"] - 1), fixed
    doubting = calls(num_draft_tokens=4, draft_confidence_threshold=0.99)
    assert doubting["draft"] == doubting["target"], doubting  # one token per round: the draft stops at its doubt
    with pytest.raises(ValueError, match="draft confidence threshold 1.5"):
        model.generate(ids, max_new_tokens=2, draft_confidence_threshold=1.5)
    with pytest.raises(ValueError, match="num_draft_tokens=0"):
        model.generate(ids, max_new_tokens=2, num_draft_tokens=0)


@pytest.mark.parametrize("family,class_name", SEQ2SEQ_LM_HEADS)
def test_draft_of_an_encoder_decoder_reuses_the_models_encoder_output(family, class_name):
    """transformers runs an encoder-decoder assistant's encoder itself: a depth draft of the model takes the model's
    encoder output instead (the encoder runs once per generate, as in plain generation, at the model's setting), and
    its decoder drafts at the draft setting. Generating on its own, a draft runs its encoder at the draft setting."""
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=3, ot_solver="euler").eval()
    inputs = prompt(family)
    flows = model.ot_flows()
    encoder_block = next(f for f in flows if f.role == "encoder")[0]
    decoder_block = next(f for f in flows if f.role == "decoder")[0]
    counts = {"encoder": 0, "decoder": 0}
    hooks = [
        encoder_block.register_forward_hook(lambda *a: counts.__setitem__("encoder", counts["encoder"] + 1)),
        decoder_block.register_forward_hook(lambda *a: counts.__setitem__("decoder", counts["decoder"] + 1)),
    ]
    common = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
    try:
        plain = model.generate(**inputs, **common)
        plain_encoder = counts["encoder"]
        assert plain_encoder == 3  # one encoder pass at M = 3, Euler
        counts.update(encoder=0, decoder=0)
        spec = model.generate(**inputs, **common, draft_num_steps=1, draft_solver="euler", num_draft_tokens=4)
        assert torch.equal(spec, plain)
        assert counts["encoder"] == plain_encoder, counts  # no second encoder pass for the draft
        draft = model.ot_draft_model(ot_num_steps=1, ot_solver="euler")
        counts.update(encoder=0)
        assert torch.equal(model.generate(**inputs, **common, assistant_model=draft), plain)
        assert counts["encoder"] == plain_encoder, counts
        counts.update(encoder=0)
        alone = draft.generate(**inputs, **common)
        assert counts["encoder"] == 1  # a draft generating on its own: its encoder at its own setting, M' = 1
        model.config.ot_num_steps = 1
        assert torch.equal(model.generate(**inputs, **common), alone)
    finally:
        for hook in hooks:
            hook.remove()


def test_a_draft_of_an_encoder_only_model_is_refused_clearly(converted):
    _, model = converted("bert", "BertModel")
    with pytest.raises(ValueError, match="does not generate"):
        model.ot_draft_model()


def test_num_draft_tokens_must_be_whole(converted):
    _, model = converted("gpt2", "GPT2LMHeadModel")
    for bad in (2.7, True, 0):
        with pytest.raises(ValueError, match="num_draft_tokens"):
            model.ot_draft_model(num_draft_tokens=bad)
    with pytest.raises(ValueError, match="num_draft_tokens"):
        model.generate(torch.tensor([[5, 6]]), max_new_tokens=2, num_draft_tokens=2.7)
    for bad in ("abc", "0.5", True, float("nan")):  # a probability, not text parsed (or not) by float()
        with raises_naming(ValueError, "confidence threshold", repr(bad), "probability"):
            model.ot_draft_model(confidence_threshold=bad)
