"""The OT model mixin (`class OTX(OTModelMixin, X)`), its outputs, and `register_family` (one table entry per family).

This file travels with checkpoints (trust_remote_code): it imports only torch, transformers and its siblings.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import typing
import warnings
import weakref
from typing import TYPE_CHECKING, Any

import torch
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache, StaticCache

from .ot_config import _CACHE_SIZING, OT_FIELDS, OTConfigMixin
from .ot_flow import (
    CALL_ARGUMENT,
    DepthFlow,
    StackAdapter,
    _CallKey,
    _ModelCall,
    attach_depth_flow,
    run_stack,
    set_owner,
)
from .ot_solver import is_adaptive
from .ot_speculative import candidate_generator, draft_model, prepare_encoder_outputs, speculative_generate

if TYPE_CHECKING:  # what the mixin reads from the transformers model it is mixed into
    from collections.abc import Callable

    from transformers import GenerationMixin, PreTrainedModel

    class _ModelBase(PreTrainedModel, GenerationMixin):
        pass
else:
    _ModelBase = object

# task -> (Auto class, the transformers mapping of model_type -> class name that this Auto class serves)
TASKS = {
    "base": ("AutoModel", "MODEL_MAPPING_NAMES"),
    "causal-lm": ("AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    "seq2seq-lm": ("AutoModelForSeq2SeqLM", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    "masked-lm": ("AutoModelForMaskedLM", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    "sequence-classification": (
        "AutoModelForSequenceClassification",
        "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    ),
    "token-classification": ("AutoModelForTokenClassification", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"),
}


@dataclasses.dataclass(frozen=True)
class Family:
    """One row of the family table, written by `register_family` in the family's own file. Everything else (Auto
    registration, hf_ot.registry, PEFT defaults, convert, the tests' list of heads) is derived from these rows."""

    base_model_type: str
    config_class: Any  # the OT config (an OTConfigMixin subclass of the family's transformers config)
    tasks: dict[str, Any]  # task -> OT model class (an Auto class serves it)
    extra: dict[str, Any]  # base class name -> OT model class no Auto class serves (T5EncoderModel)
    lora_targets: tuple[str, ...] | None = None  # LoRA targets where PEFT has no default for the base type

    @property
    def model_classes(self) -> list[Any]:
        """Every OT model class of the family, once (BART's ForConditionalGeneration serves two tasks)."""
        return list(dict.fromkeys([*self.tasks.values(), *self.extra.values()]))


# base model_type -> its row
FAMILIES: dict[str, Family] = {}


def base_class_of(ot_class: type) -> type[Any]:
    """OTGPT2LMHeadModel -> GPT2LMHeadModel (the transformers class it extends)."""
    return next(k for k in ot_class.__mro__[1:] if not issubclass(k, (OTModelMixin, OTConfigMixin)))


def register_family(config_class: Any, model_classes: list[Any], lora_targets: tuple[str, ...] | None = None) -> None:
    """The one entry of a family: its task of each model class comes from transformers' own Auto mappings, and it is
    registered for `auto_map` (remote code) and listed in FAMILIES (hf_ot registers FAMILIES with the Auto classes)."""
    from transformers.models.auto import modeling_auto

    base_type = base_class_of(config_class).model_type
    tasks, extra = {}, []
    for cls in model_classes:
        cls.config_class = config_class
        base_name = base_class_of(cls).__name__
        # every task whose Auto mapping names the base class (BART/mBART's ForConditionalGeneration serves both
        # AutoModelForSeq2SeqLM and AutoModelForMaskedLM)
        served = [
            t
            for t, (_, mapping) in TASKS.items()
            if getattr(modeling_auto, mapping, {}).get(base_type) == base_name and t not in tasks
        ]
        if not served:
            extra.append(cls)
            cls.register_for_auto_class("AutoModel")  # e.g. an encoder-only checkpoint loads as AutoModel
        for task in served:
            tasks[task] = cls
            cls.register_for_auto_class(TASKS[task][0])
        if "causal-lm" in served:
            cls._ot_causal_lm = True
    config_class._ot_auto_classes = {TASKS[t][0]: cls.__name__ for t, cls in tasks.items()}
    config_class.register_for_auto_class()
    if "base" in tasks and not extra:
        # transformers' Generic* heads (LlamaForSequenceClassification, ...) build their base model with
        # AutoModel.from_config(config): where hf_ot is not installed (remote code) nothing else maps the OT config.
        # Not for families with another AutoModel class (T5EncoderModel): a local AutoModel entry overrides a saved
        # folder's auto_map, so an encoder-only folder would load as the full model.
        from transformers import AutoModel

        AutoModel.register(config_class, tasks["base"], exist_ok=True)
    _register_checkpoint_renames(base_type, config_class.model_type, model_classes)
    FAMILIES[base_type] = Family(
        base_type, config_class, tasks, {base_class_of(c).__name__: c for c in extra}, lora_targets
    )


