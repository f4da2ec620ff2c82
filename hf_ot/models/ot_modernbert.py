"""OT-Transformer variants of ModernBERT (encoder-only).

Travels with checkpoints: imports its siblings and transformers.
"""

from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import (
    ModernBertConfig,
    ModernBertForMaskedLM,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
    ModernBertModel,
)

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class ModernBertAdapter(StackAdapter):
    """ModernBertModel: `for encoder_layer in self.layers: h = encoder_layer(h, attention_mask=masks[encoder_layer.
    attention_type], position_embeddings=rotary[encoder_layer.attention_type])`, then final_norm. The loop reads each
    layer's `attention_type` (read through to the block), so global and local (sliding-window) blocks keep their own
    mask and rotary embeddings in every field evaluation. Pre-LN; no KV cache (encoder only)."""

    stack_classes = (ModernBertModel,)
    layers = "layers"
    final_norm = "final_norm"

    def role(self, stack: nn.Module) -> str:
        return "encoder"


@strict(accept_kwargs=True)
class OTModernBertConfig(OTConfigMixin, ModernBertConfig):
    model_type = "ot_modernbert"


class OTModernBertModel(OTModelMixin, ModernBertModel):
    ot_adapter = ModernBertAdapter()


class OTModernBertForMaskedLM(OTModelMixin, ModernBertForMaskedLM):
    ot_adapter = ModernBertAdapter()


class OTModernBertForSequenceClassification(OTModelMixin, ModernBertForSequenceClassification):
    ot_adapter = ModernBertAdapter()


class OTModernBertForTokenClassification(OTModelMixin, ModernBertForTokenClassification):
    ot_adapter = ModernBertAdapter()


register_family(
    OTModernBertConfig,
    [
        OTModernBertModel,
        OTModernBertForMaskedLM,
        OTModernBertForSequenceClassification,
        OTModernBertForTokenClassification,
    ],
    lora_targets=("Wqkv",),
)
