"""Defects a probe of hf_ot from Python (a transformers / PEFT / Trainer user) found; each test fails before its fix."""

import pytest
import torch
from conftest import make_base
from datasets import Dataset
from transformers.trainer_pt_utils import LabelSmoother

import hf_ot
from hf_ot import OTTrainer, OTTrainingArguments


def _lm_data():
    ids = torch.randint(4, 99, (8, 10), generator=torch.Generator().manual_seed(0)).tolist()
    return Dataset.from_dict({"input_ids": ids, "labels": ids})


def _smoothed_loss(outputs, labels, num_items_in_batch=None):
    return LabelSmoother(epsilon=0.1)(outputs, labels, shift_labels=True)


# OTTrainer(args=OTTrainingArguments(..., label_smoothing_factor=0.1)).evaluate() (or compute_loss_func=...) raised
# "OTGPT2LMHeadModel returned no `reg`": Trainer takes the labels out of the inputs for its own loss, and an
# evaluation forward without labels returned no reg. It should evaluate: eval_loss = the smoothed loss + lambda * reg.
@pytest.mark.parametrize("how", ["label_smoothing_factor", "compute_loss_func"])
def test_evaluation_with_trainers_own_loss_gets_reg(tmp_path, how):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2, reg_lambda=0.5)
    data = _lm_data()
    smoothing = {"label_smoothing_factor": 0.1} if how == "label_smoothing_factor" else {}
    loss_func = {"compute_loss_func": _smoothed_loss} if how == "compute_loss_func" else {}
    args = OTTrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=8, report_to=[], **smoothing)
    metrics = OTTrainer(model=model, args=args, eval_dataset=data, **loss_func).evaluate()
    with torch.no_grad():
        reg = model.eval()(input_ids=torch.tensor(data["input_ids"]), output_reg=True).reg
    assert metrics["eval_reg"] == pytest.approx(reg.item(), rel=1e-4, abs=1e-6)


# OTTrainer with label_smoothing_factor=0.1 on an OT causal LM scored each position against its own token: Trainer
# shifts the labels only for the classes in its causal-LM mapping, which OT classes are not in, so training minimised
# the wrong objective, silently. It should train (and evaluate) the smoothed next-token loss + lambda * reg.
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_label_smoothing_of_an_ot_causal_lm_predicts_the_next_token(tmp_path, mode):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2, reg_lambda=0.5)
    args = OTTrainingArguments(output_dir=str(tmp_path), report_to=[], label_smoothing_factor=0.1)
    trainer = OTTrainer(model=model, args=args)
    batch = {k: torch.tensor(v) for k, v in _lm_data()[:4].items()}
    model.train(mode == "train")
    with torch.no_grad():
        loss = trainer.compute_loss(model, dict(batch))
        out = model(input_ids=batch["input_ids"], output_reg=True)
    expected = _smoothed_loss(out, batch["labels"]) + 0.5 * out.reg
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def _two_sets():
    g = torch.Generator().manual_seed(1)
    first, second = torch.randint(4, 99, (4, 10), generator=g).tolist(), torch.randint(4, 20, (4, 10), generator=g)
    return (Dataset.from_dict({"input_ids": ids, "labels": ids}) for ids in (first, second.tolist()))


def _task_loss_and_reg(model, data):
    ids = torch.tensor(data["input_ids"])
    with torch.no_grad():
        out = model.eval()(input_ids=ids, labels=ids)
    return out.loss.item(), out.reg.item()


# trainer.predict(B) then trainer.evaluate(A): eval_task_loss and eval_reg were those of A and B together (predict
# left its batches' sums for the next evaluation's log), and predict's metrics had neither. Each should be its own.
def test_predict_then_evaluate_reports_each_sets_own_task_loss_and_reg(tmp_path):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2)
    first, second = _two_sets()
    args = OTTrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=4, report_to=[])
    trainer = OTTrainer(model=model, args=args)
    predicted = trainer.predict(second).metrics
    evaluated = trainer.evaluate(first)
    for metrics, prefix, data in ((predicted, "test", second), (evaluated, "eval", first)):
        task, reg = _task_loss_and_reg(model, data)
        assert metrics[f"{prefix}_task_loss"] == pytest.approx(task, rel=1e-5)
        assert metrics[f"{prefix}_reg"] == pytest.approx(reg, rel=1e-4, abs=1e-6)


