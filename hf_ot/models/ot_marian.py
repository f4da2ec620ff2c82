"""OT-Transformer variants of Marian (encoder-decoder).

Travels with checkpoints: imports its siblings and transformers.
"""

from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import GenerationMixin, MarianConfig, MarianModel, MarianMTModel
from transformers.models.marian.modeling_marian import MarianDecoder, MarianEncoder

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class MarianAdapter(StackAdapter):
    """MarianEncoder / MarianDecoder: BART's loop `for idx, layer in enumerate(self.layers): (LayerDrop) h = layer(h,
    mask, enc_h, ...)` after sinusoidal positions are added to the embeddings. Post-LN, no norm after the stack.
    LayerDrop moves into the flow (per block application)."""

    stack_classes = (MarianEncoder, MarianDecoder)
    layers = "layers"

    def role(self, stack: nn.Module) -> str:
        return "decoder" if isinstance(stack, MarianDecoder) else "encoder"


@strict(accept_kwargs=True)
class OTMarianConfig(OTConfigMixin, MarianConfig):
    model_type = "ot_marian"
    _ot_decoder_layer_names = ("decoder_layers", "encoder_layers")


class OTMarianModel(OTModelMixin, MarianModel):
    ot_adapter = MarianAdapter()


class OTMarianMTModel(OTModelMixin, MarianMTModel, GenerationMixin):
    ot_adapter = MarianAdapter()


register_family(OTMarianConfig, [OTMarianModel, OTMarianMTModel], lora_targets=("q_proj", "v_proj"))
