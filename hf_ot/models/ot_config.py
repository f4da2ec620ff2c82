"""The OT settings every family config shares (a mixin put FIRST in the bases: `class X(OTConfigMixin, BaseConfig)`).

This file travels with checkpoints (trust_remote_code): it imports only torch, transformers and its siblings.
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import functools
import math
import typing
import warnings
from typing import Any, Literal

import torch

from .ot_solver import ADAPTIVE_SOLVERS, SOLVERS, num_stages

if typing.TYPE_CHECKING:  # what the mixin reads from the transformers config it is mixed into
    from transformers import PreTrainedConfig as _ConfigBase
else:
    _ConfigBase = object

# Bounds checked when a config is built or loaded and before every forward: nothing in a saved config can make a
# forward run for hours or overflow (1024 steps of a 100-layer stack is already 100k block applications).
MAX_NUM_STEPS = 1024
MAX_TERMINAL_TIME = 1000.0
MAX_LAMBDA = 1e6
MAX_ATOL = 1e3
# The adaptive solvers' tolerances: float32 resolves no relative error below ~1.2e-7, and an absolute tolerance must
# not underflow in the error scale atol + rtol * |x| (1e-300 is 0 in float32: the error ratio would be nan).
MIN_RTOL = 1e-7
MIN_ATOL = 1e-9


@dataclasses.dataclass(frozen=True)
class OTSetting:
    """One OT setting: its config field, the one name users write everywhere (convert's `ot_num_steps=`, a recipe's
    `model.ot.ot_num_steps`, the CLI's `--ot-num-steps`), its type (int, float, bool or Literal[...], `| None` where
    None is allowed), default and bounds. The one table of OT names and checks; every layer derives from it."""

    field: str
    type: Any
    default: Any
    doc: str
    low: float | None = None  # numbers: the bounds (low excluded where low_open)
    high: float | None = None
    low_open: bool = False
    meaning: str = ""  # what the number is, in its error message

    @property
    def flag(self) -> str:
        """The command-line option: --ot-num-steps."""
        return "--" + self.field.replace("_", "-")

    @property
    def nullable(self) -> bool:
        return type(None) in typing.get_args(self.type)

    @property
    def base_type(self) -> Any:
        """The type without its `| None`: int, float, bool or a Literal."""
        args = [a for a in typing.get_args(self.type) if a is not type(None)]
        return args[0] if self.nullable else self.type

    @property
    def choices(self) -> tuple[Any, ...] | None:
        """The values of a Literal setting (solver, mode, state dtype), else None."""
        return typing.get_args(self.base_type) if typing.get_origin(self.base_type) is Literal else None

    def bounds(self) -> str:
        """The allowed values in words (error messages, CLI help)."""
        if self.choices is not None:
            return f"one of {list(self.choices)}"
        if self.base_type is bool:
            return "True or False"
        if self.base_type is int:
            return f"an integer from {self.low:g} to {self.high:g}"
        if self.low_open:
            return f"a finite number > {self.low:g} and <= {self.high:g}"
        return f"a finite number from {self.low:g} to {self.high:g}"

    def problem(self, value: Any, name: str | None = None) -> str | None:
        """The error message for `value` (naming `name`, default the field), or None if it is allowed."""
        if value is None and self.nullable:
            return None
        kind, choices = self.base_type, self.choices
        if choices is not None:
            bad = not isinstance(value, str) or value not in choices
        elif kind is bool:
            bad = not isinstance(value, bool)
        else:
            bad = isinstance(value, bool) or not isinstance(value, int if kind is int else (int, float))
            bad = bad or not math.isfinite(value) or value > self.high
            bad = bad or (value <= self.low if self.low_open else value < self.low)
        if not bad:
            return None
        meaning = f" ({self.meaning})" if self.meaning else ""
        return f"{name or self.field} must be {self.bounds()}{meaning}, got {value!r}."


_M = "the number of solver steps M"
_T = "the terminal time T"
OT_SETTINGS: tuple[OTSetting, ...] = (
    OTSetting("ot_num_steps", int, 1, "M, solver steps over depth", 1, MAX_NUM_STEPS, meaning=_M),
    OTSetting("ot_terminal_time", float, 1.0, "T, dt = T / M", 0.0, MAX_TERMINAL_TIME, True, _T),
    OTSetting(
        "ot_lambda",
        float,
        0.1,
        "weight of reg in the training objective",
        0.0,
        MAX_LAMBDA,
        meaning="the weight of reg in the loss",
    ),
    OTSetting(
        "ot_solver",
        Literal[tuple(sorted(SOLVERS)) + tuple(sorted(ADAPTIVE_SOLVERS))],  # the solver table's names (ot_solver.py)
        "euler",
        "explicit Runge-Kutta solver; heun_euler, bosh3, dopri5: adaptive (error-controlled, ot_rtol / ot_atol)",
    ),
    OTSetting("ot_mode", Literal["residual", "paper"], "residual", "vector field: residual or paper"),
    OTSetting(
        "ot_block_layer_norms",
        bool,
        True,
        "paper mode only: False removes every LayerNorm in the field (nanoGPT run)",
    ),
    OTSetting(
        "ot_decoder_num_steps",
        int | None,
        None,
        "encoder-decoder only: the decoder's M (None: the encoder's)",
        1,
        MAX_NUM_STEPS,
        meaning=_M,
    ),
    OTSetting(
        "ot_decoder_terminal_time",
        float | None,
        None,
        "encoder-decoder only: the decoder's T (None: the encoder's)",
        0.0,
        MAX_TERMINAL_TIME,
        True,
        _T,
    ),
    OTSetting(
        "ot_state_dtype",
        Literal["float32", "model"],
        "float32",
        "dtype of the ODE state of a bf16/fp16 model: float32 (the blocks still run in the model's dtype) or model",
    ),
    OTSetting(
        "ot_reg_in_loss",
        bool,
        False,
        "True: with labels, the model's loss is task loss + ot_lambda * reg",
    ),
    OTSetting(
        "ot_output_reg",
        bool,
        False,
        "True: every forward returns reg (each example's in inference without labels)",
    ),
    OTSetting("ot_checkpoint_steps", bool, False, "True: training forwards checkpoint whole solver steps"),
    OTSetting(
        "ot_rtol",
        float,
        1e-2,
        "adaptive solvers: relative tolerance of the local error",
        MIN_RTOL,
        1.0,
        meaning="the relative tolerance of an adaptive solver's local error",
    ),
    OTSetting(
        "ot_atol",
        float,
        1e-2,
        "adaptive solvers: absolute tolerance of the local error",
        MIN_ATOL,
        MAX_ATOL,
        meaning="the absolute tolerance of an adaptive solver's local error",
    ),
)
SETTING_OF_FIELD = {s.field: s for s in OT_SETTINGS}
# Earlier spellings (recipes' `model.ot.num_steps`, convert's `num_steps=` / `reg_lambda=`): deprecated, each warned
# about with its field's name where it is still read (recipes, convert).
OLD_NAMES = {s.field.removeprefix("ot_"): s.field for s in OT_SETTINGS} | {"reg_lambda": "ot_lambda"}
MODES = SETTING_OF_FIELD["ot_mode"].choices


class OTDeprecationWarning(FutureWarning):
    """An earlier spelling of an hf_ot name (a FutureWarning, shown by default): the message names the one to use."""


def renamed(where: str, old: str, new: str, value: Any, current: Any = None, stacklevel: int = 3) -> Any:
    """`value`, given to `where` under the earlier spelling `old` of `new`: warned about (naming `new`); both given
    (`current`: new's value, None where not given) with different values is a ValueError naming both."""
    if current is not None and current != value:
        raise ValueError(f"{where} got {old}={value!r} and {new}={current!r}: pass {new}= only.")
    warnings.warn(f"{where}: {old}= is deprecated, pass {new}= instead.", OTDeprecationWarning, stacklevel=stacklevel)
    return value


def check_ot_value(field: str, value: Any, name: str | None = None) -> None:
    """Check one OT setting against its row of OT_SETTINGS; a ValueError names the field (or `name`, the argument
    that set it), the value, the allowed range and what it means."""
    setting = SETTING_OF_FIELD.get(field)
    if setting is None:
        raise ValueError(f"Unknown OT setting {field!r}: the OT fields are {sorted(SETTING_OF_FIELD)}.")
    problem = setting.problem(value, name)
    if problem is not None:
        raise ValueError(problem)


def check_ot_settings(values: dict[str, Any]) -> None:
    """Check several OT settings given by config field name (the config's validation, one row of OT_SETTINGS each)."""
    for field, value in values.items():
        check_ot_value(field, value)


# The config whose get_text_config(decoder=True) answers with the unrolled decoder while generate() sizes its caches.
_CACHE_SIZING: contextvars.ContextVar[Any] = contextvars.ContextVar("hf_ot_cache_sizing", default=None)


@dataclasses.dataclass(kw_only=True, repr=False)
class OTConfigMixin(_ConfigBase):
    """OT fields. Typed `Any` so that a bad value reaches our checks (a ValueError naming the field), not a type error.

    The model reads M, T, solver, mode and lambda at every forward and checks them there too, so settings changed on
    `model.config` after loading take effect at once and fail with the same messages as at construction.
    """

    # One dataclass field per row of OT_SETTINGS (names, defaults and meaning are written there only).
    __annotations__ = {setting.field: "Any" for setting in OT_SETTINGS}
    locals().update({setting.field: setting.default for setting in OT_SETTINGS})
    if typing.TYPE_CHECKING:  # the fields above as the type checker sees them (tests check they match the table)
        ot_num_steps: Any
        ot_terminal_time: Any
        ot_lambda: Any
        ot_solver: Any
        ot_mode: Any
        ot_block_layer_norms: Any
        ot_decoder_num_steps: Any
        ot_decoder_terminal_time: Any
        ot_reg_in_loss: Any
        ot_output_reg: Any
        ot_state_dtype: Any
        ot_checkpoint_steps: Any
        ot_rtol: Any
        ot_atol: Any
        _ot_decoder_layer_names: typing.ClassVar[tuple[str, ...]]
        _ot_auto_classes: typing.ClassVar[dict[str, str]]
        keys_to_ignore_at_inference: typing.ClassVar[list[str]]

    # Encoder-decoder families: the attributes holding the decoder's layer count (the first is the count).
    _ot_decoder_layer_names = ()
    # Filled by `register_family` in each family file: Auto class name -> OT model class name, for `auto_map`.
    _ot_auto_classes = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # reg, task_loss, num_field_evaluations are costs, not predictions: Trainer's prediction_step leaves them out,
        # as it leaves out the cache by default when a config names no keys (the field's name before and after 5.24)
        ignored = list(getattr(cls, "keys_to_ignore_at_inference", None) or ["past_key_values", "cache"])
        scalars = ("reg", "task_loss", "num_field_evaluations")
        cls.keys_to_ignore_at_inference = ignored + [k for k in scalars if k not in ignored]

    def __post_init__(self, **kwargs: Any) -> None:
        self.validate_ot_settings()
        for attr in {self.attribute_map.get("num_hidden_layers", "num_hidden_layers"), *self._ot_decoder_layer_attrs()}:
            if isinstance(getattr(self, attr, None), int) and getattr(self, attr) < 1:  # the flow needs a stack
                raise ValueError(f"{attr}={getattr(self, attr)}: an OT model integrates its layers; give {attr} >= 1.")
        unknown = sorted(k for k in [*vars(self), *kwargs] if k.startswith("ot_") and k not in OT_FIELDS)
        if unknown:  # written by a newer hf_ot: this one ignores it (its model may then behave differently)
            warnings.warn(f"{type(self).__name__}: unknown OT field(s) {unknown} ignored (a newer hf_ot's?).")
        if getattr(self, "auto_map", None) is None and self._ot_auto_classes:
            module = type(self).__module__.rsplit(".", 1)[-1]  # the family file, copied flat next to the weights
            self.auto_map = {"AutoConfig": f"{module}.{type(self).__name__}"} | {
                auto: f"{module}.{name}" for auto, name in self._ot_auto_classes.items()
            }
        super().__post_init__(**kwargs)

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> Any:
        # from_pretrained(folder, ot_num_steps=0): transformers sets keyword arguments after the constructor's checks
        loaded = super().from_dict(config_dict, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded).validate_ot_settings()
        return loaded

    def update(self, config_dict: dict[str, Any]) -> None:
        before = {field: getattr(self, field) for field in SETTING_OF_FIELD}
        super().update(config_dict)
        try:
            self.validate_ot_settings()
        except ValueError:
            super().update(before)  # refused: the config keeps its settings
            raise

    def validate_ot_settings(self) -> None:
        """Check every OT field (types and documented bounds) and how they combine; errors name the field."""
        # typed key: True == 1 and 1.0 == 1 must not share a memo entry
        values = tuple((type(v), v) for v in (getattr(self, setting.field) for setting in OT_SETTINGS))
        if torch.compiler.is_compiling():  # traced once per compiled graph (guards on the values), no memo needed
            _check_values.__wrapped__(values, bool(self.is_encoder_decoder), type(self).__name__)
            return
        try:
            _check_values(values, bool(self.is_encoder_decoder), type(self).__name__)
        except TypeError:  # an unhashable value (a list): check without the memo, for the message
            _check_values.__wrapped__(values, bool(self.is_encoder_decoder), type(self).__name__)

    def ot_steps_and_time(self, role: str) -> tuple[int, float]:
        """(M, T) of the stack with this role ('encoder', 'decoder'); a single-stack model uses the shared ones."""
        if role == "decoder" and self.is_encoder_decoder:
            steps = self.ot_decoder_num_steps if self.ot_decoder_num_steps is not None else self.ot_num_steps
            time = self.ot_decoder_terminal_time if self.ot_decoder_terminal_time is not None else self.ot_terminal_time
            return steps, time
        return self.ot_num_steps, self.ot_terminal_time

    @classmethod
    def from_base_config(cls, base_config: Any, **ot_settings: Any) -> Any:
        """The OT config of a base checkpoint's config (same architecture fields) plus OT settings."""
        base_type: type[Any] = next(
            k for k in cls.__mro__ if "model_type" in k.__dict__ and not issubclass(k, OTConfigMixin)
        )
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

    def get_text_config(self, decoder: bool | None = None, encoder: bool | None = None) -> Any:
        # The config itself, as transformers documents (callers write through it); only while generate() of an OT
        # model sizes its caches (a context of that call) is the decoder the unrolled one of `ot_cache_config`.
        text_config = super().get_text_config(decoder=decoder, encoder=encoder)
        # A compiled forward asks here too (masks, caches) and dynamo traces no context variable: generate sizes its
        # caches outside any forward, so inside one the answer is always the config's own.
        if torch.compiler.is_compiling():
            return text_config
        if decoder and not encoder and _CACHE_SIZING.get() is self:
            return self.ot_cache_config()
        return text_config

    def ot_cache_config(self, evaluations: int | None = None) -> Any:
        """A copy of this config that sizes a KV cache for the OT decoder: it applies each of its L blocks once per
        field evaluation (M x solver stages), one cache slot each, so the copy has evaluations * L layers and slot
        e * L + l the layer type of block l (a sliding-window block keeps a sliding cache). evaluations=1 gives one
        slot per block (the cross-attention cache of an encoder-decoder, shared by every evaluation).
        Use: DynamicCache(config=model.config.ot_cache_config()), StaticCache(config=..., max_cache_len=...)."""
        self.validate_ot_settings()  # caches are sized before any forward checks (errors name the field)
        if evaluations is None:
            steps, _ = self.ot_steps_and_time("decoder")
            evaluations = steps * num_stages(self.ot_solver)
        layers = self.ot_decoder_layers()
        text_config = copy.copy(super().get_text_config(decoder=True))
        for attr in self._ot_decoder_layer_attrs():
            setattr(text_config, attr, layers * evaluations)
        layer_types = getattr(self, "layer_types", None)
        if layer_types is not None:
            text_config.layer_types = list(layer_types[:layers]) * evaluations
        return text_config

    def _ot_decoder_layer_attrs(self) -> tuple[str, ...]:
        # The attributes holding the decoder's layer count, the one read first. Encoder-decoder families name theirs
        # (T5: num_decoder_layers, num_layers); others hold it where num_hidden_layers points.
        if self._ot_decoder_layer_names:
            return self._ot_decoder_layer_names
        return (self.attribute_map.get("num_hidden_layers", "num_hidden_layers"),)

    def ot_decoder_layers(self) -> int:
        layers: int = getattr(self, self._ot_decoder_layer_attrs()[0])
        return layers


OT_FIELDS = frozenset(SETTING_OF_FIELD)


@functools.lru_cache(maxsize=256)  # a forward checks the settings: a memo keeps that off the per-token path
def _check_values(values: tuple[Any, ...], is_encoder_decoder: bool, class_name: str) -> None:
    settings = dict(zip(SETTING_OF_FIELD, (value for _, value in values)))
    check_ot_settings(settings)
    if not settings["ot_block_layer_norms"] and settings["ot_mode"] != "paper":
        raise ValueError(
            "ot_block_layer_norms=False is only allowed with ot_mode='paper' (residual mode must keep the base "
            "stack intact); set ot_mode='paper' or keep ot_block_layer_norms=True."
        )
    if not is_encoder_decoder and (
        settings["ot_decoder_num_steps"] is not None or settings["ot_decoder_terminal_time"] is not None
    ):
        raise ValueError(
            "ot_decoder_num_steps / ot_decoder_terminal_time apply to encoder-decoder families only; "
            f"{class_name} has one stack: use ot_num_steps / ot_terminal_time."
        )
