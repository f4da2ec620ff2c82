"""hf_ot: continuous-depth, optimal-transport-regularised Transformers for Hugging Face transformers."""

from .adapters import install_save_pretrained_hook as _install_save_pretrained_hook
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
__all__ = [
    *_model_names,
    "FAMILIES",
    "MODES",
    "SOLVERS",
    "HfOtError",
    "UsageError",
    "calibrate",  # noqa: F405 (lazy)
    "check",
    "compile",
    "convert",
    "environment",
    "load_adapter",  # noqa: F405 (lazy)
    "load_tokenizer",  # noqa: F405 (lazy)
    "push_to_hub",  # noqa: F405 (lazy)
    "register_peft_defaults",
    "restore_trained_setting",  # noqa: F405 (lazy)
    "save_adapter",  # noqa: F405 (lazy)
    "save_model",  # noqa: F405 (lazy)
]

__version__ = "0.1.0"

register_auto_classes()
register_peft_defaults()
_install_save_pretrained_hook()  # hf_ot's own OT classes: model.save_pretrained(DIR) records DIR as the model's home


_LAZY = {  # imported when first used: the training API needs accelerate, the Hub API huggingface_hub's Hub client
    "OTTrainer": "training",
    "OTSeq2SeqTrainer": "training",
    "OTTrainingArguments": "training",
    "OTSeq2SeqTrainingArguments": "training",
    "save_model": "hub",
    "save_adapter": "adapters",
    "load_adapter": "adapters",
    "push_to_hub": "hub",
    "load_tokenizer": "tokenizers",
    "calibrate": "calibration",
    "restore_trained_setting": "calibration",
}


def __getattr__(name: str) -> object:
    import importlib
    import importlib.util

    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    # the submodules (hf_ot.scale_out, hf_ot.metrics, hf_ot.recipes, ...) as attributes after `import hf_ot`, imported
    # when first used: `import hf_ot` stays light, and hf_ot itself imports none of them at import time
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'hf_ot' has no attribute {name!r}")
