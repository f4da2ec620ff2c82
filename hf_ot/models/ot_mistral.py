"""OT-Transformer variants of Mistral (decoder-only). Travels with checkpoints: imports its siblings and
transformers."""

from huggingface_hub.dataclasses import strict
from transformers import (
    GenerationMixin,
    MistralConfig,
    MistralForCausalLM,
    MistralForSequenceClassification,
    MistralModel,
)

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class MistralAdapter(StackAdapter):
    """MistralModel: `for layer in self.layers[: config.num_hidden_layers]: h = layer(h, attention_mask=mask, ...)`,
    one mask for every layer (a sliding-window mask when `config.sliding_window` is set: every layer is then a sliding
    layer, and the unrolled cache config infers a sliding cache for every slot from `sliding_window`), then
    `self.norm` (RMSNorm)."""

    stack_classes = (MistralModel,)
    layers = "layers"
    final_norm = "norm"


@strict(accept_kwargs=True)
class OTMistralConfig(OTConfigMixin, MistralConfig):
    model_type = "ot_mistral"


class OTMistralModel(OTModelMixin, MistralModel):
    ot_adapter = MistralAdapter()


class OTMistralForCausalLM(OTModelMixin, MistralForCausalLM, GenerationMixin):
    ot_adapter = MistralAdapter()


class OTMistralForSequenceClassification(OTModelMixin, MistralForSequenceClassification):
    ot_adapter = MistralAdapter()


register_family(OTMistralConfig, [OTMistralModel, OTMistralForCausalLM, OTMistralForSequenceClassification])
