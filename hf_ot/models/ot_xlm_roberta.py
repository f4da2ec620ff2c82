"""OT-Transformer variants of XLM-RoBERTa (encoder-only).

Travels with checkpoints: imports its siblings and transformers."""

from huggingface_hub.dataclasses import strict
from transformers import (
    XLMRobertaConfig,
    XLMRobertaForMaskedLM,
    XLMRobertaForSequenceClassification,
    XLMRobertaForTokenClassification,
    XLMRobertaModel,
)

from .ot_bert import BertAdapter
from .ot_config import OTConfigMixin
from .ot_model import OTModelMixin, register_family


class XLMRobertaAdapter(BertAdapter):
    """XLMRobertaEncoder runs BERT's loop (`for i, layer_module in enumerate(self.layer)`); post-LN, no final norm."""

    stack_classes = (XLMRobertaModel,)


@strict(accept_kwargs=True)
class OTXLMRobertaConfig(OTConfigMixin, XLMRobertaConfig):
    model_type = "ot_xlm-roberta"

    def validate_ot_settings(self) -> None:
        super().validate_ot_settings()
        if self.is_decoder or self.add_cross_attention:
            raise ValueError("OT XLM-RoBERTa is encoder-only: is_decoder and add_cross_attention must be False.")


class OTXLMRobertaModel(OTModelMixin, XLMRobertaModel):
    ot_adapter = XLMRobertaAdapter()


class OTXLMRobertaForMaskedLM(OTModelMixin, XLMRobertaForMaskedLM):
    ot_adapter = XLMRobertaAdapter()


class OTXLMRobertaForSequenceClassification(OTModelMixin, XLMRobertaForSequenceClassification):
    ot_adapter = XLMRobertaAdapter()


class OTXLMRobertaForTokenClassification(OTModelMixin, XLMRobertaForTokenClassification):
    ot_adapter = XLMRobertaAdapter()


register_family(
    OTXLMRobertaConfig,
    [
        OTXLMRobertaModel,
        OTXLMRobertaForMaskedLM,
        OTXLMRobertaForSequenceClassification,
        OTXLMRobertaForTokenClassification,
    ],
)
