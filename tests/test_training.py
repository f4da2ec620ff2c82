"""OTTrainer: loss = task + lambda * reg, gradient accumulation, resume, logging, lambda schedule, mixed precision."""

from pathlib import Path

import pytest
import torch
from conftest import make_base, set_flags, tiny_run
from datasets import Dataset
from helpers import Logs, args, assert_nothing_trained, cli_train, lm_dataset, ot_gpt2, quick_cfg, raises_naming
from transformers import TrainerCallback

import hf_ot
import hf_ot.models
from hf_ot.cli import main
from hf_ot.errors import NoTargets
from hf_ot.recipes import run_recipe
from hf_ot.training import OTTrainer, OTTrainingArguments, TrainingDiverged


def test_loss_is_task_loss_plus_lambda_reg(tmp_path):
    model = ot_gpt2().eval()
    ds = lm_dataset(4)
    trainer = OTTrainer(model=model, args=args(tmp_path))
    batch = {k: torch.tensor(ds[k]) for k in ("input_ids", "labels")}
    with torch.no_grad():
        out = model(**batch)
        loss = trainer.compute_loss(model, batch)
    assert torch.allclose(loss, out.loss + 0.5 * out.reg)


def test_the_training_argument_ot_lambda_is_a_deprecated_alias_of_the_model_configs(tmp_path):
    """lambda lives in the model config: the training argument is applied there once, at OTTrainer's construction,
    with a warning naming model.config.ot_lambda."""
    model = ot_gpt2().eval()
    batch = {k: torch.tensor(lm_dataset(4)[k]) for k in ("input_ids", "labels")}
    with pytest.warns(hf_ot.OTDeprecationWarning, match=r"model\.config\.ot_lambda"):
        trainer = OTTrainer(model=model, args=args(tmp_path, ot_lambda=2.0))
    assert model.config.ot_lambda == 2.0
    with torch.no_grad():
        out = model(**batch)
        assert torch.allclose(trainer.compute_loss(model, batch), out.loss + 2.0 * out.reg)


def one_step_params(
    tmp_path, batch, accumulation, trainer_cls=OTTrainer, model=None, equal_counts=False, reg_lambda=0.5, **kw
):
    logs = Logs()
    model = model if model is not None else ot_gpt2()
    model.config.ot_lambda = reg_lambda
    trainer = trainer_cls(
        model=model,
        args=args(
            tmp_path, per_device_train_batch_size=batch, max_steps=1, gradient_accumulation_steps=accumulation, **kw
        ),
        train_dataset=lm_dataset(8, equal_counts=equal_counts),
        callbacks=[logs],
    )
    trainer.train()
    step_log = next(log for log in logs.logs if "loss" in log and "train_runtime" not in log)
    return {n: p.detach().clone() for n, p in model.named_parameters()}, step_log


@pytest.mark.parametrize("equal_counts,reg_lambda", [(False, 0.0), (True, 0.5)])
def test_gradient_accumulation_matches_the_full_batch(tmp_path, equal_counts, reg_lambda):
    """The task loss is normalised by the step's token count (num_items_in_batch) whatever the rows' counts; reg,
    a mean over each micro-batch's positions, is weighted by the micro-batch's share of those tokens (the model's
    rule), which is the full batch's mean where the micro-batches count the same number of tokens."""
    full, full_log = one_step_params(tmp_path / "a", 8, 1, equal_counts=equal_counts, reg_lambda=reg_lambda)
    accumulated, acc_log = one_step_params(tmp_path / "b", 4, 2, equal_counts=equal_counts, reg_lambda=reg_lambda)
    for name in full:
        assert torch.allclose(full[name], accumulated[name], atol=1e-6), name
    assert full_log["task_loss"] == pytest.approx(acc_log["task_loss"], rel=1e-4)
    if equal_counts:
        assert full_log["reg"] == pytest.approx(acc_log["reg"], rel=1e-4)


