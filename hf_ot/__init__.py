"""hf_ot: continuous-depth, optimal-transport-regularised Transformers for Hugging Face transformers."""

from .compilation import compile  # noqa: A004 (hf_ot.compile(model): regional compilation)
from .conversion_check import check
from .convert import convert
from .env import environment
from .errors import HfOtError, UsageError
from .models import *  # noqa: F401,F403
from .models import MODES, SOLVERS
from .models import __all__ as _model_names
from .peft_defaults import register_peft_defaults
from .registry import FAMILIES, register_auto_classes

# the model classes and settings (hf_ot.models) and the library API around them
__all__ = [*_model_names, "FAMILIES", "MODES", "SOLVERS", "HfOtError", "UsageError", "check", "compile", "convert",
           "environment", "load_tokenizer", "push_to_hub", "register_peft_defaults", "save_model"]  # noqa: F405 (lazy)

__version__ = "0.1.0"

register_auto_classes()
register_peft_defaults()


_LAZY = {  # imported when first used: the training API needs accelerate, the Hub API huggingface_hub's Hub client
    "OTTrainer": "training", "OTSeq2SeqTrainer": "training", "OTTrainingArguments": "training",
    "OTSeq2SeqTrainingArguments": "training", "save_model": "hub", "push_to_hub": "hub", "load_tokenizer": "tokenizers",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'hf_ot' has no attribute {name!r}")