def _register_checkpoint_renames(base_type: str, ot_type: str, model_classes: list[type]) -> None:
    """transformers renames legacy checkpoint keys at load time (and back at save time) by class name or model_type
    (GPTNeoXForCausalLM: embed_out -> lm_head); the OT classes and type take their base's renames, so an OT class
    loads every checkpoint its base class loads."""
    from transformers.conversion_mapping import (
        get_checkpoint_conversion_mapping,
        register_checkpoint_conversion_mapping,
    )

    pairs = [(base_type, ot_type)] + [(base_class_of(cls).__name__, cls.__name__) for cls in model_classes]
    for base_key, ot_key in pairs:
        renames = get_checkpoint_conversion_mapping(base_key)
        if renames is not None:
            register_checkpoint_conversion_mapping(ot_key, renames, overwrite=True)


_OUTPUT_CLASSES: dict[type, type] = {}


def ot_output_class(base: type) -> type:
    """`base` (a ModelOutput dataclass) plus declared fields: `reg`, the transport cost of this forward,
    `task_loss`, the task's part of `loss` when `loss` is the OT objective (`ot_objective`), and
    `num_field_evaluations`, the field evaluations an adaptive solver used, shape (batch,): every row holds the count
    of the batch's solve, which its rows share (None on a fixed grid: M x stages)."""
    if base not in _OUTPUT_CLASSES:
        name = "OT" + base.__name__
        namespace = {
            "__annotations__": {
                "reg": "torch.FloatTensor | None",
                "task_loss": "torch.FloatTensor | None",
                "num_field_evaluations": "torch.LongTensor | None",
            },
            "reg": None,
            "task_loss": None,
            "num_field_evaluations": None,
            "__module__": __name__,
            "__qualname__": name,
            "__doc__": f"{base.__name__} plus `reg` (kinetic cost of the depth trajectory) and `task_loss`.",
        }
        cls: type[Any] = dataclasses.dataclass(type(name, (base,), namespace))
        globals()[name] = cls  # importable by name, so outputs pickle
        cls._ot_base_fields = frozenset(f.name for f in dataclasses.fields(base))
        _OUTPUT_CLASSES[base] = cls
    return _OUTPUT_CLASSES[base]


def _parameter_names(forward: Callable[..., Any]) -> tuple[str, ...]:
    return tuple(list(inspect.signature(forward).parameters)[1:])  # without self


def _output_classes_of(forward: Callable[..., Any]) -> None:
    """The OT output classes of the ModelOutput classes a forward's return annotation names (the rest, if any, are
    made at their first eager forward)."""
    from transformers.utils import ModelOutput

    annotation = inspect.signature(forward).return_annotation
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, ModelOutput) and dataclasses.is_dataclass(candidate):
            ot_output_class(candidate)


class RegNotTrainedWarning(UserWarning):
    """A training forward computed reg, but its loss does not hold lambda * reg (nothing asked the model to add it)."""


