"""hf_ot: continuous-depth, optimal-transport-regularised Transformers for Hugging Face transformers."""

from .compilation import compile  # noqa: A004 (hf_ot.compile(model): regional compilation)
from .convert import convert
from .models import *  # noqa: F401,F403
from .models import MODES, SOLVERS
from .peft_defaults import register_peft_defaults
from .registry import FAMILIES, register_auto_classes

__version__ = "0.1.0"

register_auto_classes()
register_peft_defaults()


def __getattr__(name):  # the training API needs accelerate; import it only when asked for
    if name in ("OTTrainer", "OTSeq2SeqTrainer", "OTTrainingArguments", "OTSeq2SeqTrainingArguments"):
        from . import training

        return getattr(training, name)
    raise AttributeError(f"module 'hf_ot' has no attribute {name!r}")