def test_ot_trainer_weighs_reg_as_the_model_does_under_gradient_accumulation(tmp_path):
    """One weighting of reg under gradient accumulation: OTTrainer's step is the step of a plain Trainer on the
    model's own objective (config.ot_reg_in_loss), with micro-batches that count different numbers of tokens."""
    from transformers import Trainer

    ot, ot_log = one_step_params(tmp_path / "ot", 4, 2)
    plain, plain_log = one_step_params(tmp_path / "plain", 4, 2, trainer_cls=Trainer, model=switched(ot_gpt2()))
    for name in ot:
        assert torch.allclose(ot[name], plain[name], atol=1e-6), name
    assert ot_log["loss"] == pytest.approx(plain_log["loss"], rel=1e-5)


def test_the_trainer_internals_ot_trainer_reads_are_there(tmp_path):
    """OTTrainer._accumulation is the one place that reads Trainer internals, to weigh reg as Trainer weighs the loss
    under gradient accumulation. If transformers renames or drops one of them, this fails, not the weighting."""
    import inspect

    from transformers import Trainer

    trainer = OTTrainer(model=ot_gpt2(), args=args(tmp_path), train_dataset=lm_dataset(4))
    assert isinstance(trainer.model_accepts_loss_kwargs, bool) and trainer.model_accepts_loss_kwargs
    assert trainer.compute_loss_func is None
    assert getattr(Trainer, "loss_is_scaled_for_ga", None) is None  # absent before 5.2x; None: Trainer's own rule
    source = inspect.getsource(Trainer.training_step)
    for name in ("model_accepts_loss_kwargs", "compute_loss_func", "current_gradient_accumulation_steps"):
        assert name in source, f"Trainer.training_step no longer reads {name}: revisit OTTrainer._accumulation"
    assert "self.current_gradient_accumulation_steps =" in inspect.getsource(Trainer)


def test_logs_task_loss_reg_and_lambda_warmup(tmp_path):
    logs = Logs()
    trainer = OTTrainer(
        model=ot_gpt2(),
        args=args(
            tmp_path,
            per_device_train_batch_size=4,
            max_steps=4,
            ot_lambda_warmup_steps=2,
            eval_strategy="steps",
            eval_steps=2,
        ),
        train_dataset=lm_dataset(16),
        eval_dataset=lm_dataset(8, seed=1),
        callbacks=[logs],
    )
    trainer.train()
    train_logs = [log for log in logs.logs if "task_loss" in log]
    eval_logs = [log for log in logs.logs if "eval_task_loss" in log]
    assert len(train_logs) == 4 and len(eval_logs) == 2
    # lambda ramps 0 -> 0.5 over 2 steps; each log reports the lambda its step's loss used (step 1: 0)
    assert [log["ot_lambda"] for log in train_logs] == [0.0, 0.25, 0.5, 0.5]
    first = train_logs[0]
    assert first["loss"] == pytest.approx(first["task_loss"], rel=1e-5)  # lambda 0: the loss is the task loss
    for log in train_logs:
        assert log["reg"] > 0 and log["task_loss"] > 0
    for log in eval_logs:
        assert log["eval_loss"] == pytest.approx(log["eval_task_loss"] + 0.5 * log["eval_reg"], rel=1e-4)


def test_mixed_precision_bf16_on_cpu(tmp_path):
    logs = Logs()
    trainer = OTTrainer(
        model=ot_gpt2(),
        args=args(tmp_path, per_device_train_batch_size=4, max_steps=2, bf16=True),
        train_dataset=lm_dataset(8),
        callbacks=[logs],
    )
    trainer.train()
    train_logs = [log for log in logs.logs if "reg" in log]
    assert train_logs and all(torch.isfinite(torch.tensor(log["reg"])) for log in train_logs)


