"""Which OT classes exist per base family and task, and their registration with the transformers Auto classes."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from . import models as m

# task name -> the Auto class that serves it
TASK_AUTO_CLASSES = {
    "base": AutoModel,
    "causal-lm": AutoModelForCausalLM,
    "masked-lm": AutoModelForMaskedLM,
    "seq2seq-lm": AutoModelForSeq2SeqLM,
    "sequence-classification": AutoModelForSequenceClassification,
    "token-classification": AutoModelForTokenClassification,
}


@dataclass(frozen=True)
class Family:
    base_model_type: str
    config_class: type
    tasks: dict  # task -> OT model class
    extra: dict  # further OT classes by base class name (not served by an Auto class), e.g. T5EncoderModel


FAMILIES: dict[str, Family] = {
    "gpt2": Family(
        "gpt2",
        m.OTGPT2Config,
        {
            "base": m.OTGPT2Model,
            "causal-lm": m.OTGPT2LMHeadModel,
            "sequence-classification": m.OTGPT2ForSequenceClassification,
        },
        {},
    ),
    "bert": Family(
        "bert",
        m.OTBertConfig,
        {
            "base": m.OTBertModel,
            "masked-lm": m.OTBertForMaskedLM,
            "sequence-classification": m.OTBertForSequenceClassification,
            "token-classification": m.OTBertForTokenClassification,
        },
        {},
    ),
    "t5": Family(
        "t5",
        m.OTT5Config,
        {"base": m.OTT5Model, "seq2seq-lm": m.OTT5ForConditionalGeneration},
        {"T5EncoderModel": m.OTT5EncoderModel},
    ),
    "bart": Family(
        "bart",
        m.OTBartConfig,
        {
            "base": m.OTBartModel,
            "seq2seq-lm": m.OTBartForConditionalGeneration,
            "sequence-classification": m.OTBartForSequenceClassification,
        },
        {},
    ),
}

# OT model_type -> family
BY_OT_TYPE = {family.config_class.model_type: family for family in FAMILIES.values()}


def family_of(model_type: str) -> Family:
    if model_type in FAMILIES:
        return FAMILIES[model_type]
    if model_type in BY_OT_TYPE:
        return BY_OT_TYPE[model_type]
    raise ValueError(
        f"Unsupported base family {model_type!r}: hf_ot converts {sorted(FAMILIES)} checkpoints "
        f"(OT types {sorted(BY_OT_TYPE)})."
    )


def all_model_classes(family: Family) -> list[type]:
    return list(family.tasks.values()) + list(family.extra.values())


def register_auto_classes() -> None:
    """Register every OT config and model with the Auto classes (installed users need no trust_remote_code)."""
    for family in FAMILIES.values():
        try:
            AutoConfig.register(family.config_class.model_type, family.config_class)
        except ValueError:  # already registered (re-import)
            pass
        for task, cls in family.tasks.items():
            try:
                TASK_AUTO_CLASSES[task].register(family.config_class, cls)
            except ValueError:
                pass
