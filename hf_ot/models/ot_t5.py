"""OT-Transformer variants of T5 (encoder-decoder). Travels with checkpoints: imports only `.ot_core` and transformers."""

from huggingface_hub.dataclasses import strict
from transformers import T5Config, T5EncoderModel, T5ForConditionalGeneration, T5Model
from transformers.models.t5.modeling_t5 import T5Stack

from .ot_core import OTConfigMixin, OTModelMixin, StackAdapter


@strict(accept_kwargs=True)
class OTT5Config(OTConfigMixin, T5Config):
    model_type = "ot_t5"
    _ot_decoder_layer_attrs = ("num_decoder_layers", "num_layers")
    _ot_auto_classes = {
        "AutoModel": "OTT5Model",
        "AutoModelForSeq2SeqLM": "OTT5ForConditionalGeneration",
    }


class T5Adapter(StackAdapter):
    """T5Stack: `for block in self.block: h, self_bias, cross_bias = block(h, mask, self_bias, enc_h, enc_mask,
    cross_bias, cache=...)`; block 0 computes the relative position biases and later blocks reuse them, then
    final_layer_norm. The biases depend on positions only, so every field evaluation reuses them too."""

    stack_classes = (T5Stack,)
    layers = "block"
    final_norm = "final_layer_norm"

    def role(self, stack):
        return "decoder" if stack.is_decoder else "encoder"

    def self_attention(self, block):
        return block.layer[0].SelfAttention

    def block_output(self, out, args, kwargs):
        hidden, self_bias, cross_bias = out
        # args = (mask, self_bias, enc_h, enc_mask, cross_bias)
        args = (args[0], self_bias, args[2], args[3], cross_bias if cross_bias is not None else args[4])
        return hidden, args, kwargs

    def loop_output(self, hidden, args, kwargs):
        return hidden, args[1], args[4]


class OTT5Model(OTModelMixin, T5Model):
    config_class = OTT5Config
    ot_adapter = T5Adapter()


class OTT5ForConditionalGeneration(OTModelMixin, T5ForConditionalGeneration):
    config_class = OTT5Config
    ot_adapter = T5Adapter()


class OTT5EncoderModel(OTModelMixin, T5EncoderModel):
    config_class = OTT5Config
    ot_adapter = T5Adapter()


# save_pretrained copies this file (and ot_core.py) next to the weights and writes auto_map: see OTConfigMixin.
OTT5Config.register_for_auto_class()
OTT5Model.register_for_auto_class("AutoModel")
OTT5ForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
OTT5EncoderModel.register_for_auto_class("AutoModel")  # an encoder-only checkpoint loads as AutoModel
