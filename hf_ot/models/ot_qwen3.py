"""OT-Transformer variants of Qwen3 (decoder-only). Travels with checkpoints: imports its siblings and transformers."""

from huggingface_hub.dataclasses import strict
from transformers import GenerationMixin, Qwen3Config, Qwen3ForCausalLM, Qwen3ForSequenceClassification, Qwen3Model

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class Qwen3Adapter(StackAdapter):
    """Qwen3Model: `for i, layer in enumerate(self.layers[: config.num_hidden_layers]): h = layer(h,
    attention_mask=causal_mask_mapping[config.layer_types[i]], ...)` (full and sliding-window layers; q/k norms inside
    the attention), then `self.norm` (RMSNorm). Nothing between layers."""

    stack_classes = (Qwen3Model,)
    layers = "layers"
    final_norm = "norm"


@strict(accept_kwargs=True)
class OTQwen3Config(OTConfigMixin, Qwen3Config):
    model_type = "ot_qwen3"


class OTQwen3Model(OTModelMixin, Qwen3Model):
    ot_adapter = Qwen3Adapter()


class OTQwen3ForCausalLM(OTModelMixin, Qwen3ForCausalLM, GenerationMixin):
    ot_adapter = Qwen3Adapter()


class OTQwen3ForSequenceClassification(OTModelMixin, Qwen3ForSequenceClassification):
    ot_adapter = Qwen3Adapter()


register_family(OTQwen3Config, [OTQwen3Model, OTQwen3ForCausalLM, OTQwen3ForSequenceClassification])
