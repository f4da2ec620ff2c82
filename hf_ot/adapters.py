"""PEFT adapters of OT models name a base that reloads as that OT model.

PEFT writes `base_model_name_or_path` into `adapter_config.json` from the base model's `name_or_path`, and
`AutoPeftModelFor*.from_pretrained(adapter_dir)` loads that base. A model made by `hf_ot.convert` still carries the
name of the checkpoint it was converted from (a plain GPT-2, say): its adapter would silently reload on the plain base
converted at M = 1, Euler. So hf_ot hooks `PeftModel.save_pretrained` (installed when hf_ot is imported) and, for an
OT base model only:

- `base_model_name_or_path` names the saved OT model: the folder `hf_ot.save_model` last wrote it to, or the folder /
  Hub repo it was loaded from (a relative local folder is made absolute, so the adapter loads from any folder);
- a converted model that was never saved has no such name: the adapter is saved, with a warning, and its
  `base_model_name_or_path` is a text that makes loading it fail with the fix (save the OT model with
  `hf_ot.save_model`, then point the adapter at it: `hf_ot.adapters.set_adapter_base`);
- `task_type` is filled in from the head (CAUSAL_LM, SEQ_2_SEQ_LM) when it was left unset, so
  `AutoPeftModelFor*` loads the base through transformers' Auto classes (with `trust_remote_code=True` where hf_ot is
  not installed) instead of importing the OT class's module, which PEFT's import allowlist refuses;
- an adapter left without a task type (a classifier's: see _HEAD_TASK_TYPES) gets `auto_mapping` naming the
  transformers Auto class of its head (`AutoModelForSequenceClassification`, parent library `transformers`) instead of
  the OT class and its hf_ot module: `AutoPeftModel.from_pretrained(adapter_dir)` then loads it, with and without
  hf_ot.

The OT model classes' own `save_pretrained` (transformers' `model.save_pretrained(DIR)`, not only `hf_ot.save_model`)
records the folder too (`install_save_pretrained_hook`, installed when hf_ot is imported), so an adapter trained
after either names that folder.
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from pathlib import Path
from typing import Any

from .ownership import write_text_atomic

# the base_model_name_or_path of an adapter whose OT base was never saved: loading it fails with this text
UNSAVED_BASE = (
    "UNSAVED-hf_ot-OT-model: this adapter was trained on an OT model that was never saved, so its base cannot be "
    "loaded. Save the OT model as converted, before adding adapters (hf_ot.save_model(model, DIR)), then run "
    "hf_ot.adapters.set_adapter_base(ADAPTER_DIR, DIR) and load again"
)
_HEAD_TASK_TYPES = (  # class-name endings of the heads -> PEFT task types
    (("ForCausalLM", "LMHeadModel"), "CAUSAL_LM"),
    (("ForConditionalGeneration", "MTModel"), "SEQ_2_SEQ_LM"),
    # not SEQ_CLS / TOKEN_CLS: PEFT builds those with the head in modules_to_save, so a task type added only at save
    # time would make the adapter expect head weights it does not hold (set task_type when creating those adapters)
)


def is_ot_model(model: Any) -> bool:
    config = getattr(model, "config", None)
    return config is not None and hasattr(config, "ot_num_steps") and hasattr(config, "ot_solver")


def _is_ot_folder(path: str) -> bool:
    config = Path(os.path.expanduser(path), "config.json")
    if not config.is_file():
        return False
    try:
        model_type = json.loads(config.read_text()).get("model_type", "")
    except (OSError, ValueError):
        return False
    return isinstance(model_type, str) and model_type.startswith("ot_")


def mark_saved(model: Any, folder: str | os.PathLike[str]) -> None:
    """Record that `model` now lives in `folder` (hf_ot.save_model calls this): adapters name that folder."""
    model.hf_ot_saved_to = str(Path(folder).expanduser().resolve())


def ot_base_name(model: Any) -> str | None:
    """The name an adapter of the OT `model` should give as its base: where the OT model was saved or loaded from;
    None when it was converted in memory and never saved (or the folder it was saved to holds no OT model now)."""
    saved = getattr(model, "hf_ot_saved_to", None)
    if saved and _is_ot_folder(str(saved)):
        return str(saved)
    if getattr(model, "ot_loading_info", None) is not None:  # made by hf_ot.convert: its name is the plain base's
        return None
    name = model.__dict__.get("name_or_path") or getattr(model.config, "_name_or_path", "")
    if not name:
        return None
    if os.path.isdir(os.path.expanduser(str(name))):
        return str(Path(os.path.expanduser(str(name))).resolve()) if _is_ot_folder(str(name)) else None
    return str(name)  # a Hub repo it was loaded from (an OT config, since the model loaded as an OT model)


def task_type_of(model: Any) -> str | None:
    name = type(model).__name__
    for endings, task_type in _HEAD_TASK_TYPES:
        if name.endswith(endings):
            return task_type
    return None


def auto_class_name_of(model: Any) -> str | None:
    """The transformers Auto class that serves the OT `model`'s head ('AutoModelForSequenceClassification', ...)."""
    from .models import TASKS
    from .registry import family_of

    try:
        family = family_of(model.config.model_type)
    except ValueError:
        return None
    for task, cls in family.tasks.items():
        if type(model) is cls:
            return TASKS[task][0]
    return None


