"""Default PEFT target modules for the OT model types.

PEFT picks default targets by config.model_type and does not know ours; parameter names are the base family's, so
each OT type takes its base family's defaults, for every PEFT method that has a per-model-type mapping.
"""

from __future__ import annotations

from .registry import FAMILIES


def register_peft_defaults() -> bool:
    """Copy the base family's entries in PEFT's model-type mappings to the OT types. False if PEFT is missing."""
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
    return True
