"""OTTrainer: transformers.Trainer with loss = task loss + lambda * reg (lambda from the model config), both logged."""

from __future__ import annotations

import copy
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, Trainer, TrainingArguments

from .errors import NoTargets, SaveError, TrainingDiverged
from .models.ot_config import OTDeprecationWarning
from .models.ot_model import ot_objective, reg_share
from .redaction import hide_secrets

_LAMBDA_HELP = "deprecated: set model.config.ot_lambda (OTTrainer applies this value there, with a warning)"
_FIND_UNUSED_HELP = "DDP's find_unused_parameters; False for OT models (all parameters are used), True to search"


class CredentialsNotPickled:
    """TrainingArguments mixin: a pickled copy leaves out credentials (hub_token: None, a URL's password). Trainer
    pickles its arguments into training_args.bin in every checkpoint and the output folder, and push_to_hub uploads
    those files."""

    def __getstate__(self):
        return {
            k: None if k.endswith("_token") else hide_secrets(v) if isinstance(v, str) else v
            for k, v in vars(self).items()
        }

    def __copy__(self):  # copies keep every value (copy uses __getstate__ otherwise)
        new = object.__new__(type(self))
        new.__dict__.update(vars(self))
        return new

    def __deepcopy__(self, memo):
        new = object.__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(vars(self), memo))
        return new


@dataclass
class PlainTrainingArguments(CredentialsNotPickled, TrainingArguments):
    """TrainingArguments (the recipes' plain baselines) whose pickled copy leaves out credentials, as OT's."""


@dataclass
class OTTrainingArguments(CredentialsNotPickled, TrainingArguments):
    """TrainingArguments plus lambda's warm-up. lambda itself lives in the model config (`model.config.ot_lambda`);
    `ot_lambda` here is a deprecated alias that OTTrainer applies to the model config once, with a warning."""

    ot_lambda: float | None = field(default=None, metadata={"help": _LAMBDA_HELP})
    ot_lambda_warmup_steps: int = field(
        default=0, metadata={"help": "ramp lambda linearly from 0 over this many optimizer steps (0: no warm-up)"}
    )
    # every parameter of an OT model takes part in each step: DDP need not search the graph for unused ones (its
    # default, True, warns on every run); set True for a model that does leave some unused
    ddp_find_unused_parameters: bool | None = field(default=False, metadata={"help": _FIND_UNUSED_HELP})

    def __post_init__(self):
        check_ot_arguments(self)
        super().__post_init__()


@dataclass
class OTSeq2SeqTrainingArguments(CredentialsNotPickled, Seq2SeqTrainingArguments):
    """Seq2SeqTrainingArguments (generation during evaluation) plus the OT weight, as OTTrainingArguments."""

    ot_lambda: float | None = field(default=None, metadata={"help": _LAMBDA_HELP})
    ot_lambda_warmup_steps: int = field(default=0, metadata={"help": "linear lambda warm-up, in optimizer steps"})
    ddp_find_unused_parameters: bool | None = field(default=False, metadata={"help": _FIND_UNUSED_HELP})

    def __post_init__(self):
        check_ot_arguments(self)
        super().__post_init__()


def check_ot_arguments(args) -> None:
    from .models.ot_config import SETTING_OF_FIELD

    problem = SETTING_OF_FIELD["ot_lambda"].problem(args.ot_lambda)  # the model config's own bounds (None allowed)
    if args.ot_lambda is not None and problem:
        raise ValueError(f"{problem.rstrip('.')} (or None for the model config's).")
    warmup = args.ot_lambda_warmup_steps
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"ot_lambda_warmup_steps must be an integer >= 0, got {args.ot_lambda_warmup_steps!r}.")
    check_training_arguments(args)


