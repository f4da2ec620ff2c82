"""OT-Transformer variants of GPT-2 (decoder-only). Travels with checkpoints: imports only `.ot_core` and transformers."""

from huggingface_hub.dataclasses import strict
from transformers import GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel, GPT2Model

from .ot_core import OTConfigMixin, OTModelMixin, StackAdapter


@strict(accept_kwargs=True)
class OTGPT2Config(OTConfigMixin, GPT2Config):
    model_type = "ot_gpt2"
    _ot_decoder_layer_attrs = ("n_layer",)
    _ot_auto_classes = {
        "AutoModel": "OTGPT2Model",
        "AutoModelForCausalLM": "OTGPT2LMHeadModel",
        "AutoModelForSequenceClassification": "OTGPT2ForSequenceClassification",
    }

    def validate_ot_settings(self):
        super().validate_ot_settings()
        if self.scale_attn_by_inverse_layer_idx:
            raise ValueError(
                "scale_attn_by_inverse_layer_idx=True is not supported by OT GPT-2: the shared field renumbers "
                "layers per solver step for the KV cache. Set it to False."
            )


class GPT2Adapter(StackAdapter):
    """GPT2Model: `for block in self.h: h = block(h, cache, causal_mask, enc_h, ...)`, then ln_f."""

    stack_classes = (GPT2Model,)
    layers = "h"
    final_norm = "ln_f"

    def self_attention(self, block):
        return block.attn


class OTGPT2Model(OTModelMixin, GPT2Model):
    config_class = OTGPT2Config
    ot_adapter = GPT2Adapter()


class OTGPT2LMHeadModel(OTModelMixin, GPT2LMHeadModel):
    config_class = OTGPT2Config
    ot_adapter = GPT2Adapter()


class OTGPT2ForSequenceClassification(OTModelMixin, GPT2ForSequenceClassification):
    config_class = OTGPT2Config
    ot_adapter = GPT2Adapter()


# save_pretrained copies this file (and ot_core.py) next to the weights and writes auto_map: see OTConfigMixin.
OTGPT2Config.register_for_auto_class()
OTGPT2Model.register_for_auto_class("AutoModel")
OTGPT2LMHeadModel.register_for_auto_class("AutoModelForCausalLM")
OTGPT2ForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
