"""OT-Transformer variants of ELECTRA (encoder-only).

Travels with checkpoints: imports its siblings and transformers.
"""

from huggingface_hub.dataclasses import strict
from transformers import (
    ElectraConfig,
    ElectraForMaskedLM,
    ElectraForSequenceClassification,
    ElectraForTokenClassification,
    ElectraModel,
)

from .ot_bert import BertAdapter
from .ot_config import OTConfigMixin
from .ot_model import OTModelMixin, register_family


class ElectraAdapter(BertAdapter):
    """ElectraEncoder runs BERT's loop (`for i, layer_module in enumerate(self.layer)`); post-LN, no final norm."""

    stack_classes = (ElectraModel,)


@strict(accept_kwargs=True)
class OTElectraConfig(OTConfigMixin, ElectraConfig):
    model_type = "ot_electra"

    def validate_ot_settings(self) -> None:
        super().validate_ot_settings()
        if self.is_decoder or self.add_cross_attention:
            raise ValueError("OT ELECTRA is encoder-only: is_decoder and add_cross_attention must be False.")


class OTElectraModel(OTModelMixin, ElectraModel):
    ot_adapter = ElectraAdapter()


class OTElectraForMaskedLM(OTModelMixin, ElectraForMaskedLM):
    ot_adapter = ElectraAdapter()


class OTElectraForSequenceClassification(OTModelMixin, ElectraForSequenceClassification):
    ot_adapter = ElectraAdapter()


class OTElectraForTokenClassification(OTModelMixin, ElectraForTokenClassification):
    ot_adapter = ElectraAdapter()


register_family(
    OTElectraConfig,
    [OTElectraModel, OTElectraForMaskedLM, OTElectraForSequenceClassification, OTElectraForTokenClassification],
)