def test_bad_training_arguments(tmp_path):
    with raises_naming(ValueError, "ot_lambda", "from 0 to 1e+06"):
        args(tmp_path, ot_lambda=-1.0)
    with pytest.raises(ValueError, match="ot_lambda_warmup_steps"):
        args(tmp_path, ot_lambda_warmup_steps=-3)
    # max_steps=0 beside num_train_epochs: a ZeroDivisionError in Trainer's step callback, after the data was prepared
    with raises_naming(ValueError, "max_steps=0", "num_train_epochs=3", "no step", "max_steps unset"):
        args(tmp_path, max_steps=0, num_train_epochs=3)


def test_plain_model_is_refused(tmp_path):
    with raises_naming(ValueError, "GPT2LMHeadModel", "not an OT model", "transformers.Trainer"):
        OTTrainer(model=make_base("gpt2", "GPT2LMHeadModel"), args=args(tmp_path))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, 2e6])  # 2e6: above the config bound
def test_lambda_outside_the_config_bounds_is_refused(tmp_path, value):
    with raises_naming(ValueError, "ot_lambda", "from 0 to 1e+06"):
        args(tmp_path, ot_lambda=value)


class PoisonAt(TrainerCallback):
    """Sets one weight to NaN as optimizer step `step` begins (after the checkpoint of the step before was saved)."""

    def __init__(self, model, step):
        self.model, self.step = model, step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step - 1:
            with torch.no_grad():
                next(self.model.parameters()).view(-1)[0] = float("nan")


def test_diverged_run_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    from safetensors.torch import load_file

    from hf_ot.training import TrainingDiverged

    model = ot_gpt2()
    trainer = OTTrainer(
        model=model,
        args=args(tmp_path, per_device_train_batch_size=4, max_steps=6, save_strategy="steps", save_steps=2),
        train_dataset=lm_dataset(16),
        callbacks=[PoisonAt(model, 3)],
    )
    with raises_naming(TrainingDiverged, "step 3", "checkpoint-2", "--resume"):
        trainer.train()
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-2"]
    weights = load_file(tmp_path / "checkpoint-2" / "model.safetensors")
    assert all(torch.isfinite(w).all() for w in weights.values())
    assert trainer.state.global_step == 2  # the NaN step was never applied


# ------------------------------------------------------------------ ot_reg_in_loss: the model's loss is the objective


def switched(model, on=True):
    model.config.ot_reg_in_loss = on
    return model


def test_reg_is_never_counted_twice_with_the_switch(tmp_path):
    model = ot_gpt2().eval()
    model.config.ot_lambda = 1e4  # reg is ~5e-5 at initialisation: a large lambda makes a second count visible
    batch = {k: torch.tensor(lm_dataset(4)[k]) for k in ("input_ids", "labels")}
    with torch.no_grad():
        out = switched(model, False)(**batch)  # the reference: task loss and reg computed by the model
        trainer = OTTrainer(model=switched(model), args=args(tmp_path))
        loss = trainer.compute_loss(model, batch)
    assert 1e4 * out.reg > 0.1
    assert torch.allclose(loss, out.loss + 1e4 * out.reg)


def train_logs(tmp_path, trainer_cls, model, **kw):
    logs = Logs()
    arguments = args(tmp_path, per_device_train_batch_size=4, max_steps=3, **kw)
    trainer = trainer_cls(model=model, args=arguments, train_dataset=lm_dataset(12), callbacks=[logs])
    trainer.train()
    return [log for log in logs.logs if "loss" in log and "train_runtime" not in log], model


def test_plain_trainer_with_the_switch_trains_the_same_objective_as_ot_trainer(tmp_path):
    from transformers import Trainer, TrainingArguments

    ot_logs, ot_model = train_logs(tmp_path / "ot", OTTrainer, ot_gpt2())
    plain_args = {k: v for k, v in args(tmp_path).to_dict().items() if not k.startswith("ot_")}

    logs = Logs()
    plain_model = switched(ot_gpt2())
    trainer = Trainer(
        model=plain_model,
        args=TrainingArguments(
            **{
                **{
                    k: v
                    for k, v in plain_args.items()
                    if k in TrainingArguments.__dataclass_fields__ and TrainingArguments.__dataclass_fields__[k].init
                },
                "output_dir": str(tmp_path / "plain"),
                "per_device_train_batch_size": 4,
                "max_steps": 3,
            }
        ),
        train_dataset=lm_dataset(12),
        callbacks=[logs],
    )
    trainer.train()
    plain_logs = [log for log in logs.logs if "loss" in log and "train_runtime" not in log]
    assert len(ot_logs) == len(plain_logs) == 3
    for a, b in zip(ot_logs, plain_logs):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    for (name, p), q in zip(ot_model.named_parameters(), plain_model.parameters()):
        assert torch.allclose(p, q, atol=1e-6), name


