"""OT-Transformer variants of RoBERTa (encoder-only).

Travels with checkpoints: imports its siblings and transformers.
"""

from huggingface_hub.dataclasses import strict
from transformers import (
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    RobertaModel,
)

from .ot_bert import BertAdapter
from .ot_config import OTConfigMixin
from .ot_model import OTModelMixin, register_family


class RobertaAdapter(BertAdapter):
    """RobertaEncoder runs BERT's loop (`for i, layer_module in enumerate(self.layer)`); post-LN, no final norm."""

    stack_classes = (RobertaModel,)


@strict(accept_kwargs=True)
class OTRobertaConfig(OTConfigMixin, RobertaConfig):
    model_type = "ot_roberta"

    def validate_ot_settings(self) -> None:
        super().validate_ot_settings()
        if self.is_decoder or self.add_cross_attention:
            raise ValueError("OT RoBERTa is encoder-only: is_decoder and add_cross_attention must be False.")


class OTRobertaModel(OTModelMixin, RobertaModel):
    ot_adapter = RobertaAdapter()


class OTRobertaForMaskedLM(OTModelMixin, RobertaForMaskedLM):
    ot_adapter = RobertaAdapter()


class OTRobertaForSequenceClassification(OTModelMixin, RobertaForSequenceClassification):
    ot_adapter = RobertaAdapter()


class OTRobertaForTokenClassification(OTModelMixin, RobertaForTokenClassification):
    ot_adapter = RobertaAdapter()


register_family(
    OTRobertaConfig,
    [OTRobertaModel, OTRobertaForMaskedLM, OTRobertaForSequenceClassification, OTRobertaForTokenClassification],
)
