"""The recipe's model: converted (`model.base`), built (`model.scratch`), or plain transformers (`model.ot: null`)."""

from __future__ import annotations

from ..errors import UsageError
from .config import ModelSection, scratch_config_class


def build_model(model_cfg: ModelSection, task: str, tokenizer, **head_kwargs):
    """Convert `model.base` (hub id, folder or minilm) or build `model.scratch`; `model.ot: null`: a plain baseline."""
    import transformers

    import hf_ot
    from hf_ot.conversion_check import default_base
    from hf_ot.registry import FAMILIES

    settings = model_cfg.ot  # the model config's ot_* fields (checked with the recipe), or None: a baseline
    hf_task = {"translation": "seq2seq-lm"}.get(task, task)
    if model_cfg.base:
        base = default_base() if model_cfg.base == "minilm" else model_cfg.base
        if settings is not None:
            return hf_ot.convert(base, task=hf_task, **settings, **head_kwargs)
        model = hf_ot.registry.TASK_AUTO_CLASSES[hf_task].from_pretrained(base, **head_kwargs)
    else:
        scratch = dict(model_cfg.scratch or {})
        family = scratch.pop("family", None)
        special = {k: getattr(tokenizer, k, None) for k in ("pad_token_id", "bos_token_id", "eos_token_id")}
        special["vocab_size"] = len(tokenizer)
        if scratch.get("vocab_size", len(tokenizer)) < len(tokenizer):  # token ids past the embedding fail mid-training
            raise UsageError(
                f"model.scratch.vocab_size={scratch['vocab_size']} is smaller than the tokenizer's {len(tokenizer)} "
                "ids: raise it, or drop it (the tokenizer's size is the default)."
            )
        if family in ("t5", "bart"):
            special["decoder_start_token_id"] = tokenizer.pad_token_id if family == "t5" else tokenizer.eos_token_id
        config = scratch_config_class(family)(**{**special, **scratch, **head_kwargs})
        ot_class = FAMILIES[family].tasks[hf_task]  # its second base is the plain transformers class
        if settings is not None:
            return ot_class(FAMILIES[family].config_class.from_base_config(config, **settings))
        model = getattr(transformers, ot_class.__bases__[1].__name__)(config)
    if hf_task == "causal-lm" and getattr(model, "loss_type", "") is None:  # Trainer averages it per token, as OT's
        model.loss_type = "ForCausalLM"
    return model