def test_ot_trainer_with_the_switch_logs_task_loss_and_reg_as_without_it(tmp_path):
    off, _ = train_logs(tmp_path / "off", OTTrainer, ot_gpt2())
    on, _ = train_logs(tmp_path / "on", OTTrainer, switched(ot_gpt2()))
    for a, b in zip(off, on):
        for key in ("loss", "task_loss", "reg"):
            assert a[key] == pytest.approx(b[key], rel=1e-5), key


def test_ot_trainer_warms_lambda_up_with_the_switch_as_without_it(tmp_path):
    """OTTrainer passes the scheduled lambda to the model, which computes the objective with it whether or not its
    config puts reg into the loss: the switch changes nothing under OTTrainer, a warm-up included."""
    off, _ = train_logs(tmp_path / "off", OTTrainer, ot_gpt2(), ot_lambda_warmup_steps=2)
    on, _ = train_logs(tmp_path / "on", OTTrainer, switched(ot_gpt2()), ot_lambda_warmup_steps=2)
    assert [log["ot_lambda"] for log in on] == [0.0, 0.25, 0.5]
    for a, b in zip(off, on):
        for key in ("loss", "task_loss", "reg", "ot_lambda"):
            assert a[key] == pytest.approx(b[key], rel=1e-5), key


@pytest.mark.parametrize("switch", [False, True], ids=["trainer-adds-reg", "model-adds-reg"])
def test_a_step_under_gradient_accumulation_is_the_manual_objective(tmp_path, switch):
    """One optimizer step of 2 micro-batches of 4 rows that count the same number of tokens: its loss is the full
    batch's objective computed by hand, the mean next-token cross-entropy + lambda * reg (reg counted once)."""
    import torch.nn.functional as F

    model = switched(ot_gpt2(), switch)
    data = lm_dataset(8, equal_counts=True)
    ids, labels = torch.tensor(data["input_ids"]), torch.tensor(data["labels"])
    model.train()  # (no dropout in the tiny models: train mode computes what eval mode does)
    with torch.no_grad():
        out = model(input_ids=ids, output_reg=True)
        task = F.cross_entropy(out.logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
    expected = task.item() + 0.5 * out.reg.item()
    _, log = one_step_params(tmp_path, 4, 2, model=model, equal_counts=True)
    assert log["loss"] == pytest.approx(expected, rel=1e-5)
    assert log["task_loss"] == pytest.approx(task.item(), rel=1e-5)
    assert log["reg"] == pytest.approx(out.reg.item(), abs=1e-6)  # (logged to 6 decimals)


def test_the_padded_last_evaluation_batch_is_evaluated_on_its_data_rows(tmp_path, monkeypatch):
    """Where accelerate pads the last evaluation batch of a launch with copies of the first rows, the one forward
    runs on the data rows: the loss is their objective (by hand: the model on those rows alone), the eval means
    count them alone, and the predictions keep the batch's rows for Trainer's gather (which drops the copies)."""
    model = ot_gpt2().eval()
    data = lm_dataset(3)
    rows = {k: torch.tensor(data[k]) for k in ("input_ids", "labels")}
    padded = {k: torch.cat([v, v[:1]]) for k, v in rows.items()}  # a 4-row batch: 3 rows of data and a copy
    trainer = OTTrainer(model=model, args=args(tmp_path))
    monkeypatch.setattr(trainer, "_rows_of_data", lambda labels: 3)
    loss, logits, labels = trainer.prediction_step(model, padded, prediction_loss_only=False)
    with torch.no_grad():
        out = model(**rows)
    assert loss.item() == pytest.approx((out.loss + 0.5 * out.reg).item(), rel=1e-6)
    assert logits.shape[0] == 4 and torch.equal(labels[:3], rows["labels"])
    (task_sum, reg_sum, items), *more = trainer._ot_sums["eval"]  # weighed by the data rows' predicted tokens
    counted = rows["labels"][:, 1:].ne(-100).sum().item()
    assert not more and items.item() == counted
    assert (task_sum / items).item() == pytest.approx(out.loss.item(), rel=1e-6)
    assert (reg_sum / items).item() == pytest.approx(out.reg.item(), rel=1e-6)


def test_plain_trainer_compute_metrics_gets_the_logits_only(tmp_path):
    import numpy as np
    from transformers import Trainer, TrainingArguments

    model = hf_ot.convert(make_base("bert", "BertForSequenceClassification"), ot_num_steps=2)
    g = torch.Generator().manual_seed(0)
    ds = Dataset.from_dict(
        {"input_ids": torch.randint(4, 99, (6, 8), generator=g).tolist(), "labels": [0, 1, 0, 1, 1, 0]}
    )

    def accuracy(prediction):
        assert isinstance(prediction.predictions, np.ndarray)  # not a (logits, reg) tuple
        return {"accuracy": float((np.argmax(prediction.predictions, -1) == prediction.label_ids).mean())}

    trainer = Trainer(
        model=model,
        args=TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True, per_device_eval_batch_size=4),
        eval_dataset=ds,
        compute_metrics=accuracy,
    )
    metrics = trainer.evaluate()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(ds["input_ids"])).logits
    expected = float((logits.argmax(-1) == torch.tensor(ds["labels"])).float().mean())
    assert metrics["eval_accuracy"] == pytest.approx(expected)


