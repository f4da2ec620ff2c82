"""Default PEFT target modules for the OT model types.

PEFT picks default targets by config.model_type and does not know ours; parameter names are the base family's, so
each OT type takes its base family's defaults, for every PEFT method that has a per-model-type mapping. Where PEFT has
no LoRA default for the base type either, hf_ot supplies one (the attention query/value projections, as PEFT's own
defaults do for the other families).
"""

from __future__ import annotations

from .registry import FAMILIES

# LoRA targets for base types PEFT has no default for (checked against peft 0.17-0.21), from the family rows
LORA_TARGETS_PEFT_LACKS = {name: list(f.lora_targets) for name, f in FAMILIES.items() if f.lora_targets}


def lora_target_modules(model_type: str) -> list[str] | None:
    """The LoRA target modules hf_ot uses for a base or OT model type (None if unknown)."""
    from .registry import family_of

    try:
        base = family_of(model_type).base_model_type
    except ValueError:
        base = model_type
    try:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as lora
    except ImportError:
        lora = {}
    targets = lora.get(base) or LORA_TARGETS_PEFT_LACKS.get(base)
    return list(targets) if targets else None


def register_peft_defaults() -> bool:
    """Copy the base family's entries in PEFT's model-type mappings (its registration tables of defaults by
    model_type) to the OT types; nothing else in PEFT is touched. False if PEFT is missing."""
    try:
        from peft.utils import constants
    except ImportError:
        return False
    for name in dir(constants):
        mapping = getattr(constants, name)
        if not (name.startswith("TRANSFORMERS_MODELS_TO_") and isinstance(mapping, dict)):
            continue
        for family in FAMILIES.values():
            base, ot = family.base_model_type, family.config_class.model_type
            if base in mapping and ot not in mapping:
                mapping[ot] = mapping[base]
            elif name == "TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING" and base in LORA_TARGETS_PEFT_LACKS:
                mapping.setdefault(ot, LORA_TARGETS_PEFT_LACKS[base])
    return True
