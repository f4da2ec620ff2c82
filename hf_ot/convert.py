"""Conversion: a base checkpoint (hub id, local folder or loaded model) plus OT settings -> the OT model."""

from __future__ import annotations

import difflib
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, PreTrainedModel

from .adapters import mark_unsaved
from .models.ot_config import OLD_NAMES, OT_FIELDS, SETTING_OF_FIELD, renamed
from .models.ot_model import base_class_of
from .registry import TASK_AUTO_CLASSES, Family, all_model_classes, family_of
from .task_names import convert_task

logger = logging.getLogger(__name__)

_CONFIG_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "subfolder", "trust_remote_code")
# the from_pretrained keywords a misspelt one is compared with
_LOAD_KWARGS = (*_CONFIG_KWARGS, "dtype", "torch_dtype", "attn_implementation", "device_map", "low_cpu_mem_usage")


# convert's keywords of earlier versions (deprecated): each still works, with a FutureWarning naming its ot_* name
_OLD_PARAMETERS: tuple[str, ...] = ("num_steps", "terminal_time", "reg_lambda", "solver", "mode", "block_layer_norms")
_OLD_PARAMETERS += ("decoder_num_steps", "decoder_terminal_time")


def _check_misspelt(names, base_config) -> None:
    """A keyword close to one of convert's own parameters (ot_num_step=4, reg_lamda=) would reach from_pretrained,
    which ignores it or fails deep in the model class: name it here, with the parameter meant."""
    own = ("task", *SETTING_OF_FIELD)
    meant = {name: name for name in own} | {old: OLD_NAMES[old] for old in _OLD_PARAMETERS}
    for name in names:
        if hasattr(base_config, name):
            continue
        close = difflib.get_close_matches(name, meant, n=1, cutoff=0.8)
        if close or name.startswith("ot_"):
            hint = f" (did you mean {meant[close[0]]}=?)" if close else ""
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