# ------------------------------------------------------------------------- per-token losses counted by Trainer

from conftest import DECODER_LM_HEADS  # noqa: E402


@pytest.mark.parametrize("family,class_name", DECODER_LM_HEADS)
def test_trainer_evaluates_the_models_own_per_token_loss(tmp_path, family, class_name):
    """Trainer passes num_items_in_batch and divides the summed loss by it; it counts labels[..., 1:] only for the
    ForCausalLM loss type, which transformers derives from the class name (GPT2LMHeadModel names none). Reference:
    the model's own loss on the same single batch (a mean over predicted tokens)."""
    from transformers import Trainer, TrainingArguments, default_data_collator

    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=2).eval()
    ids = torch.randint(4, 99, (4, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        direct = model(input_ids=ids, labels=ids).loss.item()
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True, per_device_eval_batch_size=4)
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    evaluated = Trainer(model=model, args=args, eval_dataset=data, data_collator=default_data_collator).evaluate()
    assert evaluated["eval_loss"] == pytest.approx(direct, rel=1e-5)


def test_reg_share_of_an_ot_gpt2_counts_predicted_tokens():
    """ot_reg_in_loss with num_items_in_batch = all predicted tokens of the batch (labels[..., 1:]): reg's share is
    1."""
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2, ot_lambda=1000.0).eval()
    model.config.ot_reg_in_loss = True
    ids = torch.randint(4, 99, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids, num_items_in_batch=torch.tensor(2 * 7))
    assert out.reg.item() > 0
    # lambda large enough that fp32 rounding of the loss (~5e-7) is far below the 8/7 a count over all labels gives
    assert (out.loss - out.task_loss).item() == pytest.approx(1000.0 * out.reg.item(), rel=1e-3)


def test_a_plain_gpt2_baseline_of_a_recipe_counts_predicted_tokens():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from hf_ot.recipes.build import build_model
    from hf_ot.recipes.config import ModelSection

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "b": 1, "<pad>": 2}, unk_token="a")), pad_token="<pad>"
    )
    baseline = build_model(
        ModelSection(ot=None, scratch={"family": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2}),
        "causal-lm",
        tokenizer,
    )
    assert type(baseline).__name__ == "GPT2LMHeadModel" and baseline.loss_type == "ForCausalLM"


