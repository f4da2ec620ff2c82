"""OT-Transformer variants of Llama (decoder-only). Travels with checkpoints: imports its siblings and transformers."""

from huggingface_hub.dataclasses import strict
from transformers import GenerationMixin, LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification, LlamaModel

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class LlamaAdapter(StackAdapter):
    """LlamaModel: `for layer in self.layers[: config.num_hidden_layers]: h = layer(h, attention_mask=causal_mask,
    position_embeddings=rotary, position_ids=..., cache=..., ...)`, then `self.norm` (RMSNorm). Nothing between layers.
    Mistral, Qwen2, Qwen3, Gemma2 and Phi3 loop the same way (with a mask per `config.layer_types[i]`)."""

    stack_classes = (LlamaModel,)
    layers = "layers"
    final_norm = "norm"


@strict(accept_kwargs=True)
class OTLlamaConfig(OTConfigMixin, LlamaConfig):
    model_type = "ot_llama"


class OTLlamaModel(OTModelMixin, LlamaModel):
    ot_adapter = LlamaAdapter()


class OTLlamaForCausalLM(OTModelMixin, LlamaForCausalLM, GenerationMixin):
    ot_adapter = LlamaAdapter()


class OTLlamaForSequenceClassification(OTModelMixin, LlamaForSequenceClassification):
    ot_adapter = LlamaAdapter()


register_family(OTLlamaConfig, [OTLlamaModel, OTLlamaForCausalLM, OTLlamaForSequenceClassification])
