"""LoRA on every OT family through PEFT's defaults for the OT model types: train, save, reload, merge, generate."""

import pytest
import torch
from conftest import make_base
from peft import LoraConfig, PeftModel, get_peft_model

import hf_ot
from hf_ot.training import OTTrainer, OTTrainingArguments

CASES = [
    ("gpt2", "GPT2LMHeadModel", ["c_attn"]),
    ("bert", "BertForSequenceClassification", ["query", "value"]),
    ("t5", "T5ForConditionalGeneration", ["q", "v"]),
    ("bart", "BartForConditionalGeneration", ["q_proj", "v_proj"]),
]


def batch_for(model, n=8, length=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 99, (n, length), generator=g)
    batch = {"input_ids": ids}
    if model.config.is_encoder_decoder:
        batch["labels"] = torch.randint(4, 99, (n, 5), generator=g)
    elif "SequenceClassification" in type(model).__name__:
        batch["labels"] = torch.randint(0, 2, (n,), generator=g)
    else:
        batch["labels"] = ids
    return batch


def fresh(family, class_name):
    return hf_ot.convert(make_base(family, class_name), ot_num_steps=2, ot_solver="heun")


@pytest.mark.parametrize("family,class_name,targets", CASES)
def test_lora_trains_saves_reloads_and_merges(tmp_path, family, class_name, targets):
    model = get_peft_model(fresh(family, class_name), LoraConfig(r=4, lora_alpha=8, init_lora_weights=False))
    wrapped = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if hasattr(m, "lora_A")}
    assert wrapped == set(targets)  # PEFT's base-family defaults, found through the OT model type
    rows = batch_for(model.base_model.model)
    from datasets import Dataset

    ds = Dataset.from_dict({k: v.tolist() for k, v in rows.items()})
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora" in n}
    trainer = OTTrainer(
        model=model,
        train_dataset=ds,
        args=OTTrainingArguments(
            output_dir=str(tmp_path / "t"),
            max_steps=3,
            per_device_train_batch_size=4,
            learning_rate=1e-2,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
        ),
    )
    trainer.train()
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters() if "lora" in n)
    model.eval()
    probe = {k: v[:2] for k, v in rows.items() if k != "labels"}
    if model.base_model.model.config.is_encoder_decoder:
        probe["decoder_input_ids"] = rows["labels"][:2]
    with torch.no_grad():
        expected = model(**probe, output_reg=True)
    model.save_pretrained(tmp_path / "adapter")
    reloaded = PeftModel.from_pretrained(fresh(family, class_name), tmp_path / "adapter").eval()
    with torch.no_grad():
        out = reloaded(**probe, output_reg=True)
        assert torch.allclose(out.logits, expected.logits, atol=1e-6)
        assert torch.allclose(out.reg, expected.reg, atol=1e-7)
        merged = reloaded.merge_and_unload()
        assert type(merged).__name__ == "OT" + class_name
        assert torch.allclose(merged(**probe).logits, expected.logits, atol=1e-5)


@pytest.mark.parametrize("family,class_name", [("gpt2", "GPT2LMHeadModel"), ("t5", "T5ForConditionalGeneration")])
def test_lora_decoder_generates(family, class_name):
    model = get_peft_model(fresh(family, class_name), LoraConfig(r=4, init_lora_weights=False)).eval()
    ids = torch.randint(4, 99, (2, 6), generator=torch.Generator().manual_seed(0))
    kw = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0)
    cached = model.generate(input_ids=ids, **kw)
    uncached = model.generate(input_ids=ids, use_cache=False, **kw)
    assert torch.equal(cached, uncached)


def test_other_name_based_peft_method_ia3():
    from peft import IA3Config

    model = get_peft_model(fresh("gpt2", "GPT2LMHeadModel"), IA3Config())
    wrapped = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if hasattr(m, "ia3_l")}
    assert wrapped == {"c_attn", "c_proj"}  # gpt2 IA3 defaults: c_attn, mlp.c_proj
    out = model(input_ids=torch.randint(4, 99, (2, 5)), output_reg=True)
    assert torch.isfinite(out.reg)


def _one_head_per_family():
    """Each family's language-model head (the one trained with labels), else its first head."""
    from conftest import HEADS

    lm = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForConditionalGeneration", "MTModel")
    chosen = {}
    for family, class_name in HEADS:
        if family not in chosen or (class_name.endswith(lm) and not chosen[family].endswith(lm)):
            chosen[family] = class_name
    return sorted(chosen.items())


@pytest.mark.parametrize("family,class_name", _one_head_per_family())
def test_lora_default_targets_match_the_base_family(family, class_name):
    """PEFT's defaults for the OT type are the base type's: LoRA wraps the same modules as on the base model, starts
    as the identity (B = 0), and trains (gradients reach the adapters)."""
    base = make_base(family, class_name)
    model = hf_ot.convert(base, ot_num_steps=2, ot_solver="heun")
    # the reference: LoRA on the base model with PEFT's default for the base type (hf_ot's where PEFT has none)
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as peft_defaults

    from hf_ot.peft_defaults import LORA_TARGETS_PEFT_LACKS

    targets = None if base.config.model_type in peft_defaults else LORA_TARGETS_PEFT_LACKS[base.config.model_type]
    expected = {
        n
        for n, m in get_peft_model(
            make_base(family, class_name), LoraConfig(r=4, target_modules=targets)
        ).named_modules()
        if hasattr(m, "lora_A")
    }
    lora = get_peft_model(model, LoraConfig(r=4))
    wrapped = {n for n, m in lora.named_modules() if hasattr(m, "lora_A")}
    assert wrapped and wrapped == expected
    batch = batch_for(model)
    reference = hf_ot.convert(make_base(family, class_name), ot_num_steps=2, ot_solver="heun").eval()
    lora.eval()
    with torch.no_grad():
        probe = {k: v for k, v in batch.items() if k != "labels"}
        if model.config.is_encoder_decoder:
            probe["decoder_input_ids"] = batch["labels"]
        out, ref = lora(**probe), reference(**probe)
    main = out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state
    ref_main = ref.logits if getattr(ref, "logits", None) is not None else ref.last_hidden_state
    assert torch.allclose(main, ref_main, atol=1e-6)
    lora.train()
    if class_name.endswith(("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForConditionalGeneration", "MTModel")):
        out = lora(**batch)
        (out.loss + out.reg).backward()
        grads = [p.grad for n, p in lora.named_parameters() if "lora_" in n]
        assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