def test_compute_loss_can_be_called_outside_train(tmp_path):
    """As with plain Trainer.compute_loss: the objective of one batch, task loss + lambda * reg, before any train()."""
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2, ot_lambda=1000.0)
    ids = torch.randint(4, 99, (2, 8), generator=torch.Generator().manual_seed(2))
    trainer = OTTrainer(model=model, args=OTTrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True))
    model.train()
    loss = trainer.compute_loss(model, {"input_ids": ids, "labels": ids})
    out = model(input_ids=ids, labels=ids)
    torch.testing.assert_close(loss, out.loss + 1000.0 * out.reg)


@pytest.mark.parametrize("optim, cause", [("sgd", "SafetensorError"), ("adamw_torch", "RuntimeError")])
def test_a_checkpoint_past_the_file_size_limit_is_a_save_error(tmp_path, optim, cause):
    # a full disk, as `ulimit -f` gives it: the weights' SafetensorError ("File too large") escaped, and torch.save's
    # RuntimeError ("unexpected pos 576 vs 534", no "write" in it) did too, both as tracebacks
    resource, signal = pytest.importorskip("resource"), pytest.importorskip("signal")
    from hf_ot.errors import SaveError

    model = ot_gpt2()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    kw = dict(optim=optim, per_device_train_batch_size=4, max_steps=1, save_strategy="steps", save_steps=1)
    trainer = OTTrainer(model=model, args=args(tmp_path, **kw), train_dataset=lm_dataset(4))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
    # sgd: the weights do not fit (the model code copied beside them does); adamw: they do (config and weights
    # written), its optimizer state (2x) does not
    code = max(f.stat().st_size for f in Path(hf_ot.models.__file__).parent.glob("*.py"))
    assert code < weights, "the tiny model's weights must outgrow its code files for the limit to tell them apart"
    resource.setrlimit(resource.RLIMIT_FSIZE, ((code + weights) // 2 if optim == "sgd" else weights * 3 // 2, hard))
    try:
        with pytest.raises(SaveError, match="writing checkpoint-1 into .* failed") as raised:
            trainer.train()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, ignored)
    assert type(raised.value.__cause__).__name__ == cause


def test_an_error_while_saving_a_checkpoint_that_is_no_write_failure_stays_itself(tmp_path, monkeypatch):
    # only torch.save's stream-writer RuntimeError means a full disk: an out-of-memory while the state is gathered
    # (or a collective's timeout) must not read "Free space"
    import transformers

    def out_of_memory(self, model, trial):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(transformers.Trainer, "_save_checkpoint", out_of_memory)
    kw = dict(per_device_train_batch_size=4, max_steps=1, save_strategy="steps", save_steps=1)
    trainer = OTTrainer(model=ot_gpt2(), args=args(tmp_path, **kw), train_dataset=lm_dataset(4))
    with pytest.raises(RuntimeError, match="out of memory") as raised:
        trainer.train()
    assert type(raised.value) is RuntimeError


def test_training_arguments_errors_name_the_recipe_key_not_a_flag(tmp_path, capsys):
    # TrainingArguments' own errors name its command-line flags (--logging_steps), which hf-ot train does not have
    flags = set_flags(["training.logging_steps=0"])
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) == 2
    err = capsys.readouterr().err
    assert "training.logging_steps" in err and "--logging_steps" not in err


@pytest.mark.parametrize(
    "setting",
    [
        "training.adam_beta1=2",  # torch's "Invalid beta parameter at index 0: 2" (exit 1), once the data was read
        "training.weight_decay=.nan",  # trained: "Training diverged at step 2: the loss is nan" (the learning rate?)
    ],
)
def test_optimizer_settings_out_of_bounds_are_refused_before_the_data(tmp_path, capsys, monkeypatch, setting):
    # as training.learning_rate=-1 is
    from hf_ot.recipes import data

    monkeypatch.setattr(data, "_embedded_rows", lambda *a, **k: pytest.fail("data prepared"))
    flags = set_flags(tiny_run(setting, "training.save_strategy=no"))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) == 2
    assert setting.partition("=")[0] in capsys.readouterr().err


