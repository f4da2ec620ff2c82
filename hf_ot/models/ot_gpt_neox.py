"""OT-Transformer variants of GPT-NeoX / Pythia (decoder-only). Travels with checkpoints: imports its siblings and
transformers."""

from huggingface_hub.dataclasses import strict
from transformers import (
    GenerationMixin,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    GPTNeoXForSequenceClassification,
    GPTNeoXModel,
)

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class GPTNeoXAdapter(StackAdapter):
    """GPTNeoXModel: `for layer in self.layers: h = layer(h, attention_mask=causal_mask, position_ids=...,
    layer_past=cache, use_cache=..., position_embeddings=rotary)` (parallel or sequential residual inside the layer),
    then `final_layer_norm` (LayerNorm). The embedding dropout runs before the loop, outside the field."""

    stack_classes = (GPTNeoXModel,)
    layers = "layers"
    final_norm = "final_layer_norm"


@strict(accept_kwargs=True)
class OTGPTNeoXConfig(OTConfigMixin, GPTNeoXConfig):
    model_type = "ot_gpt_neox"


class OTGPTNeoXModel(OTModelMixin, GPTNeoXModel):
    ot_adapter = GPTNeoXAdapter()


class OTGPTNeoXForCausalLM(OTModelMixin, GPTNeoXForCausalLM, GenerationMixin):
    ot_adapter = GPTNeoXAdapter()


class OTGPTNeoXForSequenceClassification(OTModelMixin, GPTNeoXForSequenceClassification):
    ot_adapter = GPTNeoXAdapter()


register_family(OTGPTNeoXConfig, [OTGPTNeoXModel, OTGPTNeoXForCausalLM, OTGPTNeoXForSequenceClassification])
