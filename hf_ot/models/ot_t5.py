"""OT-Transformer variants of T5 (encoder-decoder). Travels with checkpoints: imports its siblings and transformers."""

from typing import Any

import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import GenerationMixin, T5Config, T5EncoderModel, T5ForConditionalGeneration, T5Model
from transformers.models.t5.modeling_t5 import T5Stack

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class T5Adapter(StackAdapter):
    """T5Stack: `for block in self.block: h, self_bias, cross_bias = block(h, mask, self_bias, enc_h, enc_mask,
    cross_bias, cache=...)`; block 0 computes the relative position biases and later blocks reuse them, then
    final_layer_norm. The biases depend on positions only, so the flow threads them from block to block the same way
    in every field evaluation. mT5 (MT5Stack) calls its blocks identically."""

    stack_classes: tuple[type, ...] = (T5Stack,)
    layers = "block"
    final_norm = "final_layer_norm"

    def role(self, stack: nn.Module) -> str:
        return "decoder" if stack.is_decoder else "encoder"

    def thread(self, out: Any, call: tuple[tuple[Any, ...], dict[str, Any]]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        _, self_bias, cross_bias = out
        args, kwargs = call  # (mask, self_bias, enc_h, enc_mask, cross_bias)
        cross_bias = cross_bias if cross_bias is not None else args[4]
        return (args[0], self_bias, args[2], args[3], cross_bias, *args[5:]), kwargs

    def loop_output(self, hidden: torch.Tensor, call: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
        args, _ = call
        return hidden, args[1], args[4]


@strict(accept_kwargs=True)
class OTT5Config(OTConfigMixin, T5Config):
    model_type = "ot_t5"
    _ot_decoder_layer_names = ("num_decoder_layers", "num_layers")


class OTT5Model(OTModelMixin, T5Model):
    ot_adapter = T5Adapter()


class OTT5ForConditionalGeneration(OTModelMixin, T5ForConditionalGeneration, GenerationMixin):
    ot_adapter = T5Adapter()


class OTT5EncoderModel(OTModelMixin, T5EncoderModel):
    ot_adapter = T5Adapter()


register_family(OTT5Config, [OTT5Model, OTT5ForConditionalGeneration, OTT5EncoderModel])
