"""The recipe's model: converted (`model.base`), built (`model.scratch`), or plain transformers (`model.ot: null`)."""

from __future__ import annotations

from ..convert import convert_parameters
from ..errors import UsageError
from ..models.ot_config import SETTING_OF_KEY
from .config import ModelSection, scratch_config_class


def build_model(model_cfg: ModelSection, task: str, tokenizer, **head_kwargs):
    """Convert `model.base` (hub id, folder or minilm) or build `model.scratch`; `model.ot: null`: a plain baseline."""
    import transformers

    import hf_ot
    from hf_ot.conversion_check import default_base
    from hf_ot.registry import FAMILIES

    ot = model_cfg.ot  # model.ot as model config fields (ot_*; its keys were checked with the config), or None
    settings = None if ot is None else {SETTING_OF_KEY[k].field: v for k, v in ot.items()}
    hf_task = {"translation": "seq2seq-lm"}.get(task, task)
    if model_cfg.base:
        base = default_base() if model_cfg.base == "minilm" else model_cfg.base
        if settings is not None:  # a setting goes to convert's keyword where it takes one, else on the config
            parameters = convert_parameters()
            kwargs = {parameters[k]: v for k, v in settings.items() if k in parameters}
            model = hf_ot.convert(base, task=hf_task, **kwargs, **head_kwargs)
            model.config.update({k: v for k, v in settings.items() if k not in parameters})
            model.config.validate_ot_settings()
            return model
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