@pytest.mark.parametrize("family, head", [("bert", "Bert"), ("llama", "Llama")])  # (Llama's: transformers' generic)
@pytest.mark.parametrize("ot", [True, False], ids=["ot", "plain-baseline"])
def test_a_classifiers_training_loss_is_the_mean_under_gradient_accumulation(tmp_path, ot, family, head):
    # `hf-ot train sst2_minilm --set training.gradient_accumulation_steps=2` logged a loss of 1.382 where one step of
    # the same batch logged 0.6885, and stepped with twice the gradient: BERT's classifier accepts **kwargs, so
    # Trainer takes its loss (a plain mean) as normalised by num_items_in_batch. Under torchrun with N processes it
    # likewise multiplied train and eval losses by N (eval_loss 1.385 on 2 processes, 0.69 on one)
    from datasets import Dataset
    from helpers import Logs, args

    from hf_ot import convert
    from hf_ot.training import GuardedTrainer, OTTrainer

    torch = pytest.importorskip("torch")
    model = make_base(family, f"{head}ForSequenceClassification")
    model = convert(model, ot_num_steps=2, ot_lambda=0.0) if ot else model
    g = torch.Generator().manual_seed(0)
    rows = {"input_ids": torch.randint(4, 99, (8, 6), generator=g).tolist(), "labels": [0, 1, 1, 0, 1, 1, 0, 1]}
    with torch.no_grad():  # the reference: the mean cross-entropy of the 8 rows
        reference = model(input_ids=torch.tensor(rows["input_ids"]), labels=torch.tensor(rows["labels"])).loss.item()
    logs = Logs()
    settings = dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=1, learning_rate=0.0)
    trainer = (OTTrainer if ot else GuardedTrainer)(
        model=model, args=args(tmp_path, **settings), train_dataset=Dataset.from_dict(rows), callbacks=[logs]
    )
    trainer.train()
    step = next(log for log in logs.logs if "loss" in log and "train_runtime" not in log)
    assert step["loss"] == pytest.approx(reference, rel=1e-4)


# OTTrainingArguments(..., max_grad_norm=None) passed the early check (None was taken for "do not clip"), then
# OTTrainer.train() failed at the first optimizer step with "'>' not supported between instances of 'NoneType' and
# 'int'" (transformers 5.25 compares it with 0). It should be refused when the arguments are made, naming 0 for no
# clipping.
def test_max_grad_norm_none_is_refused_naming_zero_for_no_clipping(tmp_path):
    with pytest.raises(ValueError, match=r"max_grad_norm.*None.*0"):
        OTTrainingArguments(output_dir=str(tmp_path), max_grad_norm=None, report_to=[])


@pytest.mark.usefixtures("in_repo")
def test_a_negative_max_grad_norm_still_means_no_clipping():
    # the optimizer settings' check refused max_grad_norm < 0, which Trainer reads as "do not clip" (> 0 clips)
    from transformers import TrainingArguments

    from hf_ot.training import check_training_arguments

    check_training_arguments(TrainingArguments("unused", max_grad_norm=-1.0, report_to=[]))
    with pytest.raises(ValueError, match="max_grad_norm must be a finite number"):
        check_training_arguments(TrainingArguments("unused", max_grad_norm=float("nan"), report_to=[]))


def test_zero_gradient_accumulation_steps_is_refused_before_the_data(tmp_path, capsys, monkeypatch):
    from hf_ot.recipes import data

    for name in ("_embedded_rows", "load_splits"):  # the data is not read before the check
        monkeypatch.setattr(data, name, lambda *a, **k: pytest.fail("data prepared"))
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "quickstart",
            "--output-dir",
            str(out),
            *set_flags(tiny_run("training.gradient_accumulation_steps=0")),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "gradient_accumulation_steps" in err and ">= 1" in err