# OTTrainer(eval_dataset={"a": A, "b": B}) logged both sets' task loss and reg as eval_task_loss / eval_reg (and
# evaluate(metric_key_prefix="test") as eval_*), so metric_for_best_model="eval_b_task_loss" raised a KeyError. They
# should carry the evaluation's prefix, as eval_a_loss does.
def test_task_loss_and_reg_carry_the_evaluations_metric_prefix(tmp_path):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2)
    first, second = _two_sets()
    expected = {name: _task_loss_and_reg(model, data) for name, data in (("a", first), ("b", second))}
    args = OTTrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=4, report_to=[])
    trainer = OTTrainer(model=model, args=args, eval_dataset={"a": first, "b": second})
    metrics = trainer.evaluate()
    for name, (task, reg) in expected.items():
        assert metrics[f"eval_{name}_task_loss"] == pytest.approx(task, rel=1e-5)
        assert metrics[f"eval_{name}_reg"] == pytest.approx(reg, rel=1e-4, abs=1e-6)
    assert "eval_task_loss" not in metrics


# OTSeq2SeqTrainer(args=OTSeq2SeqTrainingArguments(predict_with_generate=True), compute_metrics=...).evaluate():
# eval_loss was the task loss alone (Seq2SeqTrainer's generation path takes it from a plain forward) and eval_task_loss
# / eval_reg were missing. It should report what OTTrainer reports: eval_loss = task loss + lambda * reg, and both.
def test_evaluation_that_generates_reports_the_ot_objective(tmp_path):
    model = hf_ot.convert(make_base("t5", "T5ForConditionalGeneration"), num_steps=2, reg_lambda=0.5)
    g = torch.Generator().manual_seed(2)
    source, target = torch.randint(4, 99, (4, 9), generator=g), torch.randint(4, 99, (4, 5), generator=g)
    data = Dataset.from_dict({"input_ids": source.tolist(), "labels": target.tolist()})
    args = hf_ot.OTSeq2SeqTrainingArguments(
        output_dir=str(tmp_path), per_device_eval_batch_size=4, report_to=[], predict_with_generate=True
    )
    args.generation_max_length = 4
    trainer = hf_ot.OTSeq2SeqTrainer(model=model, args=args, compute_metrics=lambda p: {"rows": len(p.predictions)})
    metrics = trainer.evaluate(data)
    with torch.no_grad():
        out = model.eval()(input_ids=source, labels=target)
    assert metrics["eval_rows"] == 4
    assert metrics["eval_task_loss"] == pytest.approx(out.loss.item(), rel=1e-5)
    assert metrics["eval_reg"] == pytest.approx(out.reg.item(), rel=1e-4, abs=1e-6)
    assert metrics["eval_loss"] == pytest.approx((out.loss + 0.5 * out.reg).item(), rel=1e-5)


# transformers.Trainer(args=TrainingArguments(label_smoothing_factor=0.1)) training an OT causal LM with
# config.ot_reg_in_loss = True trained without a word a loss without reg and against unshifted labels (Trainer computes
# the smoothed loss from the logits itself, shifting only its own causal-LM classes). It should warn, naming OTTrainer.
def test_a_plain_trainers_label_smoothing_on_an_ot_model_is_warned_about(tmp_path):
    from transformers import Trainer, TrainingArguments

    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2, reg_lambda=0.5, ot_reg_in_loss=True)
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, report_to=[], save_strategy="no", label_smoothing_factor=0.1
    )
    with pytest.warns(hf_ot.RegNotTrainedWarning, match=r"without labels.*label smoother.*reg.*shift.*OTTrainer"):
        Trainer(model=model, args=args, train_dataset=_lm_data()).train()


# hf_ot.convert(get_peft_model(base, LoraConfig(...))) raised "TypeError: stat: path should be string, bytes,
# os.PathLike or integer, not PeftModel" (and the same for torch.compile(base)). It should say what convert takes and
# the fix: convert the base model first (or merge the adapter), then add adapters or compile.
@pytest.mark.parametrize("wrapper", ["peft", "compile"])
def test_convert_of_a_wrapped_model_names_the_fix(wrapper):
    from peft import LoraConfig, get_peft_model

    base = make_base("gpt2", "GPT2LMHeadModel")
    if wrapper == "peft":
        wrapped, hint = get_peft_model(base, LoraConfig(r=2, target_modules=["c_attn"], fan_in_fan_out=True)), "merge"
    else:
        wrapped, hint = torch.compile(base, backend="eager"), "compile"
    with pytest.raises((TypeError, ValueError), match=rf"hf_ot.convert.*{type(wrapped).__name__}.*{hint}"):
        hf_ot.convert(wrapped)


# hf_ot.save_model(model, DIR, max_shard_size="20KB") failed with "render_model_card() got an unexpected keyword
# argument 'max_shard_size'" after the weights were written. save_pretrained's options should reach save_pretrained,
# and a keyword neither takes should be refused before anything is written, naming the keywords.
def test_save_model_passes_save_pretrained_options_and_refuses_unknown_keywords(tmp_path):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2)
    folder = hf_ot.save_model(model, tmp_path / "sharded", max_shard_size="20KB", license="mit")
    assert len(list(folder.glob("model-*.safetensors"))) > 1
    with pytest.raises(TypeError, match=r"licence.*license"):
        hf_ot.save_model(model, tmp_path / "misspelt", licence="mit")
    assert not (tmp_path / "misspelt").exists()


