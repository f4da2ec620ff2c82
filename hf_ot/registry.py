"""The OT families (from the family table in hf_ot/models) and their registration with the transformers Auto classes."""

from __future__ import annotations

import transformers
from transformers import AutoConfig

from . import models
from .models import TASKS
from .models.ot_model import Family

# task name -> the Auto class that serves it
TASK_AUTO_CLASSES = {task: getattr(transformers, auto) for task, (auto, _) in TASKS.items()}


# base model_type -> its row of the family table (hf_ot/models: one file per family)
FAMILIES: dict[str, Family] = models.FAMILIES


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
    return family.model_classes


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
