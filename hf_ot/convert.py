"""Conversion: a base checkpoint (hub id, local folder or loaded model) plus OT settings -> the OT model."""

from __future__ import annotations

import difflib
import inspect
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, PreTrainedModel

from .adapters import mark_unsaved
from .models.ot_config import OT_FIELDS, OT_SETTINGS
from .models.ot_model import base_class_of
from .registry import TASK_AUTO_CLASSES, Family, all_model_classes, family_of
from .task_names import convert_task

logger = logging.getLogger(__name__)

_CONFIG_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "subfolder", "trust_remote_code")
# the from_pretrained keywords a misspelt one is compared with
_LOAD_KWARGS = (*_CONFIG_KWARGS, "dtype", "torch_dtype", "attn_implementation", "device_map", "low_cpu_mem_usage")


def convert_parameters() -> dict[str, str]:
    """OT config field -> the keyword of `convert` that sets it (from the one table of OT settings and convert's
    signature; the OT fields without a keyword, e.g. ot_reg_in_loss, are passed through to the config)."""
    params = inspect.signature(convert).parameters
    return {s.field: s.parameter for s in OT_SETTINGS if s.parameter in params}


def _check_misspelt(names, base_config) -> None:
    """A keyword close to one of convert's own parameters (num_step=4) would reach from_pretrained, which ignores it or
    fails deep in the model class: name it here."""
    for name in names:
        parameter_of_field = convert_parameters()
        own = ("task", *parameter_of_field.values())
        if name in parameter_of_field:
            raise ValueError(f"hf_ot.convert sets {name} from its parameter {parameter_of_field[name]}=: pass that.")
        if hasattr(base_config, name) or name in OT_FIELDS:
            continue
        close = difflib.get_close_matches(name.removeprefix("ot_"), own, n=1, cutoff=0.8)
        if close or name.startswith("ot_"):
            hint = f" (did you mean {close[0]}=?)" if close else ""
            raise ValueError(
                f"hf_ot.convert got an unknown keyword {name!r}{hint}: its OT parameters are {list(own)}; "
                "other keywords go to from_pretrained or set config fields."
            )


def base_class_name(ot_class: type) -> str:
    """OTGPT2LMHeadModel -> 'GPT2LMHeadModel' (the transformers class it extends)."""
    return base_class_of(ot_class).__name__


def ot_class_for(family: Family, task: str | None, architectures: list[str] | None) -> type[Any]:
    if task is not None:
        if task not in family.tasks:
            raise ValueError(
                f"task={task!r} is not available for {family.base_model_type}: choose one of {sorted(family.tasks)}."
            )
        return family.tasks[task]
    by_name = {base_class_name(cls): cls for cls in all_model_classes(family)}
    by_name.update({cls.__name__: cls for cls in all_model_classes(family)})
    for arch in architectures or []:
        if arch in by_name:
            return by_name[arch]
    if architectures:
        # A head hf_ot has no OT class for (e.g. BertForPreTraining, LlamaForTokenClassification): converting to the
        # base model would drop its weights with only a warning. Ask which OT model is meant instead.
        raise ValueError(
            f"{family.base_model_type} checkpoint with architecture {architectures}: hf_ot has no OT class for it. "
            f"Pass task= one of {sorted(family.tasks)} (e.g. task='base' keeps the base model and drops the head)."
        )
    return family.tasks["base"]


_UNSET = None