# hf_ot.calibrate(model, [{"input_ids": ids}]) (batches without labels) failed inside the grid with "float() argument
# must be a string or a real number, not 'NoneType'". It should be refused first, saying every batch needs labels.
def test_calibrate_refuses_batches_without_labels():
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2)
    ids = torch.randint(4, 99, (2, 8), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="labels"):
        hf_ot.calibrate(model, [{"input_ids": ids, "labels": ids}, {"input_ids": ids}], progress=False, max_steps=1)


# hf_ot.calibrate(causal_lm, batches, metric="accuracy") compared each position's argmax with its own token (0.95 for
# a random tiny GPT-2, whose logits favour the input token) and counted -100 labels as misses. It should be the
# next-token accuracy over the labels that count, as the loss is.
def test_calibrates_accuracy_of_a_causal_lm_is_next_token_accuracy_over_counted_labels():
    from hf_ot.calibration import evaluate_batches

    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2).eval()
    ids = torch.randint(4, 99, (3, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        predicted = model(input_ids=ids).logits[:, :-1].argmax(-1)
    labels = ids.clone()
    labels[:, 1:5] = predicted[:, :4]  # the model's own next-token choice at 4 of 9 positions
    labels[0, 6:] = -100
    counted = labels[:, 1:] != -100
    expected = (predicted == labels[:, 1:])[counted].float().mean().item()
    accuracy, _ = evaluate_batches(model, [{"input_ids": ids, "labels": labels}], "accuracy")
    assert 0.4 < expected < 0.9 and accuracy == pytest.approx(expected)


# copy.deepcopy(OTTrainingArguments(..., hub_token="hf_x")) (or copy.copy) gave hub_token=None: the pickled copy that
# leaves credentials out of training_args.bin was also what copying used. A copy should keep every value.
@pytest.mark.parametrize("how", ["copy", "deepcopy"])
def test_a_copy_of_training_arguments_keeps_the_token_a_pickle_leaves_out(tmp_path, how):
    import copy
    import pickle

    args = OTTrainingArguments(output_dir=str(tmp_path), hub_token="hf_probe_value", ot_lambda=0.5, report_to=[])
    copied = getattr(copy, how)(args)
    assert (copied.hub_token, copied.ot_lambda) == ("hf_probe_value", 0.5)
    assert pickle.loads(pickle.dumps(args)).hub_token is None


# get_peft_model(ot_causal_lm, PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=3)) then a forward raised
# "This KV cache has 2 layers ... Let the model build its cache ...", advice a PEFT user cannot follow. It should say
# that prefix tuning (one prefix per block) does not apply to an OT model, and what does (prompt tuning, LoRA).
def test_prefix_tuning_is_refused_naming_the_peft_methods_that_work():
    from peft import PrefixTuningConfig, get_peft_model

    model = hf_ot.convert(make_base("llama", "LlamaForCausalLM"), num_steps=2)
    ids = torch.randint(4, 99, (2, 6), generator=torch.Generator().manual_seed(0))
    prefixed = get_peft_model(model, PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=3))
    with pytest.raises(ValueError, match=r"(?s)prefix tuning.*prompt tuning.*LoRA"):
        prefixed(input_ids=ids, labels=ids)


# hf_ot.convert(folder, dtyp=torch.bfloat16) (or attn_implmentation="eager", num_label=3) failed with
# "GPT2LMHeadModel.__init__() got an unexpected keyword argument 'dtyp'", naming neither convert nor a fix, although a
# misspelt keyword is to be named with the closest one. It should be, as convert's own misspelt parameters are.
@pytest.mark.parametrize(("given", "meant"), [("dtyp", "dtype"), ("attn_implmentation", "attn_implementation")])
def test_convert_names_the_closest_keyword_to_a_misspelt_loading_keyword(tmp_path, given, meant):
    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(tmp_path / "base")
    with pytest.raises(ValueError, match=rf"hf_ot.convert.*'{given}'.*did you mean '?{meant}'?"):
        hf_ot.convert(str(tmp_path / "base"), **{given: "eager"})


# OTTrainingArguments(..., max_grad_norm=None) passed the early check (None was taken for "do not clip"), then
# OTTrainer.train() failed at the first optimizer step with "'>' not supported between instances of 'NoneType' and
# 'int'" (transformers 5.25 compares it with 0). It should be refused when the arguments are made, naming 0 for no
# clipping.
def test_max_grad_norm_none_is_refused_naming_zero_for_no_clipping(tmp_path):
    with pytest.raises(ValueError, match=r"max_grad_norm.*None.*0"):
        OTTrainingArguments(output_dir=str(tmp_path), max_grad_norm=None, report_to=[])
