"""OT-Transformer variants of mT5 (encoder-decoder). Travels with checkpoints: imports its siblings and transformers."""

from huggingface_hub.dataclasses import strict
from transformers import GenerationMixin, MT5Config, MT5EncoderModel, MT5ForConditionalGeneration, MT5Model
from transformers.models.mt5.modeling_mt5 import MT5Stack

from .ot_config import OTConfigMixin
from .ot_model import OTModelMixin, register_family
from .ot_t5 import T5Adapter


class MT5Adapter(T5Adapter):
    """MT5Stack calls its blocks exactly as T5Stack does (position biases threaded from block 0), then
    final_layer_norm (pre-LN): in paper mode it is inside the field."""

    stack_classes = (MT5Stack,)


@strict(accept_kwargs=True)
class OTMT5Config(OTConfigMixin, MT5Config):
    model_type = "ot_mt5"
    _ot_decoder_layer_names = ("num_decoder_layers", "num_layers")


class OTMT5Model(OTModelMixin, MT5Model):
    ot_adapter = MT5Adapter()


class OTMT5ForConditionalGeneration(OTModelMixin, MT5ForConditionalGeneration, GenerationMixin):
    ot_adapter = MT5Adapter()


class OTMT5EncoderModel(OTModelMixin, MT5EncoderModel):
    ot_adapter = MT5Adapter()


register_family(OTMT5Config, [OTMT5Model, OTMT5ForConditionalGeneration, OTMT5EncoderModel])
