"""The OT families (from the family table in hf_ot/models) and their registration with the transformers Auto classes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import transformers
from transformers import AutoConfig

from . import models
from .models import TASKS

# task name -> the Auto class that serves it
TASK_AUTO_CLASSES = {task: getattr(transformers, auto) for task, (auto, _) in TASKS.items()}


@dataclass(frozen=True)
class Family:
    base_model_type: str
    config_class: type[Any]  # an OTConfigMixin subclass of the family's transformers config
    tasks: dict[str, type[Any]]  # task -> OT model class
    # further OT classes by base class name (not served by an Auto class), e.g. T5EncoderModel
    extra: dict[str, type[Any]]


FAMILIES: dict[str, Family] = {
    base_type: Family(base_type, config_class, dict(tasks),
                      {models.ot_model.base_class_of(c).__name__: c for c in extra})
    for base_type, (config_class, tasks, extra) in models.FAMILIES.items()
}

# OT model_type -> family
BY_OT_TYPE = {family.config_class.model_type: family for family in FAMILIES.values()}


def family_of(model_type: str) -> Family:
    if model_type in FAMILIES:
        return FAMILIES[model_type]
    if model_type in BY_OT_TYPE:
        return BY_OT_TYPE[model_type]
    raise ValueError(
        f"Unsupported base family {model_type!r}: hf_ot converts {sorted(FAMILIES)} checkpoints "
        f"(OT types {sorted(BY_OT_TYPE)}). README lists the supported families and why others are not."
    )


def all_model_classes(family: Family) -> list[type]:
    return list(family.tasks.values()) + list(family.extra.values())


def register_auto_classes() -> None:
    """Register every OT config and model with the Auto classes (installed users need no trust_remote_code)."""
    for family in FAMILIES.values():
        try:
            AutoConfig.register(family.config_class.model_type, family.config_class)
        except ValueError:  # already registered (re-import)
            pass
        for task, cls in family.tasks.items():
            try:
                TASK_AUTO_CLASSES[task].register(family.config_class, cls)
            except ValueError:
                pass
