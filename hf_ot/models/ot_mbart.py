"""OT-Transformer variants of mBART (encoder-decoder).

Travels with checkpoints: imports its siblings and transformers.
"""

from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import GenerationMixin, MBartConfig, MBartForConditionalGeneration, MBartModel
from transformers.models.mbart.modeling_mbart import MBartDecoder, MBartEncoder

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class MBartAdapter(StackAdapter):
    """MBartEncoder / MBartDecoder: BART's loop `for idx, layer in enumerate(self.layers): (LayerDrop) h = layer(h,
    mask, enc_h, ...)`, then the stack's final `layer_norm` (mBART is pre-LN): in paper mode it is inside the field.
    LayerDrop moves into the flow (per block application)."""

    stack_classes = (MBartEncoder, MBartDecoder)
    layers = "layers"
    final_norm = "layer_norm"

    def role(self, stack: nn.Module) -> str:
        return "decoder" if isinstance(stack, MBartDecoder) else "encoder"


@strict(accept_kwargs=True)
class OTMBartConfig(OTConfigMixin, MBartConfig):
    model_type = "ot_mbart"
    _ot_decoder_layer_names = ("decoder_layers", "encoder_layers")


class OTMBartModel(OTModelMixin, MBartModel):
    ot_adapter = MBartAdapter()


class OTMBartForConditionalGeneration(OTModelMixin, MBartForConditionalGeneration, GenerationMixin):
    ot_adapter = MBartAdapter()


register_family(OTMBartConfig, [OTMBartModel, OTMBartForConditionalGeneration], lora_targets=("q_proj", "v_proj"))