def set_adapter_base(adapter_dir: str | os.PathLike[str], base: str) -> None:
    """Point a saved adapter at its OT base model (a saved hf_ot folder or a Hub repo): rewrites
    `base_model_name_or_path` in adapter_config.json (and every named adapter's below it)."""
    root = Path(adapter_dir)
    configs = [root / "adapter_config.json", *root.glob("*/adapter_config.json")]
    found = [c for c in configs if c.is_file()]
    if not found:
        raise FileNotFoundError(f"No adapter_config.json in {root}: is it the folder PEFT's save_pretrained wrote?")
    if os.path.isdir(os.path.expanduser(base)):
        if not _is_ot_folder(base):
            raise ValueError(f"{base} holds no hf_ot OT model (config.json with an ot_* model_type).")
        base = str(Path(os.path.expanduser(base)).resolve())
    for path in found:
        data = json.loads(path.read_text())
        data["base_model_name_or_path"] = base
        write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _hooked_save_pretrained(original):
    @functools.wraps(original)
    def save_pretrained(self, save_directory, *args, **kwargs):
        try:
            base = self.get_base_model()
        except Exception:  # noqa: BLE001 (a PEFT model of another shape: PEFT's own behaviour)
            return original(self, save_directory, *args, **kwargs)
        if not is_ot_model(base):
            return original(self, save_directory, *args, **kwargs)
        name = ot_base_name(base)
        if name is None:
            warnings.warn(
                "This adapter's base is an OT model converted in memory and never saved: the adapter is saved, but "
                "it cannot be reloaded on its own (its base would be the plain checkpoint, without the OT settings). "
                "Save the OT model as converted, before get_peft_model (hf_ot.save_model(model, DIR)), then save the "
                "adapter again or run hf_ot.adapters.set_adapter_base(ADAPTER_DIR, DIR).",
                stacklevel=2,
            )
            name = UNSAVED_BASE
        task_type = task_type_of(base)
        auto_class = auto_class_name_of(base)
        saved = {}
        for adapter, config in self.peft_config.items():
            saved[adapter] = (config.base_model_name_or_path, config.task_type)
            config.base_model_name_or_path = name
            if config.task_type is None and task_type is not None and not config.is_prompt_learning:
                config.task_type = task_type
            if config.task_type is None and auto_class is not None:
                # PEFT would write auto_mapping = the OT class in its hf_ot module (refused by its import
                # allowlist, and absent where hf_ot is not installed): name the transformers Auto class instead
                config.save_pretrained = _with_auto_mapping(config, auto_class)
        try:
            return original(self, save_directory, *args, **kwargs)
        finally:
            for adapter, (old_name, old_task) in saved.items():
                config = self.peft_config[adapter]
                config.base_model_name_or_path = old_name
                config.task_type = old_task
                config.__dict__.pop("save_pretrained", None)

    save_pretrained.hf_ot_hook = True  # type: ignore[attr-defined]
    return save_pretrained


def _with_auto_mapping(config: Any, auto_class: str):
    """`config.save_pretrained` that writes auto_mapping = transformers' `auto_class` where PEFT writes one."""
    save = type(config).save_pretrained

    def save_pretrained(save_directory, **kwargs):
        if kwargs.get("auto_mapping_dict") is not None:
            kwargs["auto_mapping_dict"] = {"base_model_class": auto_class, "parent_library": "transformers"}
        return save(config, save_directory, **kwargs)

    return save_pretrained


def _marking_save_pretrained(original):
    """The OT classes' save_pretrained: transformers' (or the class's own), then `mark_saved(model, folder)`."""

    @functools.wraps(original)
    def save_pretrained(self, save_directory, *args, **kwargs):
        result = original(self, save_directory, *args, **kwargs)
        if _is_ot_folder(str(save_directory)):  # written (the main process's folder, or one a rank shares)
            mark_saved(self, save_directory)
        return result

    save_pretrained.hf_ot_hook = True  # type: ignore[attr-defined]
    return save_pretrained


def install_save_pretrained_hook() -> None:
    """Wrap the OT model classes' save_pretrained once (on their mixin, first in their MRO), so a model saved with
    transformers' `model.save_pretrained(DIR)` is recorded as living in DIR, as `hf_ot.save_model` records it."""
    from .models.ot_model import OTModelMixin

    current = getattr(OTModelMixin, "save_pretrained", None)
    if getattr(current, "hf_ot_hook", False):
        return
    own = OTModelMixin.__dict__.get("save_pretrained")

    def inherited(self, save_directory, *args, **kwargs):  # the next class's in the model's MRO (PreTrainedModel's)
        return super(OTModelMixin, self).save_pretrained(save_directory, *args, **kwargs)

    OTModelMixin.save_pretrained = _marking_save_pretrained(own or inherited)  # type: ignore[method-assign]


def install_peft_save_hook() -> bool:
    """Wrap PeftModel.save_pretrained once (see the module docstring). False if PEFT is missing."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    if not getattr(PeftModel.save_pretrained, "hf_ot_hook", False):
        PeftModel.save_pretrained = _hooked_save_pretrained(PeftModel.save_pretrained)  # type: ignore[method-assign]
    return True
