"""hf_ot: continuous-depth, optimal-transport-regularised Transformers for Hugging Face transformers."""

from .convert import convert
from .models import *  # noqa: F401,F403
from .models import MODES, SOLVERS
from .registry import FAMILIES, register_auto_classes

__version__ = "0.1.0"

register_auto_classes()
