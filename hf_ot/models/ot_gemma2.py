"""OT-Transformer variants of Gemma2 (decoder-only). Travels with checkpoints: imports its siblings and transformers."""

from huggingface_hub.dataclasses import strict
from transformers import Gemma2Config, Gemma2ForCausalLM, Gemma2ForSequenceClassification, Gemma2Model, GenerationMixin

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class Gemma2Adapter(StackAdapter):
    """Gemma2Model: `for i, layer in enumerate(self.layers[: config.num_hidden_layers]): h = layer(h,
    attention_mask=causal_mask_mapping[config.layer_types[i]], ...)` (sliding and full layers alternate), then
    `self.norm` (Gemma2RMSNorm, scaled by 1 + weight). The embedding scaling happens before the loop, the logit
    soft-capping after the stack: both stay outside the field."""

    stack_classes = (Gemma2Model,)
    layers = "layers"
    final_norm = "norm"


@strict(accept_kwargs=True)
class OTGemma2Config(OTConfigMixin, Gemma2Config):
    model_type = "ot_gemma2"


class OTGemma2Model(OTModelMixin, Gemma2Model):
    ot_adapter = Gemma2Adapter()


class OTGemma2ForCausalLM(OTModelMixin, Gemma2ForCausalLM, GenerationMixin):
    ot_adapter = Gemma2Adapter()


class OTGemma2ForSequenceClassification(OTModelMixin, Gemma2ForSequenceClassification):
    ot_adapter = Gemma2Adapter()


register_family(OTGemma2Config, [OTGemma2Model, OTGemma2ForCausalLM, OTGemma2ForSequenceClassification])