def test_zero_gradient_accumulation_steps_of_a_baseline_is_refused_before_the_data(tmp_path, capsys, monkeypatch):
    from hf_ot.recipes import data

    monkeypatch.setattr(data, "_embedded_rows", lambda *a, **k: pytest.fail("data prepared"))
    flags = tiny_run("training.gradient_accumulation_steps=0", "model.ot=null")
    code = main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *set_flags(flags)])
    err = capsys.readouterr().err
    assert code == 2 and "gradient_accumulation_steps" in err and ">= 1" in err


@pytest.mark.parametrize(
    "setting,named",
    [
        ("training.per_device_train_batch_size=0", "per_device_train_batch_size must be an integer >= 1"),
        ("training.per_device_eval_batch_size=0", "per_device_eval_batch_size must be an integer >= 1"),
        ("training.learning_rate=-1", "learning_rate must be a finite number >= 0"),
        ("training.num_train_epochs=0", "training would run no step"),
        ("training.max_steps=0", "training would run no step"),
        ("training.eval_accumulation_steps=0", "eval_accumulation_steps must be an integer >= 1"),
        ("training.dataloader_num_workers=-1", "dataloader_num_workers must be an integer >= 0"),
        ("training.seed=-1", "seed must be an integer >= 0"),
    ],
)
@pytest.mark.parametrize("model", ["ot", "baseline"])
def test_training_settings_that_fail_late_are_refused_before_the_data(
    tmp_path, capsys, monkeypatch, setting, named, model
):
    from hf_ot.recipes import data

    monkeypatch.setattr(data, "_embedded_rows", lambda *a, **k: pytest.fail("data prepared"))
    extra = ["training.max_steps=-2"] if "epochs" in setting else []
    flags = tiny_run(setting, *extra, *(["model.ot=null"] if model == "baseline" else []))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *set_flags(flags)]) == 2
    assert named in capsys.readouterr().err


def test_a_batch_without_targets_is_named_not_called_divergence(tmp_path):
    ids = torch.randint(4, 99, (4, 10), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[2] = -100  # the third example has nothing to predict (truncated away, say)
    ds = Dataset.from_dict({"input_ids": ids.tolist(), "labels": labels.tolist()})
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2)
    trainer = OTTrainer(model=model, args=args(tmp_path, max_steps=4, per_device_train_batch_size=1), train_dataset=ds)
    trainer._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(ds)  # the order above
    with raises_naming(NoTargets, "step 3", "no target", "-100") as err:
        trainer.train()
    assert not isinstance(err.value, TrainingDiverged)
    assert "learning rate is fine" in str(err.value) and "lower the learning rate" not in str(err.value)
    assert trainer.state.global_step == 2  # the step was not applied


@pytest.mark.usefixtures("in_repo")
@pytest.mark.parametrize("value", ["nan", "inf", ".nan"])
def test_non_finite_lambda_fails_before_training(tmp_path, value):
    out = tmp_path / "run"
    with raises_naming(ValueError, "model.ot.ot_lambda", "finite"):
        run_recipe(quick_cfg(out, f"model.ot.ot_lambda={value}"))
    assert_nothing_trained(out)


@pytest.mark.usefixtures("in_repo")
def test_diverged_recipe_exits_1_with_the_reason_and_saves_no_model(tmp_path, capsys):
    out = tmp_path / "run"
    # plain SGD at a huge learning rate: step 1 sends the weights to overflow, step 2's loss is not finite
    code = cli_train(
        out,
        "--set",
        "training.optim=sgd",
        "--set",
        "training.learning_rate=1.0e+30",
        "--set",
        "training.max_grad_norm=0",
        "--set",
        "training.warmup_steps=0",
    )
    assert code == 1
    assert "diverged at step 2" in capsys.readouterr().err
    assert not (out / "model").exists() and not (out / "results.json").exists()
