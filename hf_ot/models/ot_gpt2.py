"""OT-Transformer variants of GPT-2 (decoder-only). Travels with checkpoints: imports its siblings and transformers."""

from huggingface_hub.dataclasses import strict
from transformers import GenerationMixin, GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel, GPT2Model

from .ot_config import OTConfigMixin
from .ot_flow import StackAdapter
from .ot_model import OTModelMixin, register_family


class GPT2Adapter(StackAdapter):
    """GPT2Model: `for block in self.h: h = block(h, cache, causal_mask, enc_h, ...)`, then ln_f."""

    stack_classes = (GPT2Model,)
    layers = "h"
    final_norm = "ln_f"


@strict(accept_kwargs=True)
class OTGPT2Config(OTConfigMixin, GPT2Config):
    model_type = "ot_gpt2"


class OTGPT2Model(OTModelMixin, GPT2Model):
    ot_adapter = GPT2Adapter()


class OTGPT2LMHeadModel(OTModelMixin, GPT2LMHeadModel, GenerationMixin):
    ot_adapter = GPT2Adapter()


class OTGPT2ForSequenceClassification(OTModelMixin, GPT2ForSequenceClassification):
    ot_adapter = GPT2Adapter()


register_family(OTGPT2Config, [OTGPT2Model, OTGPT2LMHeadModel, OTGPT2ForSequenceClassification])
