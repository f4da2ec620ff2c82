"""The model code that travels with OT checkpoints (a flat folder: see ot_core.py)."""

from .ot_bart import (
    OTBartConfig,
    OTBartForConditionalGeneration,
    OTBartForSequenceClassification,
    OTBartModel,
)
from .ot_bert import (
    OTBertConfig,
    OTBertForMaskedLM,
    OTBertForSequenceClassification,
    OTBertForTokenClassification,
    OTBertModel,
)
from .ot_core import MODES, SOLVERS, DepthFlow, OTConfigMixin, OTModelMixin, StackAdapter
from .ot_gpt2 import OTGPT2Config, OTGPT2ForSequenceClassification, OTGPT2LMHeadModel, OTGPT2Model
from .ot_t5 import OTT5Config, OTT5EncoderModel, OTT5ForConditionalGeneration, OTT5Model
