"""OT-Transformer variants of DistilBERT (encoder-only).

Travels with checkpoints: imports its siblings and transformers.
"""

from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import (
    DistilBertConfig,
    DistilBertForMaskedLM,
    DistilBertForSequenceClassification,
    DistilBertForTokenClassification,
    DistilBertModel,
)

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class DistilBertAdapter(StackAdapter):
    """DistilBertModel builds the mask; its Transformer loops `for layer_module in self.layer: h = layer_module(h,
    mask)`. Post-LN blocks, no norm after the stack, no KV cache (encoder only)."""

    stack_classes = (DistilBertModel,)
    layers = "transformer.layer"

    def role(self, stack: nn.Module) -> str:
        return "encoder"


@strict(accept_kwargs=True)
class OTDistilBertConfig(OTConfigMixin, DistilBertConfig):
    model_type = "ot_distilbert"


class OTDistilBertModel(OTModelMixin, DistilBertModel):
    ot_adapter = DistilBertAdapter()


class OTDistilBertForMaskedLM(OTModelMixin, DistilBertForMaskedLM):
    ot_adapter = DistilBertAdapter()


class OTDistilBertForSequenceClassification(OTModelMixin, DistilBertForSequenceClassification):
    ot_adapter = DistilBertAdapter()


class OTDistilBertForTokenClassification(OTModelMixin, DistilBertForTokenClassification):
    ot_adapter = DistilBertAdapter()


register_family(
    OTDistilBertConfig,
    [
        OTDistilBertModel,
        OTDistilBertForMaskedLM,
        OTDistilBertForSequenceClassification,
        OTDistilBertForTokenClassification,
    ],
    lora_targets=("q_lin", "v_lin"),
)
