"""OT-Transformer variants of BERT (encoder-only). Travels with checkpoints: imports its siblings and transformers."""

from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class BertAdapter(StackAdapter):
    """BertModel builds the masks; BertEncoder loops `for layer in self.layer: h = layer(h, mask, ...)`.

    BERT is post-LN: every block ends in a LayerNorm and there is no norm after the stack."""

    stack_classes: tuple[type, ...] = (BertModel,)
    layers = "encoder.layer"

    def role(self, stack: nn.Module) -> str:
        return "encoder"


@strict(accept_kwargs=True)
class OTBertConfig(OTConfigMixin, BertConfig):
    model_type = "ot_bert"

    def validate_ot_settings(self) -> None:
        super().validate_ot_settings()
        if self.is_decoder or self.add_cross_attention:
            raise ValueError("OT BERT is encoder-only: is_decoder and add_cross_attention must be False.")


class OTBertModel(OTModelMixin, BertModel):
    ot_adapter = BertAdapter()


class OTBertForMaskedLM(OTModelMixin, BertForMaskedLM):
    ot_adapter = BertAdapter()


class OTBertForSequenceClassification(OTModelMixin, BertForSequenceClassification):
    ot_adapter = BertAdapter()


class OTBertForTokenClassification(OTModelMixin, BertForTokenClassification):
    ot_adapter = BertAdapter()


register_family(
    OTBertConfig,
    [OTBertModel, OTBertForMaskedLM, OTBertForSequenceClassification, OTBertForTokenClassification],
)