REG_NOT_TRAINED = {  # why the loss leaves reg out -> the message (told once per model each)
    "labels": "{model} computed reg (ot_lambda={lam}) in a training forward, but its loss is the task loss alone: "
    "config.ot_reg_in_loss is False and no OT trainer passed ot_lambda, so lambda * reg is not trained. ",
    "no labels": "{model} computed reg (ot_lambda={lam}) in a training forward without labels: the loss is computed "
    "outside the model (a label smoother, compute_loss_func, your own loss), so lambda * reg is in it only if that "
    "code adds it, and a causal LM's labels must be shifted there (transformers shifts them for its own classes "
    "only). ",
}
REG_NOT_TRAINED_FIX = (
    "Train with hf_ot.OTTrainer (it adds lambda * reg, and shifts a causal LM's labels for label smoothing), or set "
    "model.config.ot_reg_in_loss = True and pass the labels (the model's loss is then task loss + ot_lambda * reg for "
    "any trainer or loop), or add config.ot_lambda * outputs.reg to the loss you compute yourself."
)
# the cases each model has told (once per model and case; weak: a model's lifetime is its own)
_reg_not_trained_warned: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def ot_objective(task_loss: Any, reg: Any, ot_lambda: Any, share: Any = 1.0) -> Any:
    """The OT training objective of one (micro-)batch: task_loss + ot_lambda * share * reg.

    The one place it is computed: the model's loss (`ot_reg_in_loss`, or an `ot_lambda` passed to the forward) and
    hf_ot.OTTrainer (a loss Trainer computes from the logits) both call it. `share` is this micro-batch's part of the
    step under gradient accumulation (`reg_share`), 1 for a loss that is a plain mean."""
    return task_loss + ot_lambda * share * reg.to(task_loss.dtype)


def reg_share(labels: Any, num_items_in_batch: Any, causal: bool) -> Any:
    """The weight of a micro-batch's reg in the loss. A loss normalised by Trainer's `num_items_in_batch` is
    sum / num_items_in_batch, summed over the step's micro-batches (not averaged): weighting reg by this micro-batch's
    share of the items keeps the sum an item-weighted mean of reg. 1 without `num_items_in_batch` (a plain mean)."""
    if num_items_in_batch is None or not isinstance(labels, torch.Tensor) or labels.dim() < 2:
        return 1.0
    counted = labels[..., 1:] if causal else labels  # a causal LM's loss scores labels shifted by one
    total = num_items_in_batch.to(labels.device) if isinstance(num_items_in_batch, torch.Tensor) else num_items_in_batch
    return counted.ne(-100).sum() / total


