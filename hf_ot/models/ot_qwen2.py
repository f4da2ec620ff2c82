"""OT-Transformer variants of Qwen2 (decoder-only). Travels with checkpoints: imports its siblings and transformers."""

from huggingface_hub.dataclasses import strict
from transformers import GenerationMixin, Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification, Qwen2Model

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class Qwen2Adapter(StackAdapter):
    """Qwen2Model: `for i, layer in enumerate(self.layers[: config.num_hidden_layers]): h = layer(h,
    attention_mask=causal_mask_mapping[config.layer_types[i]], ...)` (full and sliding-window layers, from
    use_sliding_window / max_window_layers), then `self.norm` (RMSNorm). Nothing between layers."""

    stack_classes = (Qwen2Model,)
    layers = "layers"
    final_norm = "norm"


@strict(accept_kwargs=True)
class OTQwen2Config(OTConfigMixin, Qwen2Config):
    model_type = "ot_qwen2"


class OTQwen2Model(OTModelMixin, Qwen2Model):
    ot_adapter = Qwen2Adapter()


class OTQwen2ForCausalLM(OTModelMixin, Qwen2ForCausalLM, GenerationMixin):
    ot_adapter = Qwen2Adapter()


class OTQwen2ForSequenceClassification(OTModelMixin, Qwen2ForSequenceClassification):
    ot_adapter = Qwen2Adapter()


register_family(OTQwen2Config, [OTQwen2Model, OTQwen2ForCausalLM, OTQwen2ForSequenceClassification])
