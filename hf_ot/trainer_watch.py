"""A warning for trainers that do not train reg: a plain `Trainer` (or TRL's `SFTTrainer`, any Trainer subclass but
OTTrainer) training an OT model with `ot_lambda > 0` and `ot_reg_in_loss=False` minimises the task loss alone, since
the model's `loss` is the task loss. hf_ot adds a callback to transformers' default Trainer callbacks
(`transformers.trainer.DEFAULT_CALLBACKS`, which every Trainer starts from) that warns once at the start of training,
naming both fixes, and whenever it trains an OT model with label smoothing (computed from the logits, without
reg and, for a causal LM, against unshifted labels). OTTrainer removes it (it adds lambda * reg itself).

The callback is added when hf_ot is imported if transformers.trainer is already imported, else right after it is
(an import hook for that one module), so `import hf_ot` does not import the Trainer stack.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import warnings
from typing import Any

_warned = False
MESSAGE = (
    "{trainer} is training an OT model with ot_lambda={lam} > 0 but without reg: the model's loss is the task loss "
    "alone (config.ot_reg_in_loss=False), so the lambda * reg term is not trained. Either train with "
    "hf_ot.OTTrainer (it adds lambda * reg), or set model.config.ot_reg_in_loss = True (the model's loss becomes "
    "task loss + ot_lambda * reg, for any trainer)."
)

SMOOTHING = (
    "{trainer} computes the label-smoothed loss (label_smoothing_factor={eps}) from an OT model's logits itself: "
    "the model's reg is not in it (config.ot_reg_in_loss does not apply), and a causal LM's labels are not shifted "
    "(transformers shifts them only for its own causal-LM classes). Train with hf_ot.OTTrainer, which does both."
)


def ot_config_of(model: Any) -> Any:
    if model is None:
        return None
    get_base = getattr(model, "get_base_model", None)  # a PEFT model
    if callable(get_base):
        model = get_base()
    config = getattr(getattr(model, "module", model), "config", None)  # a DDP wrapper
    return config if config is not None and hasattr(config, "ot_reg_in_loss") else None


@functools.cache
def _callback_class() -> type:
    """The callback class, made when first needed: transformers.trainer_callback imports the Trainer's utilities (and
    PEFT), seconds that `import hf_ot` does not pay."""
    from transformers.trainer_callback import TrainerCallback

    class RegNotTrainedWarning(TrainerCallback):
        """Warns once (per process) when a trainer other than OTTrainer trains an OT model whose reg is weighted but
        not in its loss."""

        trainer_name = "This Trainer"

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            global _warned
            config = ot_config_of(model)
            smoothing = getattr(args, "label_smoothing_factor", None)
            if config is not None and smoothing:
                warnings.warn(SMOOTHING.format(trainer=self.trainer_name, eps=smoothing), stacklevel=2)
            if _warned or config is None:
                return
            lam = float(getattr(config, "ot_lambda", 0.0) or 0.0)
            if lam > 0 and not config.ot_reg_in_loss:
                _warned = True
                warnings.warn(MESSAGE.format(trainer=self.trainer_name, lam=lam), UserWarning, stacklevel=2)

    return RegNotTrainedWarning


def __getattr__(name: str) -> Any:
    if name == "RegNotTrainedWarning":
        return _callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register(trainer_module: Any) -> None:
    defaults = trainer_module.DEFAULT_CALLBACKS
    if _callback_class() not in defaults:
        defaults.append(_callback_class())


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs _register once transformers.trainer has been imported (then steps aside)."""

    name = "transformers.trainer"

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            _register(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    module = sys.modules.get("transformers.trainer")
    if module is not None:
        _register(module)
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
