"""The model code that travels with OT checkpoints: one flat folder (transformers copies it flat next to the weights).

ot_solver.py (the integrator), ot_flow.py (how a stack's loop becomes the flow), ot_config.py (OT settings),
ot_model.py (the model mixin and the family table), and one file per family.

FAMILY_MODULES is the one table of families: a new family is one file here plus one entry below.
"""

import importlib

from .ot_config import MODES, OT_FIELDS, OTConfigMixin, OTDeprecationWarning
from .ot_flow import DepthFlow, StackAdapter
from .ot_model import FAMILIES, TASKS, OTModelMixin, RegNotTrainedWarning, ot_objective, reg_share, register_family
from .ot_solver import SOLVERS, integrate, num_stages

FAMILY_MODULES = (
    "ot_gpt2",
    "ot_bert",
    "ot_t5",
    "ot_bart",
    "ot_roberta",
    "ot_xlm_roberta",
    "ot_electra",
    "ot_distilbert",
    "ot_modernbert",
    "ot_mt5",
    "ot_mbart",
    "ot_marian",
    "ot_llama",
    "ot_mistral",
    "ot_qwen2",
    "ot_qwen3",
    "ot_gemma2",
    "ot_phi3",
    "ot_gpt_neox",
    "ot_opt",
)

__all__ = [
    "DepthFlow",
    "FAMILIES",
    "MODES",
    "OT_FIELDS",
    "OTConfigMixin",
    "OTDeprecationWarning",
    "OTModelMixin",
    "RegNotTrainedWarning",
    "SOLVERS",
    "StackAdapter",
    "TASKS",
    "integrate",
    "num_stages",
    "ot_objective",
    "reg_share",
    "register_family",
]

for _name in FAMILY_MODULES:  # each family file calls register_family; its classes are exported from here
    _module = importlib.import_module(f".{_name}", __name__)
    for _attr in dir(_module):
        if _attr.startswith("OT") and isinstance(getattr(_module, _attr), type):
            globals()[_attr] = getattr(_module, _attr)
            __all__.append(_attr)
