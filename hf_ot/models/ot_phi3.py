"""OT-Transformer variants of Phi3 (decoder-only). Travels with checkpoints: imports its siblings and transformers."""

from huggingface_hub.dataclasses import strict
from transformers import GenerationMixin, Phi3Config, Phi3ForCausalLM, Phi3ForSequenceClassification, Phi3Model

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class Phi3Adapter(StackAdapter):
    """Phi3Model: `for layer in self.layers[: config.num_hidden_layers]: h = layer(h, attention_mask=mask, ...)`,
    one mask for every layer (a sliding-window mask when `config.sliding_window` is set), then `self.norm` (RMSNorm).
    The residual dropouts are inside the block."""

    stack_classes = (Phi3Model,)
    layers = "layers"
    final_norm = "norm"


@strict(accept_kwargs=True)
class OTPhi3Config(OTConfigMixin, Phi3Config):
    model_type = "ot_phi3"


class OTPhi3Model(OTModelMixin, Phi3Model):
    ot_adapter = Phi3Adapter()


class OTPhi3ForCausalLM(OTModelMixin, Phi3ForCausalLM, GenerationMixin):
    ot_adapter = Phi3Adapter()


class OTPhi3ForSequenceClassification(OTModelMixin, Phi3ForSequenceClassification):
    ot_adapter = Phi3Adapter()


register_family(
    OTPhi3Config, [OTPhi3Model, OTPhi3ForCausalLM, OTPhi3ForSequenceClassification], lora_targets=("qkv_proj",)
)
