"""OT-Transformer variants of BART (encoder-decoder). Travels with checkpoints: imports only `.ot_core` and transformers."""

from huggingface_hub.dataclasses import strict
from transformers import BartConfig, BartForConditionalGeneration, BartForSequenceClassification, BartModel
from transformers.models.bart.modeling_bart import BartDecoder, BartEncoder

from .ot_core import OTConfigMixin, OTModelMixin, StackAdapter


@strict(accept_kwargs=True)
class OTBartConfig(OTConfigMixin, BartConfig):
    model_type = "ot_bart"
    _ot_decoder_layer_attrs = ("decoder_layers", "encoder_layers")
    _ot_auto_classes = {
        "AutoModel": "OTBartModel",
        "AutoModelForSeq2SeqLM": "OTBartForConditionalGeneration",
        "AutoModelForSequenceClassification": "OTBartForSequenceClassification",
    }


class BartAdapter(StackAdapter):
    """BartEncoder / BartDecoder: `for layer in self.layers: (LayerDrop) h = layer(h, mask, enc_h, ...)`.

    BART is post-LN with no norm after the stack. LayerDrop moves into the flow (per block application)."""

    stack_classes = (BartEncoder, BartDecoder)
    layers = "layers"

    def role(self, stack):
        return "decoder" if isinstance(stack, BartDecoder) else "encoder"

    def self_attention(self, block):
        return block.self_attn


class OTBartModel(OTModelMixin, BartModel):
    config_class = OTBartConfig
    ot_adapter = BartAdapter()


class OTBartForConditionalGeneration(OTModelMixin, BartForConditionalGeneration):
    config_class = OTBartConfig
    ot_adapter = BartAdapter()


class OTBartForSequenceClassification(OTModelMixin, BartForSequenceClassification):
    config_class = OTBartConfig
    ot_adapter = BartAdapter()


# save_pretrained copies this file (and ot_core.py) next to the weights and writes auto_map: see OTConfigMixin.
OTBartConfig.register_for_auto_class()
OTBartModel.register_for_auto_class("AutoModel")
OTBartForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
OTBartForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