class OTModelMixin(_ModelBase):
    """Turns a transformers model class into its OT variant: `class OTX(OTModelMixin, X)`.

    After the base __init__ builds the model, every stack of the family (the adapter's stack classes) gets a DepthFlow.
    forward is the base forward plus: `reg` (and `task_loss`) in the output, and `output_hidden_states` returning the
    depth trajectory (X(t_0), ..., X(t_M)) of each stack instead of per-block states.
    """

    ot_adapter: StackAdapter = StackAdapter()
    _ot_key: _CallKey
    _ot_outer: Any
    _ot_draft_of: Any

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(config, OTConfigMixin):
            wanted = getattr(self.config_class, "__name__", "OT config")  # set by register_family
            raise ValueError(
                f"{type(self).__name__} needs an OT config ({wanted}), got {type(config).__name__}."
                f" Build one with {wanted}.from_base_config(config, ot_num_steps=...)."
            )
        config.validate_ot_settings()  # from_pretrained(..., ot_num_steps=...) sets fields after the config's checks
        stray = [name for name in kwargs if name.startswith("ot_")]  # an OT keyword the config did not take
        if stray and stray[0] in OT_FIELDS:  # from_pretrained(..., config=cfg, ot_num_steps=3) leaves it to the model
            raise ValueError(
                f"{stray[0]} is a config field and a config was given: set it there ({stray[0]}=... on the config), "
                "or leave config= out so from_pretrained sets it."
            )
        if stray:
            close = difflib.get_close_matches(stray[0], sorted(OT_FIELDS), n=1)
            raise ValueError(
                f"Unknown OT setting {stray[0]!r}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f": the OT fields are {sorted(OT_FIELDS)}."
            )
        super().__init__(config, *args, **kwargs)
        if getattr(type(self), "_ot_causal_lm", False) and self.loss_type is None:
            # transformers derives loss_type from the class name, which for GPT2LMHeadModel names no loss: its loss is
            # ForCausalLM's all the same, and Trainer counts num_items_in_batch from labels[..., 1:] only for that
            # loss type (else a per-token loss and reg's share come out (T-1)/T of their value).
            self.loss_type = "ForCausalLM"
        family = base_class_of(type(config)).model_type
        for module in list(self.modules()):
            if isinstance(module, self.ot_adapter.stack_classes):
                attach_depth_flow(module, self.ot_adapter, config, family)
        flows = self.ot_flows()
        if not flows:
            raise ValueError(f"{type(self).__name__}: no stack of {self.ot_adapter.stack_classes} found to integrate.")
        key = self.__dict__["_ot_key"] = _CallKey()  # whose calls reach the flows
        # plain attributes (in __dict__: models are no submodules of each other), read by every forward
        self.__dict__.setdefault("_ot_outer", None)  # the outer OT model of an inner one (set below, by the outer)
        self.__dict__["_ot_draft_of"] = None  # the model a depth draft drafts for (ot_speculative.py)
        for flow in flows:  # an outer model (Llama's sequence classifier around its OTLlamaModel) is set up last
            set_owner(flow, self, key)
        for module in self.modules():  # construction time: an inner OT model reads the outer model's settings
            if isinstance(module, OTModelMixin) and module is not self:
                module.__dict__["_ot_outer"] = self  # in __dict__: no submodule of its own inner model
                module.__dict__["_ot_key"] = key  # and runs inside the outer model's call

    @classmethod
    def is_custom_code(cls) -> bool:
        # transformers skips the base class's per-module initialisation of weights missing from a checkpoint for
        # classes outside transformers.*; OT classes initialise exactly as their base classes do.
        return False

    def _prepare_cache_for_generation(
        self, generation_config: Any, model_kwargs: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        # generate() sizes its caches from config.get_text_config(decoder=True): for this call only, that is the
        # unrolled decoder (a slot per block application); the cross-attention cache keeps one slot per block.
        token = _CACHE_SIZING.set(self.config)
        try:
            # transformers types GenerationMixin's self as a Protocol that a model's class does not declare
            result = super()._prepare_cache_for_generation(  # type: ignore[misc]
                generation_config, model_kwargs, *args, **kwargs
            )
        finally:
            _CACHE_SIZING.reset(token)
        for name in ("cache", "past_key_values"):
            cache = model_kwargs.get(name)
            if isinstance(cache, EncoderDecoderCache) and not getattr(cache, "_is_user_defined", False):
                cross: Cache = cache.cross_attention_cache
                blocks = self.config.ot_cache_config(evaluations=1)
                if isinstance(cross, StaticCache):  # sized as generate sizes it: the encoder's length
                    length = model_kwargs["encoder_outputs"][0].shape[1]
                    cross = StaticCache(config=blocks, max_cache_len=length)
                else:
                    cross = DynamicCache(config=blocks)
                model_kwargs[name] = EncoderDecoderCache(cache.self_attention_cache, cross)
        return result

    def _get_candidate_generator(self, *args: Any, **kwargs: Any) -> Any:
        # assisted decoding's set-up: a depth draft of an encoder-decoder takes this model's encoder output
        base = super()._get_candidate_generator  # type: ignore[misc]  # transformers' Protocol self, as above
        return candidate_generator(self, base, args, kwargs)

    def _maybe_prepare_encoder_kwargs_for_generation(
        self, inputs_tensor: Any, model_kwargs: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        # generate's encoder pass: a depth draft reuses its model's encoder output, or runs at the draft's setting
        prepare = super()._maybe_prepare_encoder_kwargs_for_generation  # type: ignore[misc]  # as above
        return prepare_encoder_outputs(self, prepare, inputs_tensor, model_kwargs, args, kwargs)

    def _prepare_encoder_decoder_kwargs_for_generation(
        self, inputs_tensor: Any, model_kwargs: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        # the same step under its name in transformers before 5.2x (5.17 calls this one; newer releases the one above)
        prepare = getattr(super(), "_prepare_encoder_decoder_kwargs_for_generation")  # noqa: B009 (absent in 5.24)
        return prepare_encoder_outputs(self, prepare, inputs_tensor, model_kwargs, args, kwargs)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        base_generate = getattr(cls, "generate", None)
        if base_generate is not None and not getattr(base_generate, "_ot_generate", False):

            def generate(
                self: Any, *args: Any, **kwargs: Any
            ) -> Any:  # draft_num_steps / draft_solver: depth-speculative decoding
                return speculative_generate(self, base_generate, args, kwargs)

            wrapped: Any = functools.wraps(base_generate)(generate)
            wrapped._ot_generate = True
            klass: Any = cls  # a method replaced on the class
            klass.generate = wrapped
        base_forward = next(k.__dict__["forward"] for k in cls.__mro__[1:] if "forward" in k.__dict__)
        if getattr(base_forward, "_ot_forward", False) or "forward" in cls.__dict__:
            return

        names = _parameter_names(base_forward)
        _output_classes_of(base_forward)  # made now: a compiled forward traces no class creation

        def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
            return self._ot_call(base_forward, names, args, kwargs)

        ot_forward: Any = functools.wraps(base_forward)(forward)  # keeps the base signature: Trainer, PEFT, generate
        ot_forward._ot_forward = True
        klass = cls
        klass.forward = ot_forward

    ot_draft_model = draft_model  # model.ot_draft_model(ot_num_steps=1, ot_solver="heun"): ot_speculative.py

    def ot_flows(self) -> list[DepthFlow]:
        """The flows of this model, found now (DataParallel replicas and PEFT wrappers hold their own)."""
        return [m for m in self.modules() if isinstance(m, DepthFlow)]

    def _ot_call(
        self, base_forward: Callable[..., Any], names: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        # Everything here is traced by torch.compile (fullgraph): no context variables, no signature inspection, no
        # class creation; per-call state is this call's objects, passed down as keyword arguments.
        key = self._ot_key
        adapter = self.ot_adapter
        own_stack = isinstance(self, adapter.stack_classes)
        outer_call = kwargs.pop(CALL_ARGUMENT, None)
        if outer_call is not None and outer_call.key is key:
            # An OT model inside its outer OT model's forward (GenericForSequenceClassification builds its base model
            # with AutoModel.from_config, which gives the OT class): the outer call collects reg and the trajectory.
            # Another OT model (called from a hook) gets no call from this one: it starts its own below.
            if own_stack:
                kwargs = {**dict(zip(names, args)), **kwargs}
                return run_stack(self, adapter, base_forward, (), kwargs, outer_call)
            return base_forward(self, *args, **kwargs, **{CALL_ARGUMENT: outer_call})
        # Settings are read from the outer model's config (an inner model's config is a copy made at construction).
        outer = self._ot_outer
        config = outer.config if outer is not None else self.config
        if self._ot_draft_of is not None:  # a depth draft (ot_speculative.py): its own config copy, draft settings
            config = self.config
        config.validate_ot_settings()
        if args:  # name positional arguments, to read labels and masks below
            kwargs = {**dict(zip(names, args)), **kwargs}
        cache_name = next((n for n in ("cache", "past_key_values") if n in names), None)
        if cache_name == "cache" and "past_key_values" in kwargs:
            # the base forward's deprecate_kwarg would warn with this frame as the caller: warn for the user's line
            if not torch.compiler.is_compiling():
                warnings.warn(
                    f"`past_key_values` is deprecated and will be removed in version 5.40.0 for "
                    f"`{type(self).__name__}.forward`. Use `cache` instead.",
                    FutureWarning,
                    stacklevel=3,
                )
            old = kwargs.pop("past_key_values")
            kwargs = {**kwargs, "cache": kwargs.get("cache", old)}
        selection = kwargs.pop("output_hidden_states", None)
        if selection is None:
            selection = config.output_hidden_states
        output_reg = kwargs.pop("output_reg", None)
        # the weight of reg in this call's loss, for a trainer that schedules it (hf_ot.OTTrainer's warm-up); else
        # the config's ot_lambda where the config puts reg into the loss
        lam = asked = kwargs.pop("ot_lambda", None)
        if lam is None and config.ot_reg_in_loss:
            lam = config.ot_lambda
        return_dict = kwargs.pop("return_dict", None)
        if return_dict is None:
            return_dict = getattr(config, "return_dict", True)
        if (
            self.training
            and kwargs.get("use_cache") is None
            and cache_name is not None
            and kwargs.get(cache_name) is None
            and "use_cache" in names
        ):
            # transformers' decoders default to config.use_cache also in training forwards: an OT decoder would fill
            # M x stages x L KV slots per step that nothing reads (time, memory, a recompile per slot when compiled).
            kwargs["use_cache"] = False
        if is_adaptive(config.ot_solver) and kwargs.get("use_cache") is None and "use_cache" in names:
            kwargs["use_cache"] = False  # an adaptive grid fills no cache; asked for one explicitly, the flow raises
        labels = kwargs.get("labels")
        valid = {}
        if config.is_encoder_decoder:  # the decoder's valid positions: its mask, else the labels' (-100: padding)
            decoder_mask = kwargs.get("decoder_attention_mask")
            if decoder_mask is None and isinstance(labels, torch.Tensor) and labels.dim() == 2:
                decoder_mask = labels.ne(-100)
            valid["decoder"] = decoder_mask
        # returned only for ot_output_reg (inference, no labels): each example's reg, which pipelines split by row
        per_example = output_reg is None and config.ot_output_reg and not self.training and labels is None
        if output_reg is None:
            output_reg = config.ot_output_reg or self.training or labels is not None or lam is not None
        # reg is computed only when it is returned (an inference forward, e.g. each generated token, skips its cost)
        record = selection is not False and selection is not None
        call = _ModelCall(key, config, record, valid, want_reg=output_reg, per_example=per_example)
        kwargs = {**kwargs, "output_hidden_states": False, "return_dict": True}
        if own_stack:  # GPT2Model, BertModel: the model runs its flow itself
            out = run_stack(self, adapter, base_forward, (), kwargs, call)
        else:  # the head passes the call down to its stacks
            out = base_forward(self, **kwargs, **{CALL_ARGUMENT: call})

        regs = [reg for _, reg, _ in call.results if reg is not None]
        reg = torch.stack(regs).sum(0) if regs else None
        fields = dict(out)
        out_class: Any = ot_output_class(type(out))
        out_fields = out_class._ot_base_fields
        if call.record:
            for role, _, trajectory in call.results:
                trajectory = _select(trajectory, selection)
                if "encoder_last_hidden_state" in out_fields:
                    fields[f"{role}_hidden_states"] = trajectory
                elif "hidden_states" in out_fields:
                    fields["hidden_states"] = trajectory
        if lam is not None and fields.get("loss") is not None and reg is not None:
            fields["task_loss"] = fields["loss"]
            share = self.ot_reg_share(labels, kwargs.get("num_items_in_batch"))
            fields["loss"] = ot_objective(fields["loss"], reg, lam, share)
        elif asked is None and self.training and reg is not None and config.ot_lambda:
            if not torch.compiler.is_compiling():  # (told once, from an eager forward)
                _warn_reg_not_trained(self, config, "labels" if fields.get("loss") is not None else "no labels")
        if is_adaptive(config.ot_solver):  # the batch's count in every row: pipelines slice each output by row
            rows = next(v for v in fields.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
            fields["num_field_evaluations"] = torch.full(rows.shape[:1], call.evaluations, device=rows.device)
        result = out_class(**fields, reg=reg if output_reg else None)
        return result if return_dict else result.to_tuple()

    def ot_reg_share(self, labels: Any, num_items_in_batch: Any) -> Any:
        """The weight of this micro-batch's reg in the loss (`reg_share`, with this model's label shift)."""
        return reg_share(labels, num_items_in_batch, getattr(self, "loss_type", None) == "ForCausalLM")


def _warn_reg_not_trained(model: Any, config: Any, case: str) -> None:
    """Once per model and case: a training forward whose loss leaves out lambda * reg (see REG_NOT_TRAINED)."""
    told = _reg_not_trained_warned.setdefault(model, set())
    if case not in told:
        told.add(case)
        message = REG_NOT_TRAINED[case].format(model=type(model).__name__, lam=config.ot_lambda) + REG_NOT_TRAINED_FIX
        warnings.warn(message, RegNotTrainedWarning, stacklevel=4)


def _select(trajectory: tuple[Any, ...] | None, selection: Any) -> tuple[Any, ...] | None:
    """The trajectory with None at the states `output_hidden_states` did not select (a list of indices or an int)."""
    if trajectory is None or isinstance(selection, bool):
        return trajectory
    indices = [selection] if isinstance(selection, int) else list(selection)
    n = len(trajectory)
    keep = {i % n for i in indices if -n <= i < n}
    return tuple(state if i in keep else None for i, state in enumerate(trajectory))
