"""OT-Transformer variants of BART (encoder-decoder).

Travels with checkpoints: imports its siblings and transformers.
"""

from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    BartForSequenceClassification,
    BartModel,
    GenerationMixin,
)
from transformers.models.bart.modeling_bart import BartDecoder, BartEncoder

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class BartAdapter(StackAdapter):
    """BartEncoder / BartDecoder: `for layer in self.layers: (LayerDrop) h = layer(h, mask, enc_h, ...)`.

    BART is post-LN with no norm after the stack. LayerDrop moves into the flow (per block application)."""

    stack_classes = (BartEncoder, BartDecoder)
    layers = "layers"

    def role(self, stack: nn.Module) -> str:
        return "decoder" if isinstance(stack, BartDecoder) else "encoder"


@strict(accept_kwargs=True)
class OTBartConfig(OTConfigMixin, BartConfig):
    model_type = "ot_bart"
    _ot_decoder_layer_names = ("decoder_layers", "encoder_layers")


class OTBartModel(OTModelMixin, BartModel):
    ot_adapter = BartAdapter()


class OTBartForConditionalGeneration(OTModelMixin, BartForConditionalGeneration, GenerationMixin):
    ot_adapter = BartAdapter()


class OTBartForSequenceClassification(OTModelMixin, BartForSequenceClassification):
    ot_adapter = BartAdapter()


register_family(OTBartConfig, [OTBartModel, OTBartForConditionalGeneration, OTBartForSequenceClassification])