def convert(
    base,
    *,
    task: str | None = None,
    ot_num_steps: int | None = None,
    ot_terminal_time: float | None = None,
    ot_lambda: float | None = None,
    ot_solver: str | None = None,
    ot_mode: str | None = None,
    ot_block_layer_norms: bool | None = None,
    ot_decoder_num_steps: int | None = None,
    ot_decoder_terminal_time: float | None = None,
    ot_state_dtype: str | None = None,
    ot_reg_in_loss: bool | None = None,
    ot_output_reg: bool | None = None,
    ot_checkpoint_steps: bool | None = None,
    ot_rtol: float | None = None,
    ot_atol: float | None = None,
    **from_pretrained_kwargs,
) -> PreTrainedModel:
    """Load `base` as an OT-Transformer.

    base: a hub id, a local checkpoint folder, or a loaded transformers model of a supported family (README).
    task: one of 'base', 'causal-lm', 'masked-lm', 'seq2seq-lm', 'sequence-classification',
        'token-classification'; default: the checkpoint's own architecture (config.architectures).
    ot_num_steps, ot_terminal_time: M and T of the depth ODE (dt = T / M); ot_decoder_* set them for a decoder.
    ot_lambda: the weight of reg in the training loss. ot_solver: 'euler' (the paper's), 'heun', 'rk4', or adaptive
        'heun_euler', 'bosh3', 'dopri5'. ot_mode: 'residual' (f = S(X) - X; M = T = 1 is the base model) or 'paper'
        (f = final_norm(S(X)), the official formulation); ot_block_layer_norms=False (paper mode only) removes the
        LayerNorms from the field as in the paper's char-level run. Every ot_* parameter is the config field of that
        name (OT_SETTINGS in hf_ot/models/ot_config.py holds each one's meaning, default and bounds); None: unset.
    Other keyword arguments go to from_pretrained (revision, token, dtype, attn_implementation, num_labels, ...).

    The OT model comes back in evaluation mode, as from_pretrained gives it (a loaded model: in that model's mode).
    Parameter names are the base family's, so the base weights load with no key mapping. Weights the base checkpoint
    lacks (a new classification head) are initialised as transformers does and listed in `model.ot_loading_info`.

    A checkpoint that already is an OT model keeps its OT settings (M, T, lambda, solver, mode, ...): only the
    parameters given change them, and a warning names what was kept and what changed (`model.ot_conversion_info`).
    Unset parameters of a base checkpoint take the config's defaults (ot_num_steps=1, ot_terminal_time=1.0,
    ot_lambda=0.1, ot_solver='euler', ot_mode='residual', ot_block_layer_norms=True). The earlier keywords num_steps=,
    reg_lambda=, solver=, ... still work, with a FutureWarning naming the ot_* parameter.

    For fine-tuning a pretrained checkpoint keep ot_mode='residual' and ot_lambda <= 0.1 (a lambda near 1 costs
    accuracy at a fine-tuning budget): ot_num_steps=2 keeps plain fine-tuning's accuracy at 2 field evaluations; 4
    gives a model that keeps it at every solver and M' of 2 evaluations or more (the `sst2_minilm_elastic` recipe;
    `hf-ot calibrate` picks the cheapest; docs/results/pretrained-elastic.md).
    """
    given: dict[str, Any] = dict(ot_num_steps=ot_num_steps, ot_terminal_time=ot_terminal_time, ot_lambda=ot_lambda)
    given |= dict(ot_solver=ot_solver, ot_mode=ot_mode, ot_block_layer_norms=ot_block_layer_norms)
    given |= dict(ot_decoder_num_steps=ot_decoder_num_steps, ot_decoder_terminal_time=ot_decoder_terminal_time)
    given |= dict(ot_state_dtype=ot_state_dtype, ot_reg_in_loss=ot_reg_in_loss, ot_output_reg=ot_output_reg)
    given |= dict(ot_checkpoint_steps=ot_checkpoint_steps, ot_rtol=ot_rtol, ot_atol=ot_atol)
    for old in (k for k in _OLD_PARAMETERS if k in from_pretrained_kwargs):
        new = OLD_NAMES[old]
        given[new] = renamed("hf_ot.convert", old, new, from_pretrained_kwargs.pop(old), given[new])
    given = {field: value for field, value in given.items() if value is not None}
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
    if all(
        hasattr(base_config, field) for field in OT_FIELDS
    ):  # keep the OT model's settings; those given replace them
        current = {field: getattr(base_config, field) for field in OT_FIELDS}
        changed = {f: (current[f], v) for f, v in given.items() if current[f] != v}
        kept = {f: v for f, v in current.items() if f not in given and v is not None}
        conversion_info = {"already_ot": True, "kept": kept, "changed": changed}
        logger.warning(
            "%s is already an OT model (%s): its OT settings are kept (%s)%s.",
            base if isinstance(base, str) else type(base).__name__,
            base_config.model_type,
            ", ".join(f"{k}={v!r}" for k, v in kept.items()) or "none",
            "; changed: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items()) if changed else "",
        )
    else:
        conversion_info = {"already_ot": False}
    _check_misspelt(from_pretrained_kwargs, base_config)
    if isinstance(base, PreTrainedModel):
        loading_only = [
            k
            for k in from_pretrained_kwargs
            if not hasattr(base_config, k) and k not in ("dtype", "torch_dtype", "attn_implementation")
        ]
        if loading_only:
            raise ValueError(
                f"hf_ot.convert got {loading_only} with a model that is already loaded: these are from_pretrained "
                "arguments. Pass them when loading the base model, or pass its hub id or folder to convert."
            )
    family = family_of(base_config.model_type)
    config_overrides = {
        k: from_pretrained_kwargs.pop(k)
        for k in list(from_pretrained_kwargs)
        if k not in _CONFIG_KWARGS
        and k not in ("dtype", "torch_dtype", "attn_implementation")
        and hasattr(base_config, k)
    }
    ot_config = family.config_class.from_base_config(base_config, **given)  # the config checks the settings
    if hasattr(ot_config, "hf_ot_calibration"):  # calibrate --write's record describes the earlier model, not this one
        del ot_config.hf_ot_calibration
    for key, value in config_overrides.items():  # e.g. num_labels=2
        setattr(ot_config, key, value)
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
            known = [*SETTING_OF_FIELD, *_LOAD_KWARGS, "num_labels", *base_config.to_dict()]
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


__all__ = ["convert", "TASK_AUTO_CLASSES"]