def convert(
    base,
    *,
    task: str | None = None,
    num_steps: int | None = _UNSET,
    terminal_time: float | None = _UNSET,
    reg_lambda: float | None = _UNSET,
    solver: str | None = _UNSET,
    mode: str | None = _UNSET,
    block_layer_norms: bool | None = _UNSET,
    decoder_num_steps: int | None = _UNSET,
    decoder_terminal_time: float | None = _UNSET,
    **from_pretrained_kwargs,
) -> PreTrainedModel:
    """Load `base` as an OT-Transformer.

    base: a hub id, a local checkpoint folder, or a loaded transformers model of a supported family (README).
    task: one of 'base', 'causal-lm', 'masked-lm', 'seq2seq-lm', 'sequence-classification',
        'token-classification'; default: the checkpoint's own architecture (config.architectures).
    num_steps, terminal_time: M and T of the depth ODE (dt = T / M); decoder_* override them for a decoder.
    reg_lambda: the weight of reg in the training loss (stored in the config as ot_lambda).
    solver: 'euler' (the paper's), 'heun', 'rk4', or adaptive 'heun_euler', 'bosh3', 'dopri5' (OT_SETTINGS holds
        every setting's bounds). mode: 'residual' (f = S(X) - X; M = T = 1 is the base model) or 'paper'
        (f = final_norm(S(X)), the official formulation); block_layer_norms=False (paper mode only) removes the
        LayerNorms from the field as in the paper's char-level run.
    Other keyword arguments go to from_pretrained (revision, token, dtype, attn_implementation, num_labels, ...).

    The OT model comes back in evaluation mode, as from_pretrained gives it (a loaded model: in that model's mode).
    Parameter names are the base family's, so the base weights load with no key mapping. Weights the base checkpoint
    lacks (a new classification head) are initialised as transformers does and listed in `model.ot_loading_info`.

    A checkpoint that already is an OT model keeps its OT settings (M, T, lambda, solver, mode, ...): only the
    parameters given change them, and a warning names what was kept and what changed (`model.ot_conversion_info`).
    Unset parameters of a base checkpoint take the defaults above (num_steps=1, terminal_time=1.0, reg_lambda=0.1,
    solver='euler', mode='residual', block_layer_norms=True).

    For fine-tuning a pretrained checkpoint keep mode='residual' and reg_lambda <= 0.1 (a lambda near 1 costs accuracy
    at a fine-tuning budget): num_steps=2 keeps plain fine-tuning's accuracy at 2 field evaluations; num_steps=4
    gives a model that keeps it at every solver and M' of 2 evaluations or more (the `sst2_minilm_elastic` recipe;
    `hf-ot calibrate` picks the cheapest; docs/results/pretrained-elastic.md).
    """
    arguments = locals()
    given = {p: arguments[p] for p in DEFAULTS if arguments[p] is not _UNSET}
    if not isinstance(base, (str, os.PathLike, PreTrainedModel)):
        fix = (
            "convert the base model, then add adapters (get_peft_model), or merge the adapter first "
            "(model.merge_and_unload())"
            if hasattr(base, "peft_config")
            else "convert the model before you compile it (then torch.compile, or hf_ot.compile)"
            if isinstance(base, torch.nn.Module) and hasattr(base, "_orig_mod")
            else "pass the model itself"
        )
        raise TypeError(
            f"hf_ot.convert takes a hub id, a local folder or a loaded transformers model, got "
            f"{type(base).__name__}: {fix}."
        )
    if isinstance(base, PreTrainedModel):
        base_config = base.config
    else:
        if isinstance(base, (str, os.PathLike)) and Path(os.path.expanduser(str(base))).is_dir():
            from .checkpoints import check_model_files

            check_model_files(Path(os.path.expanduser(str(base))))  # config, auto_map and weights, file by file
        config_kwargs = {k: from_pretrained_kwargs[k] for k in _CONFIG_KWARGS if k in from_pretrained_kwargs}
        base_config = AutoConfig.from_pretrained(base, **config_kwargs)
    field_of = {parameter: field for field, parameter in convert_parameters().items()}
    already_ot = all(hasattr(base_config, field) for field in field_of.values())
    if already_ot:  # keep the OT model's settings; the ones given replace them
        current = {param: getattr(base_config, field_of[param]) for param in DEFAULTS}
        values = {**current, **given}
        changed = {p: (current[p], v) for p, v in given.items() if current[p] != v}
        kept = {p: v for p, v in current.items() if p not in given and v is not None}
        conversion_info = {"already_ot": True, "kept": kept, "changed": changed}
        logger.warning(
            "%s is already an OT model (%s): its OT settings are kept (%s)%s.",
            base if isinstance(base, str) else type(base).__name__,
            base_config.model_type,
            ", ".join(f"{k}={v!r}" for k, v in kept.items()) or "none",
            "; changed: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items()) if changed else "",
        )
    else:
        values = {**DEFAULTS, **given}
        conversion_info = {"already_ot": False}
    settings = {field_of[param]: value for param, value in values.items()}
    _check_misspelt(from_pretrained_kwargs, base_config)
    if isinstance(base, PreTrainedModel):
        loading_only = [
            k
            for k in from_pretrained_kwargs
            if not hasattr(base_config, k)
            and k not in OT_FIELDS
            and k not in ("dtype", "torch_dtype", "attn_implementation")
        ]
        if loading_only:
            raise ValueError(
                f"hf_ot.convert got {loading_only} with a model that is already loaded: these are from_pretrained "
                "arguments. Pass them when loading the base model, or pass its hub id or folder to convert."
            )
    family = family_of(base_config.model_type)
    if not base_config.is_encoder_decoder:
        settings.pop("ot_decoder_num_steps")
        settings.pop("ot_decoder_terminal_time")
        if given.get("decoder_num_steps") is not None or given.get("decoder_terminal_time") is not None:
            raise ValueError(
                f"decoder_num_steps / decoder_terminal_time apply to encoder-decoder models; "
                f"{base_config.model_type} has one stack: use num_steps / terminal_time."
            )
    config_overrides = {
        k: from_pretrained_kwargs.pop(k)
        for k in list(from_pretrained_kwargs)
        if k not in _CONFIG_KWARGS
        and k not in ("dtype", "torch_dtype", "attn_implementation")
        and (hasattr(base_config, k) or k in OT_FIELDS)
    }
    ot_config = family.config_class.from_base_config(base_config, **settings)
    if hasattr(ot_config, "hf_ot_calibration"):  # calibrate --write's record describes the earlier model, not this one
        del ot_config.hf_ot_calibration
    for key, value in config_overrides.items():  # e.g. num_labels=2, ot_reg_in_loss=True
        setattr(ot_config, key, value)
    ot_config.validate_ot_settings()
    architectures = [type(base).__name__] if isinstance(base, PreTrainedModel) else base_config.architectures
    cls = ot_class_for(family, convert_task(task), architectures)  # pipeline names are aliases

    if isinstance(base, PreTrainedModel):
        # the loaded model's attention implementation (eager, sdpa, ...) unless the caller names another
        implementation = from_pretrained_kwargs.get("attn_implementation", base.config._attn_implementation)
        model = cls._from_config(ot_config, attn_implementation=implementation)
        result = model.load_state_dict(base.state_dict(), strict=False)
        info = {"missing_keys": list(result.missing_keys), "unexpected_keys": list(result.unexpected_keys)}
        dtype = from_pretrained_kwargs.get("dtype", from_pretrained_kwargs.get("torch_dtype"))
        if isinstance(dtype, str) and dtype != "auto":
            dtype = getattr(torch, dtype)
        if not isinstance(dtype, torch.dtype):  # None or "auto": the loaded model's own
            dtype = next(base.parameters()).dtype
        model.to(dtype=dtype, device=next(base.parameters()).device)
        model.train(base.training)  # the loaded model's mode (from_pretrained: evaluation), as a PEFT wrapper keeps it
    else:
        try:
            model, info = cls.from_pretrained(
                base, config=ot_config, output_loading_info=True, **from_pretrained_kwargs
            )
        except TypeError as err:  # transformers hands a keyword it does not know to the model class
            unknown = re.search(r"unexpected keyword argument '(\w+)'", str(err))
            if unknown is None or unknown.group(1) not in from_pretrained_kwargs:
                raise
            name = unknown.group(1)
            known = [*convert_parameters().values(), *_LOAD_KWARGS, "num_labels", *base_config.to_dict()]
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
            raise ValueError(
                f"hf_ot.convert got an unknown keyword {name!r}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f": it is neither a parameter of convert, a from_pretrained keyword nor a field of "
                f"{base_config.model_type}'s config."
            ) from None
    model.ot_loading_info = {k: sorted(v) for k, v in info.items() if k in ("missing_keys", "unexpected_keys")}
    mark_unsaved(model)  # until saved, an adapter of it names the fix as its base, not the plain checkpoint
    if any(model.ot_loading_info.values()):
        logger.warning(
            "Converted %s with %s", base if isinstance(base, str) else type(base).__name__, model.ot_loading_info
        )
    model.config.architectures = [cls.__name__]
    model.ot_conversion_info = conversion_info
    return model


# convert's defaults for a base checkpoint: the table's, for the settings convert has a parameter for (a checkpoint that
# already is an OT model keeps its own settings instead)
DEFAULTS = {s.parameter: s.default for s in OT_SETTINGS if s.field in convert_parameters()}

__all__ = ["convert", "TASK_AUTO_CLASSES"]
