"""OTTrainer: transformers.Trainer with loss = task loss + lambda * reg, both logged."""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, Trainer, TrainingArguments

from .errors import NoTargets, SaveError, TrainingDiverged
from .redaction import hide_secrets
from .trainer_watch import ot_config_of

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
    """TrainingArguments plus the OT weight. `ot_lambda=None` takes lambda from the model config (`ot_lambda`)."""

    ot_lambda: float | None = field(default=None, metadata={"help": "weight of reg; None: the model config's"})
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

    ot_lambda: float | None = field(default=None, metadata={"help": "weight of reg; None: the model config's"})
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


def ot_reg_share(model, labels, num_items_in_batch):
    """The weight of one micro-batch's reg in the loss under gradient accumulation: the OT model's own rule, the one
    its `config.ot_reg_in_loss` path uses, so OTTrainer and the model weigh reg the same way (an item-weighted mean of
    reg over the step's micro-batches; 1 without `num_items_in_batch`)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wraps the OT model
    return inner.ot_reg_share(labels, num_items_in_batch)


def counted_targets(model, labels) -> torch.Tensor:
    """How many targets a batch's task loss averages over: its label tokens other than -100 (a causal LM's shifted
    by one, as its loss shifts them), or its examples (sequence classification, regression); 1 without labels."""
    if not isinstance(labels, torch.Tensor) or labels.dim() == 0:
        return torch.tensor(1.0)
    if labels.dim() < 2 or labels.is_floating_point():  # one label (or one row of labels) per example
        return torch.tensor(float(labels.shape[0]), device=labels.device)
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wraps the OT model
    counted = labels[..., 1:] if getattr(inner, "loss_type", None) == "ForCausalLM" else labels
    return counted.ne(-100).sum().float()


class _CausalLabelSmoother:
    """Trainer's label smoother, shifting the labels of a causal LM: Trainer shifts them only for the class names of
    its own causal-LM mapping, which OT classes are not in (each position would be scored against its own token)."""

    def __init__(self, smoother, model):
        inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wraps the OT model
        self.smoother = smoother
        self.causal = getattr(inner, "loss_type", None) == "ForCausalLM"

    def __call__(self, outputs, labels, shift_labels=False, **kwargs):
        return self.smoother(outputs, labels, shift_labels=shift_labels or self.causal, **kwargs)


class OTTrainerMixin(StopOnNonFiniteLoss):
    """compute_loss adds lambda * reg, weighted as the model weighs it with `ot_reg_in_loss` (unless the model's
    config has ot_reg_in_loss=True: its loss already is the OT objective, and reg is never counted twice); log() adds
    `task_loss`, `reg` and `ot_lambda` (train) and `eval_task_loss`, `eval_reg` (evaluation), averaged over the
    logging window and over processes, for every report_to backend. The mode is the model's (`model.training`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from .trainer_watch import RegNotTrainedWarning

        self.remove_callback(RegNotTrainedWarning)  # OTTrainer trains reg itself
        if self.label_smoother is not None:
            smoother = _CausalLabelSmoother(self.label_smoother, self.accelerator.unwrap_model(self.model))
            self.label_smoother = smoother  # type: ignore[assignment]  # (called as the LabelSmoother it wraps)
        self._ot_sums: dict[str, list[torch.Tensor]] = {"train": [], "eval": []}  # per micro-batch (task, reg, weight)

    def ot_lambda(self) -> float:
        base: Any = getattr(self.args, "ot_lambda", None)
        if base is None:
            config = getattr(self.accelerator.unwrap_model(self.model), "config", None)
            base = getattr(config, "ot_lambda", 0.0)
        warmup = getattr(self.args, "ot_lambda_warmup_steps", 0)
        if warmup and self.state.global_step < warmup:
            return float(base) * self.state.global_step / warmup
        return float(base)

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

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.get("labels")  # Trainer pops them from inputs for a label smoother or compute_loss_func
        # the model's own loss, kept as the model returned it: Trainer scales that tensor in place (the process count
        # when it averages tokens across processes), and reg takes the same factor below
        returned: dict[str, torch.Tensor] = {}

        def keep_loss(module, args, kwargs, output):
            if isinstance(output, dict) and output.get("loss") is not None:
                returned["loss"] = output["loss"].detach().clone()

        hook = self.accelerator.unwrap_model(model).register_forward_hook(keep_loss, with_kwargs=True)
        if ot_config_of(self.accelerator.unwrap_model(model)) is not None:
            # an evaluation forward returns reg only with labels, which Trainer takes out of the inputs for its own
            # loss (label_smoothing_factor, compute_loss_func)
            inputs = {**inputs, "output_reg": True}
        try:
            loss, outputs = super().compute_loss(
                model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
            )
        finally:
            hook.remove()
        total = self._ot_objective(model, inputs, labels, loss, outputs, returned.get("loss"), num_items_in_batch)
        return (total, outputs) if return_outputs else total

    def _ot_objective(self, model, inputs, labels, loss, outputs, model_loss, num_items_in_batch):
        """Trainer's loss of a forward's outputs plus lambda * reg, with task loss and reg recorded for the log;
        model_loss: the loss the model returned, as it returned it."""
        mode = "train" if model.training else "eval"
        reg = outputs.get("reg") if isinstance(outputs, dict) else None
        if reg is None:
            raise ValueError(
                f"{type(self.accelerator.unwrap_model(model)).__name__} returned no `reg`: OTTrainer trains hf_ot "
                "OT models (hf_ot.convert or an OT config)."
            )
        task_loss = outputs.get("task_loss")
        reg_in_loss = task_loss is not None  # config.ot_reg_in_loss: the model's loss already is task + lambda * reg
        if reg_in_loss:
            self._check_model_lambda()
        # Trainer's factor on the model's loss: reg takes it too, as it does inside the model's loss with
        # ot_reg_in_loss; 1 where the model returned no loss
        factor = torch.ones((), device=loss.device)
        if model_loss is not None:
            model_loss = model_loss.to(loss.device)
            factor = torch.where(model_loss != 0, loss.detach() / model_loss, torch.ones_like(model_loss))
        normalised, steps = self._accumulation(num_items_in_batch) if mode == "train" else (True, 1)
        # the model received num_items_in_batch exactly when Trainer normalises by it
        share = ot_reg_share(self.accelerator.unwrap_model(model), labels, num_items_in_batch if normalised else None)
        weight = share * factor
        task = task_loss.detach() * factor if reg_in_loss else loss.detach()
        if mode == "train":
            divisor = 1 if normalised else steps  # what Trainer divides this micro-batch's loss by
            self._record(mode, task / divisor, reg.detach() * weight / divisor, weight / divisor)
        else:
            # evaluation: each batch weighs by its counted targets, so eval_task_loss is the mean token NLL over
            # the whole evaluation set (exp of it the standard perplexity), not a mean of per-batch means
            inner, rows = self.accelerator.unwrap_model(model), self._rows_of_data(labels)
            if rows is not None:  # the launch's last batch, padded with copies of its first rows: its data alone
                rows_of = lambda v: v[:rows] if torch.is_tensor(v) and v.dim() and len(v) == len(labels) else v  # noqa: E731
                inputs, labels = {k: rows_of(v) for k, v in inputs.items()}, rows_of(labels)
                with torch.no_grad():  # (the unwrapped model: DDP's forward would wait for the other processes)
                    out = inner(**inputs) if rows else None
                task, reg, weight = (out.get("task_loss", out.loss), out.reg, 1.0) if out else (task, reg, 0.0)
            items = counted_targets(inner, labels).to(task.device) * bool(rows is None or rows)
            safe = torch.where(items > 0, task, torch.zeros_like(task))  # a batch without targets adds nothing
            self._record(mode, safe * items, reg.detach() * weight * items, items)
        lam = self.ot_lambda()
        if mode == "train":
            self._ot_lambda_applied = lam  # what the log of this step reports (global_step moves on before it)
        return loss if reg_in_loss else loss + lam * weight * reg

    def _rows_of_data(self, labels) -> int | None:
        """How many of this evaluation batch's rows are data where accelerate padded the launch's last batch to even
        batches (copies of the first rows, last in the global batch: gather_for_metrics drops them); None: all."""
        state, batch = self.accelerator.gradient_state, len(labels) if torch.is_tensor(labels) else 0
        if self.accelerator.num_processes == 1 or not batch or not state.end_of_dataloader or state.remainder <= 0:
            return None
        return max(0, min(batch, state.remainder - self.accelerator.process_index * batch))

    def _check_model_lambda(self) -> None:
        """With ot_reg_in_loss the model weighs reg by its config's ot_lambda; a different trainer lambda or a
        warm-up cannot apply, so they are refused rather than silently ignored."""
        config = self.accelerator.unwrap_model(self.model).config
        args_lambda = getattr(self.args, "ot_lambda", None)
        if args_lambda is not None and float(args_lambda) != float(config.ot_lambda):
            raise ValueError(
                f"The model's config has ot_reg_in_loss=True, so its loss already adds ot_lambda={config.ot_lambda} "
                f"* reg; the training argument ot_lambda={args_lambda} cannot apply. Set model.config.ot_lambda "
                "instead (or leave ot_lambda=None), or set ot_reg_in_loss=False to let OTTrainer add lambda * reg."
            )
        if getattr(self.args, "ot_lambda_warmup_steps", 0):
            raise ValueError(
                "ot_lambda_warmup_steps needs OTTrainer to weigh reg, but the model's config has ot_reg_in_loss=True "
                "(the model adds config.ot_lambda * reg itself): set ot_reg_in_loss=False to warm lambda up."
            )

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        # reg is a scalar per batch, not a prediction: keep it out of the gathered logits
        if ignore_keys is None:
            config = getattr(self.accelerator.unwrap_model(model), "config", None)
            ignore_keys = getattr(config, "keys_to_ignore_at_inference", None) or ["past_key_values", "cache"]
        extra = [k for k in ("reg", "task_loss") if k not in ignore_keys]
        generating = getattr(self.args, "predict_with_generate", False) and not prediction_loss_only
        # Seq2SeqTrainer's generating path takes its loss from a teacher-forced forward of its own (with the labels):
        # its outputs give the OT objective (and task loss and reg recorded) as compute_loss would, where
        # compute_loss's forward is that same call (no label smoother or loss function takes the labels out)
        reuse = generating and self.label_smoother is None and self.compute_loss_func is None
        forwards: list[Any] = []
        hook = (  # (only there: every other evaluation batch runs without one)
            self.accelerator.unwrap_model(model).register_forward_hook(
                lambda module, args, kwargs, output: forwards.append(output) if "labels" in kwargs else None,
                with_kwargs=True,
            )
            if reuse
            else None
        )
        try:
            loss, predictions, labels = super().prediction_step(
                model, inputs, prediction_loss_only, ignore_keys=[*ignore_keys, *extra]
            )
        finally:
            if hook is not None:
                hook.remove()
        if loss is not None and generating:
            inputs = self._prepare_inputs(inputs)
            with torch.no_grad(), self.compute_loss_context_manager():
                if reuse and len(forwards) == 1 and forwards[0].get("loss") is not None:
                    out = forwards[0]
                    objective = self._ot_objective(model, inputs, inputs.get("labels"), out.loss, out, out.loss, None)
                else:
                    objective = self.compute_loss(model, inputs)
            loss = objective.detach().mean()
        return loss, predictions, labels

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


class GuardedTrainer(StopOnNonFiniteLoss, Trainer):
    """transformers.Trainer that stops on a non-finite loss (the recipes' plain baselines)."""


class OTTrainer(OTTrainerMixin, Trainer):
    """transformers.Trainer for OT models: loss = task loss + lambda * reg. Use OTTrainingArguments for lambda."""


class OTSeq2SeqTrainer(OTTrainerMixin, Seq2SeqTrainer):  # type: ignore[misc]  # prediction_step: Trainer's signature
    """Seq2SeqTrainer for OT encoder-decoders (predict_with_generate), same loss and logging as OTTrainer."""
