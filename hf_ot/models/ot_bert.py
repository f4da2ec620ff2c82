"""OT-Transformer variants of BERT (encoder-only). Travels with checkpoints: imports only `.ot_core` and transformers."""

from huggingface_hub.dataclasses import strict
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)

from .ot_core import OTConfigMixin, OTModelMixin, StackAdapter


@strict(accept_kwargs=True)
class OTBertConfig(OTConfigMixin, BertConfig):
    model_type = "ot_bert"
    _ot_decoder_layer_attrs = ("num_hidden_layers",)
    _ot_auto_classes = {
        "AutoModel": "OTBertModel",
        "AutoModelForMaskedLM": "OTBertForMaskedLM",
        "AutoModelForSequenceClassification": "OTBertForSequenceClassification",
        "AutoModelForTokenClassification": "OTBertForTokenClassification",
    }

    def validate_ot_settings(self):
        super().validate_ot_settings()
        if self.is_decoder or self.add_cross_attention:
            raise ValueError("OT BERT is encoder-only: is_decoder and add_cross_attention must be False.")


class BertAdapter(StackAdapter):
    """BertModel builds the masks; BertEncoder loops `for layer in self.layer: h = layer(h, mask, ...)`.

    BERT is post-LN: every block ends in a LayerNorm and there is no norm after the stack.
    """

    stack_classes = (BertModel,)
    layers = "encoder.layer"

    def role(self, stack):
        return "encoder"

    def self_attention(self, block):
        return block.attention.self


class OTBertModel(OTModelMixin, BertModel):
    config_class = OTBertConfig
    ot_adapter = BertAdapter()


class OTBertForMaskedLM(OTModelMixin, BertForMaskedLM):
    config_class = OTBertConfig
    ot_adapter = BertAdapter()


class OTBertForSequenceClassification(OTModelMixin, BertForSequenceClassification):
    config_class = OTBertConfig
    ot_adapter = BertAdapter()


class OTBertForTokenClassification(OTModelMixin, BertForTokenClassification):
    config_class = OTBertConfig
    ot_adapter = BertAdapter()


# save_pretrained copies this file (and ot_core.py) next to the weights and writes auto_map: see OTConfigMixin.
OTBertConfig.register_for_auto_class()
OTBertModel.register_for_auto_class("AutoModel")
OTBertForMaskedLM.register_for_auto_class("AutoModelForMaskedLM")
OTBertForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
OTBertForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")