def check_training_arguments(args) -> None:
    """Any TrainingArguments' values that would fail only once training starts (the recipes check a baseline's too)."""
    # refused here, not by a ZeroDivisionError or the DataLoader after the data is prepared, or by a run of no step
    lows = dict(gradient_accumulation_steps=1, per_device_train_batch_size=1, per_device_eval_batch_size=1)
    lows.update(eval_accumulation_steps=1, dataloader_num_workers=0, seed=0)  # (a ZeroDivisionError in evaluation)
    for name, low in lows.items():
        value = getattr(args, name)
        if name == "eval_accumulation_steps" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"--{name} must be an integer >= {low}, got {value!r}.")
    # the optimizer's own checks come once the data is prepared; NaN passes them and trains to a NaN loss
    spans = {"learning_rate": (0.0, math.inf), "weight_decay": (0.0, math.inf), "adam_epsilon": (0.0, math.inf)}
    spans.update(adam_beta1=(0.0, 1.0), adam_beta2=(0.0, 1.0), max_grad_norm=(-math.inf, math.inf))  # (<= 0: no clip)
    for name, (floor, ceiling) in spans.items():
        number = getattr(args, name)
        real = isinstance(number, (int, float)) and not isinstance(number, bool)
        if not (real and math.isfinite(number) and floor <= number < ceiling):
            within = " in [0, 1)" if ceiling == 1 else " >= 0" if floor == 0 else ""
            clip = " (0 or less for no clipping: Trainer compares it with 0)" if name == "max_grad_norm" else ""
            raise ValueError(f"--{name} must be a finite number{within}, got {number!r}{clip}.")
    if args.max_steps == 0 or not args.max_steps > 0 and not args.num_train_epochs > 0:  # (0: Trainer divides by it)
        raise ValueError(
            f"max_steps={args.max_steps} and num_train_epochs={args.num_train_epochs}: training would run no step. "
            "Set max_steps >= 1, or num_train_epochs > 0 with max_steps unset (-1)."
        )


if TYPE_CHECKING:  # the mixins below are mixed into Trainer: type-check them as Trainer subclasses
    _TrainerBase = Trainer
else:
    _TrainerBase = object


def no_targets(inputs) -> bool:
    """True when the batch has labels and every one of them is -100 (Trainer's and PyTorch's ignore index)."""
    labels = inputs.get("labels") if hasattr(inputs, "get") else None
    if not isinstance(labels, torch.Tensor) or labels.numel() == 0 or labels.is_floating_point():
        return False
    return bool((labels == -100).all().item())


def loss_counts_items(model) -> bool:
    """Whether the model's transformers class hands its **kwargs (Trainer's `num_items_in_batch`) to `loss_function`,
    which then divides by it; many heads accept **kwargs and take a plain mean (True where the source is unknown)."""
    import inspect

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wraps the model
    for cls in type(inner).__mro__:  # (Llama's classifier: transformers.modeling_layers' generic one)
        if cls.__module__.startswith("transformers.") and "forward" in vars(cls):
            try:
                source = inspect.getsource(vars(cls)["forward"])
            except (OSError, TypeError):
                return True
            return re.search(r"self\.loss_function\((?:[^()]|\([^()]*\))*\*\*kwargs", source) is not None
    return True


