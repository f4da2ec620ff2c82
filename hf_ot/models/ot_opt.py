"""OT-Transformer variants of OPT (decoder-only). Travels with checkpoints: imports its siblings and transformers."""

from huggingface_hub.dataclasses import strict
from transformers import GenerationMixin, OPTConfig, OPTForCausalLM, OPTForSequenceClassification, OPTModel
from transformers.models.opt.modeling_opt import OPTDecoder

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class OPTAdapter(StackAdapter):
    """OPTDecoder: `for idx, layer in enumerate(self.layers): (LayerDrop) h = layer(h, attention_mask=causal_mask,
    position_ids=..., cache=..., ...)`, then `final_layer_norm` (None when do_layer_norm_before=False, e.g. OPT-350m:
    post-LN blocks, no norm in the paper-mode field) and `project_out`. `project_in` (before the loop) and `project_out`
    (after the final norm) stay outside the field. LayerDrop moves into the flow (per block application)."""

    stack_classes = (OPTDecoder,)
    layers = "layers"
    final_norm = "final_layer_norm"


@strict(accept_kwargs=True)
class OTOPTConfig(OTConfigMixin, OPTConfig):
    model_type = "ot_opt"


class OTOPTModel(OTModelMixin, OPTModel):
    ot_adapter = OPTAdapter()


class OTOPTForCausalLM(OTModelMixin, OPTForCausalLM, GenerationMixin):
    ot_adapter = OPTAdapter()


class OTOPTForSequenceClassification(OTModelMixin, OPTForSequenceClassification):
    ot_adapter = OPTAdapter()


register_family(OTOPTConfig, [OTOPTModel, OTOPTForCausalLM, OTOPTForSequenceClassification])
