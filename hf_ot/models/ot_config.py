"""The OT settings every family config shares (a mixin put FIRST in the bases: `class X(OTConfigMixin, BaseConfig)`).

This file travels with checkpoints (trust_remote_code): it imports only torch, transformers and its siblings.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

from .ot_solver import check_solver_settings, num_stages

MODES = ("residual", "paper")


@dataclasses.dataclass(kw_only=True, repr=False)
class OTConfigMixin:
    """OT fields. Typed `Any` so that a bad value reaches our checks (a ValueError naming the field), not a type error.

    The model reads M, T, solver, mode and lambda at every forward and checks them there too, so settings changed on
    `model.config` after loading take effect at once and fail with the same messages as at construction.
    """

    ot_num_steps: Any = 1  # M, solver steps over depth
    ot_terminal_time: Any = 1.0  # T, dt = T / M
    ot_lambda: Any = 0.1  # weight of reg in the training objective
    ot_solver: Any = "euler"  # one of SOLVERS
    ot_mode: Any = "residual"  # one of MODES
    ot_block_layer_norms: Any = True  # paper mode only: False removes every LayerNorm in the field (nanoGPT run)
    ot_decoder_num_steps: Any = None  # encoder-decoder only: the decoder's M (None: same as the encoder's)
    ot_decoder_terminal_time: Any = None  # encoder-decoder only: the decoder's T (None: same as the encoder's)
    # True: when labels are given, the model's own `loss` is task loss + ot_lambda * reg (as MoE models add
    # router_aux_loss_coef * aux_loss), so any trainer optimises the OT objective; `task_loss` keeps the task's part.
    ot_reg_in_loss: Any = False
    # True: return `reg` from every forward. By default it is returned when training, when labels are given or when
    # the forward is called with output_reg=True (pipelines split every output tensor along the batch; reg has none).
    ot_output_reg: Any = False
    # True: training forwards checkpoint whole solver steps (one hidden state kept per step, one more forward of each
    # step in backward) instead of, not together with, block checkpointing (gradient_checkpointing_enable()).
    ot_checkpoint_steps: Any = False

    # Encoder-decoder families: the attributes holding the decoder's layer count (the first is the count).
    _ot_decoder_layer_names = ()
    # Filled by `register_family` in each family file: Auto class name -> OT model class name, for `auto_map`.
    _ot_auto_classes = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # reg and task_loss are scalars, not predictions: Trainer's prediction_step leaves these keys out of logits.
        ignored = list(getattr(cls, "keys_to_ignore_at_inference", None) or [])
        cls.keys_to_ignore_at_inference = ignored + [k for k in ("reg", "task_loss") if k not in ignored]

    def __post_init__(self, **kwargs):
        self.validate_ot_settings()
        if getattr(self, "auto_map", None) is None and self._ot_auto_classes:
            module = type(self).__module__.rsplit(".", 1)[-1]  # the family file, copied flat next to the weights
            self.auto_map = {"AutoConfig": f"{module}.{type(self).__name__}"} | {
                auto: f"{module}.{name}" for auto, name in self._ot_auto_classes.items()
            }
        super().__post_init__(**kwargs)

    def validate_ot_settings(self) -> None:
        check_solver_settings(self.ot_num_steps, self.ot_terminal_time, self.ot_solver)
        lam = self.ot_lambda
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam) or lam < 0:
            raise ValueError(f"ot_lambda must be a finite number >= 0 (the weight of reg in the loss), got {lam!r}.")
        if self.ot_mode not in MODES:
            raise ValueError(f"ot_mode must be one of {list(MODES)}, got {self.ot_mode!r}.")
        for name in ("ot_block_layer_norms", "ot_reg_in_loss", "ot_output_reg", "ot_checkpoint_steps"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}.")
        if not self.ot_block_layer_norms and self.ot_mode != "paper":
            raise ValueError(
                "ot_block_layer_norms=False is only allowed with ot_mode='paper' (residual mode must keep the base "
                "stack intact); set ot_mode='paper' or keep ot_block_layer_norms=True."
            )
        if self.is_encoder_decoder:
            steps, time = self.ot_steps_and_time("decoder")
            try:
                check_solver_settings(steps, time, self.ot_solver)
            except ValueError as err:
                raise ValueError(str(err).replace("ot_num_steps", "ot_decoder_num_steps").replace(
                    "ot_terminal_time", "ot_decoder_terminal_time")) from None
        elif self.ot_decoder_num_steps is not None or self.ot_decoder_terminal_time is not None:
            raise ValueError(
                "ot_decoder_num_steps / ot_decoder_terminal_time apply to encoder-decoder families only; "
                f"{type(self).__name__} has one stack: use ot_num_steps / ot_terminal_time."
            )

    def ot_steps_and_time(self, role: str) -> tuple[int, float]:
        """(M, T) of the stack with this role ('encoder', 'decoder'); a single-stack model uses the shared ones."""
        if role == "decoder" and self.is_encoder_decoder:
            steps = self.ot_decoder_num_steps if self.ot_decoder_num_steps is not None else self.ot_num_steps
            time = self.ot_decoder_terminal_time if self.ot_decoder_terminal_time is not None else self.ot_terminal_time
            return steps, time
        return self.ot_num_steps, self.ot_terminal_time

    @classmethod
    def from_base_config(cls, base_config, **ot_settings):
        """The OT config of a base checkpoint's config (same architecture fields) plus OT settings."""
        base_type = next(k for k in cls.__mro__ if "model_type" in k.__dict__ and not issubclass(k, OTConfigMixin))
        if not isinstance(base_config, (OTConfigMixin, base_type)):
            raise ValueError(
                f"{cls.__name__} converts {base_type.model_type!r} checkpoints, but the base config is "
                f"{type(base_config).__name__} (model_type={getattr(base_config, 'model_type', None)!r}). "
                "Use the OT config class of that family (hf_ot.convert picks it from model_type)."
            )
        unknown = [k for k in ot_settings if k not in OT_FIELDS]
        if unknown:
            raise ValueError(f"Unknown OT settings {unknown}: OT fields are {sorted(OT_FIELDS)}.")
        values = base_config.to_dict()
        for key in ("model_type", "transformers_version", "auto_map", "architectures"):
            values.pop(key, None)
        values.update(ot_settings)
        return cls(**values)

    def get_text_config(self, decoder=None, encoder=None):
        # Cache layout: transformers sizes every cache from get_text_config(decoder=True) (num_hidden_layers and
        # layer_types). An OT decoder applies each block once per field evaluation, so its unrolled decoder has
        # steps * stages * L attention layers, one KV slot each; slot e * L + l has the layer type of block l (a
        # sliding-window block keeps a sliding cache). `_ot_unrolled` keeps the copy from being unrolled again.
        text_config = super().get_text_config(decoder=decoder, encoder=encoder)
        if not decoder or encoder or getattr(self, "_ot_unrolled", False):
            return text_config
        self.validate_ot_settings()  # caches are sized before any forward checks (errors name the field)
        steps, time = self.ot_steps_and_time("decoder")
        evaluations = steps * num_stages(self.ot_solver)
        layers = self.ot_decoder_layers()
        text_config = copy.copy(text_config) if text_config is self else text_config
        for attr in self._ot_decoder_layer_attrs():
            setattr(text_config, attr, layers * evaluations)
        layer_types = getattr(self, "layer_types", None)
        if layer_types is not None:
            text_config.layer_types = list(layer_types[:layers]) * evaluations
        text_config._ot_unrolled = True
        return text_config

    def _ot_decoder_layer_attrs(self) -> tuple[str, ...]:
        # The attributes holding the decoder's layer count, the one read first. Encoder-decoder families name theirs
        # (T5: num_decoder_layers, num_layers); others hold it where num_hidden_layers points.
        if self._ot_decoder_layer_names:
            return self._ot_decoder_layer_names
        return (self.attribute_map.get("num_hidden_layers", "num_hidden_layers"),)

    def ot_decoder_layers(self) -> int:
        return getattr(self, self._ot_decoder_layer_attrs()[0])


OT_FIELDS = {f.name for f in dataclasses.fields(OTConfigMixin)}


def copy_ot_settings(source, target) -> None:
    """The OT fields of `source` (the model's config) onto `target`, a copy a sub-model was built from (T5's stacks):
    settings changed on model.config since must reach a stack that is called on its own (generate's encoder pass)."""
    if target is source:
        return
    for name in OT_FIELDS:
        value = getattr(source, name)
        if getattr(target, name) != value:
            setattr(target, name, value)