class StopOnNonFiniteLoss(_TrainerBase):
    """Trainer mixin: a micro-batch whose loss is NaN or infinite stops training with TrainingDiverged, before the
    optimizer applies it, so the weights in memory and every saved checkpoint stay finite. (Trainer would otherwise
    log a filtered loss, step on NaN gradients and save NaN weights.) One scalar check per micro-batch, reduced
    over processes so that all of them stop together."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from .scale_out import check_engine

        check_engine(self)  # FSDP / DeepSpeed asked for but not running: stop now, not train DDP silently
        if self.model_accepts_loss_kwargs and not loss_counts_items(self.model):
            # a plain mean (BERT's classifier, T5) taken as normalised by the step's items would be multiplied by the
            # processes and not divided by the accumulation steps: its loss and gradient N times too large
            self.model_accepts_loss_kwargs = False
        if getattr(self, "is_deepspeed_enabled", False):
            from .scale_out import init_deepspeed_process_group

            init_deepspeed_process_group()  # a 1-process DeepSpeed run: barriers before train() need the group

    def _save_checkpoint(self, model, trial):
        """A checkpoint that cannot be written (a full disk: the weights' SafetensorError, torch.save's RuntimeError
        from its stream writer, OSError) is a SaveError naming it, not a traceback; the checkpoints before it are
        complete, and a resume skips it."""
        try:
            return super()._save_checkpoint(model, trial)
        except (OSError, RuntimeError, SafetensorError) as err:
            # of RuntimeErrors only torch.save's stream writer's: an out-of-memory or a collective's timeout is no
            # full disk
            if isinstance(err, RuntimeError) and not re.search(r"inline_container|PytorchStreamWriter", str(err)):
                raise
            where = Path(self._get_output_dir(trial)) / f"checkpoint-{self.state.global_step}"
            raise SaveError(
                f"writing {where.name} into {where.parent} failed: {err}. Free space (or fix the cause); the "
                "checkpoints before it are complete and --resume continues from the last of them."
            ) from err

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """resume_from_checkpoint=True takes the newest COMPLETE checkpoint (one cut short by a kill, without
        trainer_state.json, is passed over with a warning); a path is checked first (complete, config readable,
        weights and torch files whole): errors name the checkpoint, the problem and the fix."""
        from .checkpoints import check_checkpoint, choose_checkpoint

        if resume_from_checkpoint is True:
            found = choose_checkpoint(self.args.output_dir, True)
            if found is None:
                raise ValueError(f"resume_from_checkpoint=True: no complete checkpoint in {self.args.output_dir}.")
            resume_from_checkpoint = found
        elif isinstance(resume_from_checkpoint, (str, Path)):
            check_checkpoint(resume_from_checkpoint)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        bad = (~torch.isfinite(loss.detach())).any().float().reshape(1)
        if self.accelerator.num_processes > 1:
            bad = self.accelerator.reduce(bad, reduction="sum")
        if bad.item():
            empty = no_targets(inputs)
            if self.accelerator.num_processes > 1:
                empty = bool(
                    self.accelerator.reduce(torch.tensor([float(empty)], device=loss.device), reduction="sum").item()
                )
            if empty:
                raise NoTargets(self._no_targets_message(loss))
            raise TrainingDiverged(self._diverged_message(loss))
        return loss

    def _no_targets_message(self, loss) -> str:
        return (
            f"The batch of step {self.state.global_step + 1} has no target to predict: every label is -100 "
            f"(ignored), so its loss is 0 / 0 = {loss.float().item()}. This is a data problem, not divergence: the "
            "learning rate is fine. Drop the examples without targets (e.g. labels all -100 after truncation or "
            "padding, an empty target text) or build the labels so that each example keeps at least one, then "
            "train again. Training stopped before applying the step, so the weights are unchanged."
        )

    def _diverged_message(self, loss) -> str:
        from transformers.trainer_utils import get_last_checkpoint

        folder = Path(str(self.args.output_dir))
        last = get_last_checkpoint(str(folder)) if folder.is_dir() else None
        where = (
            f"The last good checkpoint is {last}: continue from it with --resume (resume_from_checkpoint) after "
            "lowering the learning rate or lambda"
            if last
            else "No checkpoint was saved (training.save_strategy=steps keeps them); start again with a lower "
            "learning rate or lambda"
        )
        return (
            f"Training diverged at step {self.state.global_step + 1}: the loss is {loss.float().item()} (not "
            f"finite), so training stopped before applying it and nothing was saved as a model. {where}, or with "
            "max_grad_norm set."
        )


def ot_config_of(model: Any) -> Any:
    """The OT config of `model` (through a PEFT or DDP wrapper), or None for a model that is not an OT model."""
    if model is None:
        return None
    get_base = getattr(model, "get_base_model", None)  # a PEFT model
    if callable(get_base):
        model = get_base()
    config = getattr(getattr(model, "module", model), "config", None)  # a DDP wrapper
    return config if config is not None and hasattr(config, "ot_reg_in_loss") else None


def _is_causal(model) -> bool:
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wraps the OT model
    return getattr(inner, "loss_type", None) == "ForCausalLM"


def counted_targets(model, labels) -> torch.Tensor:
    """How many targets a batch's task loss averages over: its label tokens other than -100 (a causal LM's shifted
    by one, as its loss shifts them), or its examples (sequence classification, regression); 1 without labels."""
    if not isinstance(labels, torch.Tensor) or labels.dim() == 0:
        return torch.tensor(1.0)
    if labels.dim() < 2 or labels.is_floating_point():  # one label (or one row of labels) per example
        return torch.tensor(float(labels.shape[0]), device=labels.device)
    counted = labels[..., 1:] if _is_causal(model) else labels
    return counted.ne(-100).sum().float()


class _LossWithReg:
    """Trainer's loss computed from the logits (its label smoother, or compute_loss_func), plus lambda * reg through
    `ot_objective`: the model does not see the labels then, so the objective is completed here, before Trainer scales
    the loss. The label smoother of a causal LM gets its labels shifted (Trainer shifts them only for the class names
    of its own causal-LM mapping, which OT classes are not in)."""

    def __init__(self, trainer: Any, loss: Any, shift: bool) -> None:
        self.trainer, self.loss, self.shift = trainer, loss, shift
        self.task: torch.Tensor | None = None  # the task loss of the last call, for the log

    def __call__(self, outputs, labels, **kwargs):
        if self.shift:
            kwargs["shift_labels"] = True
        self.task = task = self.loss(outputs, labels, **kwargs)
        reg = outputs.get("reg") if isinstance(outputs, dict) else None
        if reg is None:
            return task
        share = self.trainer._reg_share(labels, kwargs.get("num_items_in_batch"))
        return ot_objective(task, reg, self.trainer._lambda_now, share)


class OTTrainerMixin(StopOnNonFiniteLoss):
    """Trains the OT objective, task loss + lambda * reg, lambda from the model config (`ot_lambda`), warmed up over
    `ot_lambda_warmup_steps`. The objective is computed once, by `ot_objective`: in the model's forward (OTTrainer
    passes the scheduled lambda as `ot_lambda`, so Trainer's own num_items_in_batch handling and scaling apply to the
    whole objective), or, where Trainer computes the loss from the logits (label smoothing, compute_loss_func), right
    after it. log() adds `task_loss`, `reg` and `ot_lambda` (train) and `eval_task_loss`, `eval_reg` (evaluation),
    averaged over the logging window and over processes, for every report_to backend."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        model = self.accelerator.unwrap_model(self.model)
        config = ot_config_of(model)
        if config is None:
            raise ValueError(
                f"{type(model).__name__} is not an OT model: OTTrainer trains hf_ot OT models (hf_ot.convert or an "
                "OT config); train a plain model with transformers.Trainer."
            )
        alias = getattr(self.args, "ot_lambda", None)
        if alias is not None:
            warnings.warn(
                "The training argument ot_lambda is deprecated: lambda lives in the model config. Set "
                f"model.config.ot_lambda = {alias} instead (applied to the model config now).",
                OTDeprecationWarning,
                stacklevel=3,
            )
            config.ot_lambda = float(alias)
        causal = _is_causal(model)
        if self.label_smoother is not None:
            self.label_smoother = _LossWithReg(self, self.label_smoother, causal)  # type: ignore[assignment]
        if self.compute_loss_func is not None:
            self.compute_loss_func = _LossWithReg(self, self.compute_loss_func, False)
        self._lambda_now = 0.0
        self._ot_sums: dict[str, list[torch.Tensor]] = {"train": [], "eval": []}  # per micro-batch (task, reg, weight)

    def ot_lambda(self) -> float:
        """lambda at the current step: the model config's ot_lambda, ramped over ot_lambda_warmup_steps."""
        config = ot_config_of(self.accelerator.unwrap_model(self.model))
        base = float(getattr(config, "ot_lambda", 0.0))
        warmup = getattr(self.args, "ot_lambda_warmup_steps", 0)
        if warmup and self.state.global_step < warmup:
            return base * self.state.global_step / warmup
        return base

    def _accumulation(self, num_items_in_batch: Any) -> tuple[bool, int]:
        """The one place that reads Trainer's internals (tests/test_training.py checks they exist): whether Trainer
        takes this training micro-batch's loss as normalised by `num_items_in_batch` (it then does not divide it by
        the accumulation steps), and the accumulation steps of the current optimizer step."""
        # a Trainer class attribute (None, or absent in 5.17: Trainer's own rule below)
        normalised = getattr(self, "loss_is_scaled_for_ga", None)
        if normalised is None:  # Trainer.training_step's rule
            normalised = (self.model_accepts_loss_kwargs and num_items_in_batch is not None) or (
                self.compute_loss_func is not None
            )
        # set by Trainer's training loop; a compute_loss call outside train() has the configured accumulation
        steps = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
        return bool(normalised), int(steps)

    def _reg_share(self, labels: Any, num_items_in_batch: Any) -> Any:
        """reg's weight in this micro-batch's loss: its share of the step's items where Trainer normalises the loss
        by num_items_in_batch (exactly when the model receives it), else 1."""
        training = getattr(self.model, "training", False)
        normalised = self._accumulation(num_items_in_batch)[0] if training else False
        causal = _is_causal(self.accelerator.unwrap_model(self.model))
        return reg_share(labels, num_items_in_batch if normalised else None, causal)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.get("labels")  # Trainer pops them from inputs for a label smoother or compute_loss_func
        self._lambda_now = lam = self.ot_lambda()
        # the model returns reg (also without labels) and, where it computes the loss, the objective at this lambda
        inputs = {**inputs, "output_reg": True, "ot_lambda": lam}
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        reg = outputs.get("reg") if isinstance(outputs, dict) else None
        task = outputs.get("task_loss") if isinstance(outputs, dict) else None
        for loss_fn in (self.label_smoother, self.compute_loss_func):
            if task is None and isinstance(loss_fn, _LossWithReg) and loss_fn.task is not None:
                task, loss_fn.task = loss_fn.task, None
        if reg is None or task is None:
            raise ValueError(
                f"{type(self.accelerator.unwrap_model(model)).__name__} returned no `reg` or task loss: OTTrainer "
                "trains hf_ot OT models (hf_ot.convert or an OT config), with labels in the batch."
            )
        if model.training:
            self._ot_lambda_applied = lam  # what the log of this step reports (global_step moves on before it)
            normalised, steps = self._accumulation(num_items_in_batch)
            share = self._reg_share(labels, num_items_in_batch)
            divisor = 1 if normalised else steps  # what Trainer divides this micro-batch's loss by
            self._record("train", task.detach() / divisor, reg.detach() * share / divisor, share / divisor)
        else:
            # evaluation: each batch weighs by its counted targets, so eval_task_loss is the mean token NLL over the
            # whole evaluation set (exp of it the standard perplexity), not a mean of per-batch means
            items = counted_targets(self.accelerator.unwrap_model(model), labels).to(task.device)
            safe = torch.where(items > 0, task.detach(), torch.zeros_like(task))  # a batch without targets: nothing
            self._record("eval", safe * items, reg.detach() * items, items)
        return (loss, outputs) if return_outputs else loss

    def _rows_of_data(self, labels) -> int | None:
        """How many of this evaluation batch's rows are data where accelerate padded the launch's last batch to even
        batches (copies of the first rows, last in the global batch: gather_for_metrics drops them); None: all."""
        state, batch = self.accelerator.gradient_state, len(labels) if torch.is_tensor(labels) else 0
        if self.accelerator.num_processes == 1 or not batch or not state.end_of_dataloader or state.remainder <= 0:
            return None
        rows = max(0, min(batch, state.remainder - self.accelerator.process_index * batch))
        return None if rows == batch else rows

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        # reg is a scalar per batch, not a prediction: keep it out of the gathered logits
        if ignore_keys is None:
            config = getattr(self.accelerator.unwrap_model(model), "config", None)
            ignore_keys = getattr(config, "keys_to_ignore_at_inference", None) or ["past_key_values", "cache"]
        ignore_keys = [*ignore_keys, *(k for k in ("reg", "task_loss") if k not in ignore_keys)]
        labels = inputs.get("labels")
        batch, rows = (len(labels) if torch.is_tensor(labels) else 0), self._rows_of_data(labels)
        if rows:  # the launch's last batch, padded with copies: the one forward runs on its data rows only
            row = lambda v: torch.is_tensor(v) and v.dim() and len(v) == batch  # noqa: E731
            inputs = {k: v[:rows] if row(v) else v for k, v in inputs.items()}
        recorded = len(self._ot_sums["eval"])
        if getattr(self.args, "predict_with_generate", False) and not prediction_loss_only:
            result = self._generating_step(model, inputs, prediction_loss_only, ignore_keys)
        else:
            result = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
        if rows == 0 and len(self._ot_sums["eval"]) > recorded:  # a batch of copies only: it adds nothing
            self._ot_sums["eval"][-1] = torch.zeros_like(self._ot_sums["eval"][-1])
        if rows:  # back to the batch's rows for Trainer's gather (which drops the copies' rows again)
            result = (result[0], *(_pad_rows(r, rows, batch) for r in result[1:]))
        return result

    def _generating_step(self, model, inputs, prediction_loss_only, ignore_keys):
        """Seq2SeqTrainer's generating evaluation: the loss is the OT objective of one teacher-forced forward
        (compute_loss), and generation runs on the inputs without the labels."""
        loss = None
        labels = inputs.get("labels")
        if labels is not None:
            with torch.no_grad(), self.compute_loss_context_manager():
                loss = self.compute_loss(model, self._prepare_inputs(inputs)).detach().mean()
        generation_inputs = {k: v for k, v in inputs.items() if k != "labels"}
        decoder_ids = inputs.get("decoder_input_ids")
        if labels is not None and decoder_ids is not None and decoder_ids.shape == labels.shape:
            # made from the labels (Seq2SeqTrainer evicts them too): the model generates freely
            generation_inputs.pop("decoder_input_ids")
            generation_inputs.pop("decoder_attention_mask", None)
        _, tokens, _ = super().prediction_step(model, generation_inputs, prediction_loss_only, ignore_keys=ignore_keys)
        if labels is not None:
            labels = self._prepare_inputs({"labels": labels})["labels"]
            if tokens is not None and labels.shape[-1] < tokens.shape[-1]:
                labels = self._pad_tensors_to_max_len(labels, tokens.shape[-1])  # type: ignore[attr-defined]  # (Seq2SeqTrainer's)
        return loss, tokens, labels

    def _record(self, mode, task, reg, weight):
        weight = torch.as_tensor(weight, dtype=torch.float32, device=task.device)
        self._ot_sums[mode].append(torch.stack([task.float(), reg.float(), weight.float()]))

    def _add_means(self, metrics, mode, prefix):
        """metrics[prefix + "task_loss" / "reg"]: the means over the micro-batches recorded since the last call."""
        if self._ot_sums[mode]:
            sums = torch.stack(self._ot_sums[mode]).sum(0)
            sums = self.accelerator.reduce(sums, reduction="sum")  # every process's share
            metrics[f"{prefix}task_loss"] = round((sums[0] / sums[2]).item(), 6)
            metrics[f"{prefix}reg"] = round((sums[1] / sums[2]).item(), 6)
            self._ot_sums[mode] = []

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        # evaluate() and predict() (a dict of eval datasets: one loop each) report their own set's means, under
        # their metric prefix (eval_, eval_NAME_, test_)
        self._ot_sums["eval"] = []
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        self._add_means(output.metrics, "eval", f"{metric_key_prefix}_")
        return output

    def log(self, logs, *args, **kwargs):
        if getattr(self.model, "training", False):  # a training log (as TRL's trainers: evaluation runs in .eval())
            self._add_means(logs, "train", "")
            logs["ot_lambda"] = getattr(self, "_ot_lambda_applied", None)
            if logs["ot_lambda"] is None:
                logs["ot_lambda"] = self.ot_lambda()
        return super().log(logs, *args, **kwargs)


def _pad_rows(value: Any, rows: int, batch: int) -> Any:
    """`value` (a prediction or labels of the `rows` data rows, or nested tuples of them) with its last row repeated
    up to `batch` rows: Trainer gathers the padded batch's shape (and drops those rows)."""
    if isinstance(value, (tuple, list)):
        return type(value)(_pad_rows(v, rows, batch) for v in value)
    if torch.is_tensor(value) and value.dim() and len(value) == rows and rows:
        return torch.cat([value, value[-1:].expand(batch - rows, *value.shape[1:])])
    return value


class GuardedTrainer(StopOnNonFiniteLoss, Trainer):
    """transformers.Trainer that stops on a non-finite loss (the recipes' plain baselines)."""


class OTTrainer(OTTrainerMixin, Trainer):
    """transformers.Trainer for OT models: loss = task loss + lambda * reg, lambda the model config's ot_lambda
    (OTTrainingArguments warms it up)."""


class OTSeq2SeqTrainer(OTTrainerMixin, Seq2SeqTrainer):  # type: ignore[misc]  # prediction_step: Trainer's signature
    """Seq2SeqTrainer for OT encoder-decoders (predict_with_generate), same loss and logging as OTTrainer."""
