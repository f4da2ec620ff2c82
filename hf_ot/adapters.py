"""PEFT adapters of OT models, saved so that they reload on that OT model, exactly, through PEFT's own loading.

PEFT records the base of an adapter from the model's `name_or_path` when `get_peft_model` wraps it, and
`AutoPeftModelFor*.from_pretrained(adapter_dir)` loads that base. hf_ot keeps that name true for its own models and
changes nothing in PEFT:

- an OT model saved with `hf_ot.save_model` or `model.save_pretrained(DIR)` is named by DIR (absolute), and a model
  loaded with `from_pretrained` by where it was loaded from: an adapter made after that names its OT base;
- a model made by `hf_ot.convert` and never saved is named by a text that makes loading its adapter fail with the fix
  (save the OT model, then `set_adapter_base`), not reload on the plain checkpoint converted from;
- `save_adapter(peft_model, DIR)` is PEFT's save_pretrained plus what a reload needs where the adapter was made
  without it: the saved OT folder as base (absolute), `task_type` from the head (CAUSAL_LM, SEQ_2_SEQ_LM) so that
  `AutoPeftModelFor*` loads through transformers' Auto classes (with `trust_remote_code=True` where hf_ot is not
  installed), `auto_mapping` naming transformers' Auto class for a classifier without a task type, and a record of
  the base save;
- `load_adapter(DIR)` is PEFT's loading after hf_ot's checks: a base folder that is gone, a Hub base offline and not
  cached, a never-saved base are named with the fix; a base replaced since the adapter was trained is warned about.
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from pathlib import Path
from typing import Any

from .checkpoints import CheckpointError, read_json
from .run_folders import write_text_atomic

# the base_model_name_or_path of an adapter whose OT base was never saved: loading it fails with this text
UNSAVED_BASE = (
    "UNSAVED-hf_ot-OT-model: this adapter was trained on an OT model that was never saved, so its base cannot be "
    "loaded. Save the OT model as converted, before adding adapters (hf_ot.save_model(model, DIR)), then run "
    "hf_ot.adapters.set_adapter_base(ADAPTER_DIR, DIR) and load again"
)
_HEAD_TASK_TYPES = (  # class-name endings of the heads -> PEFT task types
    (("ForCausalLM", "LMHeadModel"), "CAUSAL_LM"),
    (("ForConditionalGeneration", "MTModel"), "SEQ_2_SEQ_LM"),
    # not SEQ_CLS / TOKEN_CLS: PEFT builds those with the head in modules_to_save, so a task type added only at save
    # time would make the adapter expect head weights it does not hold (set task_type when creating those adapters)
)


def is_ot_model(model: Any) -> bool:
    config = getattr(model, "config", None)
    return config is not None and hasattr(config, "ot_num_steps") and hasattr(config, "ot_solver")


def _is_ot_folder(path: str) -> bool:
    config = Path(os.path.expanduser(path), "config.json")
    if not config.is_file():
        return False
    try:
        model_type = (read_json(config) or {}).get("model_type", "")
    except (OSError, ValueError):
        return False
    return isinstance(model_type, str) and model_type.startswith("ot_")


def mark_saved(model: Any, folder: str | os.PathLike[str]) -> None:
    """Record that `model` now lives in `folder` (hf_ot.save_model and the OT classes' save_pretrained call this):
    its `name_or_path`, which PEFT records as the base of an adapter made after this, names that folder."""
    model.hf_ot_saved_to = model.name_or_path = str(Path(folder).expanduser().resolve())


def mark_unsaved(model: Any) -> None:
    """A model converted in memory (hf_ot.convert): its `name_or_path` is still the plain checkpoint's, on which an
    adapter's reload would silently run at M = 1. It names the fix instead until the model is saved."""
    model.name_or_path = UNSAVED_BASE


def ot_base_name(model: Any) -> str | None:
    """The name an adapter of the OT `model` should give as its base: where the OT model was saved or loaded from;
    None when it was converted in memory and never saved (or the folder it was saved to holds no OT model now)."""
    saved = getattr(model, "hf_ot_saved_to", None)
    if saved and _is_ot_folder(str(saved)):
        return str(saved)
    if getattr(model, "ot_loading_info", None) is not None:  # made by hf_ot.convert: its name is the plain base's
        return None
    name = model.__dict__.get("name_or_path") or getattr(model.config, "_name_or_path", "")
    if not name:
        return None
    if os.path.isdir(os.path.expanduser(str(name))):
        return str(Path(os.path.expanduser(str(name))).resolve()) if _is_ot_folder(str(name)) else None
    return str(name)  # a Hub repo it was loaded from (an OT config, since the model loaded as an OT model)


def task_type_of(model: Any) -> str | None:
    name = type(model).__name__
    for endings, task_type in _HEAD_TASK_TYPES:
        if name.endswith(endings):
            return task_type
    return None


def auto_class_name_of(model: Any) -> str | None:
    """The transformers Auto class that serves the OT `model`'s head ('AutoModelForSequenceClassification', ...)."""
    from .models import TASKS
    from .registry import family_of

    try:
        family = family_of(model.config.model_type)
    except ValueError:
        return None
    for task, cls in family.tasks.items():
        if type(model) is cls:
            return TASKS[task][0]
    return None


def set_adapter_base(adapter_dir: str | os.PathLike[str], base: str) -> None:
    """Point a saved adapter at its OT base model (a saved hf_ot folder or a Hub repo): rewrites
    `base_model_name_or_path` in adapter_config.json (and every named adapter's below it)."""
    root = Path(adapter_dir)
    found = _adapter_configs(root)
    if os.path.isdir(os.path.expanduser(base)):
        if not _is_ot_folder(base):
            raise ValueError(f"{base} holds no hf_ot OT model (config.json with an ot_* model_type).")
        base = str(Path(os.path.expanduser(base)).resolve())
    elif _looks_local(base) or _offline_and_not_cached(base):
        hub = "" if _looks_local(base) else ", nor (HF_HUB_OFFLINE is set) a Hub repo in the local cache"
        raise FileNotFoundError(
            f"No folder {base!r}{hub} (the base for {root}): give the folder hf_ot.save_model wrote the OT model to, "
            "or a Hub repo id (org/name)."
        )
    for path in found:
        data = read_json(path, "Save the adapter again.")
        data["base_model_name_or_path"] = base
        write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    _write_base_record(root, base)  # the base chosen now is the one to check against at load


def _offline_and_not_cached(repo_id: str) -> bool:
    """Offline (HF_HUB_OFFLINE), a Hub id whose config.json is not in the local cache cannot be loaded."""
    from huggingface_hub import constants, try_to_load_from_cache

    offline = constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
    return offline and not isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


def _looks_local(name: str) -> bool:
    """A base name that can only mean a local folder (a Hub id is org/name or name)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    text = os.path.expanduser(str(name))
    if os.path.isabs(text) or str(name).startswith(("~", "./", "../")) or text.count("/") > 1:
        return True
    if "/" in text and os.path.isdir(text.split("/")[0]):
        return True  # runs/quickstrt: a mistyped folder under a local one
    try:
        validate_repo_id(text)
    except HFValidationError:
        return True
    return False


# Beside adapter_config.json: which saved model the adapter was trained on (its folder, the save id of hf_ot's
# manifest there and the hash of its config.json), checked when the adapter is loaded.
BASE_RECORD = "hf_ot_adapter_base.json"


def base_fingerprint(folder: str) -> dict[str, Any] | None:
    from .run_folders import file_digest, save_id_of

    path = Path(os.path.expanduser(folder))
    if not (path / "config.json").is_file():
        return None
    return {"save_id": save_id_of(path), "config_sha256": file_digest(path / "config.json")}


def _write_base_record(adapter_dir: Path, base: str) -> None:
    fingerprint = base_fingerprint(base) if os.path.isdir(os.path.expanduser(base)) else None
    record = adapter_dir / BASE_RECORD
    if fingerprint is None:
        if _read_base_record(adapter_dir) is not None:  # a record of an earlier base (hf_ot's): no longer true
            record.unlink()
        return
    write_text_atomic(record, json.dumps({"hf_ot_adapter_base": 1, "base": base, **fingerprint}, indent=1) + "\n")


def _read_base_record(adapter_dir) -> dict[str, Any] | None:
    try:
        record = read_json(Path(os.path.expanduser(str(adapter_dir))) / BASE_RECORD)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("hf_ot_adapter_base") == 1 else None


def _same_save(a: dict[str, Any], b: dict[str, Any]) -> bool:  # (calibrate --write keeps the save id, not the config)
    same_id = not (a.get("save_id") and b.get("save_id")) or a["save_id"] == b["save_id"]
    return same_id and a.get("config_sha256") == b.get("config_sha256")


def check_adapter_base(model: Any, adapter_dir) -> None:
    """Warn, naming both, when the OT base `model` is not the saved model the adapter in `adapter_dir` was trained on
    (another save has replaced that folder since, or another folder is given)."""
    record = _read_base_record(adapter_dir)
    if record is None:
        return
    if not is_ot_model(model):  # (its folder reused for a plain checkpoint)
        kind = getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__
        warnings.warn(
            f"The adapter in {adapter_dir} was trained on the OT model saved in {record.get('base')}; the base given "
            f"now is not an OT model ({kind}): its outputs will differ. Load the OT base the adapter was trained on "
            "(hf_ot.adapters.set_adapter_base(ADAPTER_DIR, OT_FOLDER) names where it is now).",
            stacklevel=3,
        )
        return
    where = ot_base_name(model)
    now = base_fingerprint(where) if where and os.path.isdir(where) else None
    if now is None or _same_save(record, now):
        return
    warnings.warn(
        f"The adapter in {adapter_dir} was trained on the model saved in {record.get('base')} (save "
        f"{record.get('save_id') or record.get('config_sha256', '')[:12]}); the base given now, {where} (save "
        f"{now.get('save_id') or (now.get('config_sha256') or '')[:12]}), is another save, or its config.json "
        "changed since (calibrate --write): its outputs will differ. Load the base the adapter was trained on, or "
        "train the adapter again on this one (hf_ot.adapters."
        "set_adapter_base(ADAPTER_DIR, BASE) accepts this base).",
        stacklevel=3,
    )


def check_adapter_base_exists(adapter_dir) -> None:
    """Before PEFT loads an adapter's base (load_adapter): a local base folder that is gone, or none saved, is named
    with the fix (not the Hub's 'Repo id must be in the form' error for the path)."""
    config = Path(os.path.expanduser(str(adapter_dir))) / "adapter_config.json"
    try:
        base = (read_json(config) or {}).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return
    fix = f"hf_ot.adapters.set_adapter_base({str(adapter_dir)!r}, NEW_FOLDER)"
    if base == UNSAVED_BASE or base is None:
        raise FileNotFoundError(
            f"The adapter in {adapter_dir} names no saved base: it was trained on an OT model made in memory "
            "(converted, or built from a config) and never saved. Save that OT model as it was made "
            "(hf_ot.save_model(model, DIR)), then point the adapter "
            f"at it: {fix.replace('NEW_FOLDER', 'DIR')}."
        )
    if not isinstance(base, str) or os.path.isdir(os.path.expanduser(base)):
        return
    if _looks_local(base):
        raise FileNotFoundError(
            f"The base model of the adapter in {adapter_dir} was the folder {base}, which is gone (moved or "
            f"deleted). Put it back, or point the adapter at where it is now: {fix}."
        )
    if _offline_and_not_cached(base):
        raise FileNotFoundError(
            f"The base model of the adapter in {adapter_dir} is the Hub repo {base}, which is not in the local cache, "
            f"and HF_HUB_OFFLINE is set: go online once (unset HF_HUB_OFFLINE) to download it, or point the adapter "
            f"at a local copy of it: {fix}."
        )


def _marking_save_pretrained(original):
    """The OT classes' save_pretrained: transformers' (or the class's own), then `mark_saved(model, folder)`."""

    @functools.wraps(original)
    def save_pretrained(self, save_directory, *args, **kwargs):
        result = original(self, save_directory, *args, **kwargs)
        if _is_ot_folder(str(save_directory)):  # written (the main process's folder, or one a rank shares)
            mark_saved(self, save_directory)
        return result

    save_pretrained.hf_ot_hook = True  # type: ignore[attr-defined]
    return save_pretrained


def install_save_pretrained_hook() -> None:
    """Wrap the OT model classes' save_pretrained once (on their mixin, first in their MRO), so a model saved with
    transformers' `model.save_pretrained(DIR)` is recorded as living in DIR, as `hf_ot.save_model` records it."""
    from .models.ot_model import OTModelMixin

    current = getattr(OTModelMixin, "save_pretrained", None)
    if getattr(current, "hf_ot_hook", False):
        return
    own = OTModelMixin.__dict__.get("save_pretrained")

    def inherited(self, save_directory, *args, **kwargs):  # the next class's in the model's MRO (PreTrainedModel's)
        return super(OTModelMixin, self).save_pretrained(save_directory, *args, **kwargs)

    OTModelMixin.save_pretrained = _marking_save_pretrained(own or inherited)  # type: ignore[method-assign]
    install_load_check(OTModelMixin)


class WeightsDoNotFit(CheckpointError, RuntimeError):
    """transformers' mismatched-sizes RuntimeError (still one), naming the folder and both fixes (hf-ot: exit 2)."""


def install_load_check(mixin: Any) -> None:
    """The OT classes' from_pretrained (AutoModel's too, which calls it) checks a local folder's weight files first:
    a cut-short shard is named (not safetensors' 'incomplete metadata' with no file name)."""
    from .checkpoints import check_weight_files

    load = mixin.__dict__.get("from_pretrained")
    if load is not None and getattr(load.__func__, "hf_ot_hook", False):
        return

    def from_pretrained(cls, *args, **kwargs):
        name = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        folder = Path(os.path.expanduser(str(name))) if isinstance(name, (str, os.PathLike)) else None
        fix = "Save the model again, or copy the folder again from its source."
        if folder is not None and folder.is_dir() and not kwargs.get("subfolder"):
            check_weight_files(folder, fix)
        try:
            if load is not None:
                return load.__func__(cls, *args, **kwargs)
            return super(mixin, cls).from_pretrained(*args, **kwargs)
        except RuntimeError as err:  # transformers' "ignore_mismatched_sizes" error: its report was logged above
            if folder is None or "mismatched" not in str(err):
                raise
            raise WeightsDoNotFit(
                f"The weights in {folder} do not fit the model's config (their shapes differ: the report above lists "
                "them). If you changed the config on purpose (e.g. num_labels), pass ignore_mismatched_sizes=True; "
                f"else the folder mixes the files of two models (weights copied from another). {fix}"
            ) from None

    from_pretrained.hf_ot_hook = True  # type: ignore[attr-defined]
    mixin.from_pretrained = classmethod(from_pretrained)


def _adapter_configs(root: Path) -> list[Path]:
    configs = [root / "adapter_config.json", *root.glob("*/adapter_config.json")]  # named adapters: a folder each
    found = [c for c in configs if c.is_file()]
    if not found:
        raise FileNotFoundError(f"No adapter_config.json in {root}: is it the folder PEFT's save_pretrained wrote?")
    return found


def save_adapter(peft_model: Any, save_directory: str | os.PathLike[str], **kwargs: Any) -> Path:
    """`peft_model.save_pretrained(save_directory, **kwargs)` (PEFT's own), then, in the adapter_config.json files it
    wrote, what reloads the adapter on its OT base exactly: the saved OT folder as base, `task_type` from the head
    where it was left unset, transformers' Auto class as `auto_mapping` for a classifier without one (see the module
    docstring); and a record of the base save, checked by `load_adapter`. An OT base never saved is warned about."""
    base = peft_model.get_base_model()
    if not is_ot_model(base):
        raise ValueError(
            f"save_adapter saves adapters of hf_ot OT models; this one's base is a {type(base).__name__}: use "
            "peft_model.save_pretrained(DIR)."
        )
    name = ot_base_name(base)
    if name is None:
        warnings.warn(
            "This adapter's base is an OT model converted in memory and never saved: the adapter is saved, but it "
            "cannot be reloaded on its own. Save the OT model as converted, before get_peft_model "
            "(hf_ot.save_model(model, DIR)), then run hf_ot.adapters.set_adapter_base(ADAPTER_DIR, DIR).",
            stacklevel=2,
        )
        name = UNSAVED_BASE
    peft_model.save_pretrained(save_directory, **kwargs)
    root = Path(save_directory)
    task_type, auto_class = task_type_of(base), auto_class_name_of(base)
    for path in _adapter_configs(root):
        data = read_json(path, "Save the adapter again.")
        data["base_model_name_or_path"] = name
        if data.get("task_type") is None and task_type is not None and data.get("num_virtual_tokens") is None:
            data["task_type"], data["auto_mapping"] = task_type, None  # loads through transformers' Auto class
        elif data.get("task_type") is None and auto_class is not None:
            # PEFT wrote the OT class in its hf_ot module (refused by its import allowlist, absent without hf_ot)
            data["auto_mapping"] = {"base_model_class": auto_class, "parent_library": "transformers"}
        write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    if name != UNSAVED_BASE:
        _write_base_record(root, name)
    return root


_PEFT_AUTO_CLASSES = {
    "CAUSAL_LM": "AutoPeftModelForCausalLM",
    "SEQ_2_SEQ_LM": "AutoPeftModelForSeq2SeqLM",
    "SEQ_CLS": "AutoPeftModelForSequenceClassification",
    "TOKEN_CLS": "AutoPeftModelForTokenClassification",
    "QUESTION_ANS": "AutoPeftModelForQuestionAnswering",
    "FEATURE_EXTRACTION": "AutoPeftModelForFeatureExtraction",
}


def load_adapter(adapter_dir: str | os.PathLike[str], model: Any = None, **kwargs: Any) -> Any:
    """An adapter with its base: `AutoPeftModel*.from_pretrained(adapter_dir, **kwargs)` (the class of its task
    type), or `PeftModel.from_pretrained(model, adapter_dir, **kwargs)` onto a base `model` you loaded. First a base
    folder that is gone, a Hub base not cached while offline, a base never saved are named with the fix; a base that is
    not the save the adapter was trained on (replaced or recalibrated since) is warned about, naming both."""
    import peft

    if model is None:
        check_adapter_base_exists(adapter_dir)
        where = Path(os.path.expanduser(str(adapter_dir))) / "adapter_config.json"
        config = read_json(where, "Give the folder PEFT saved the adapter to.")
        auto = getattr(peft, _PEFT_AUTO_CLASSES.get(config.get("task_type") or "", "AutoPeftModel"))
        loaded = auto.from_pretrained(str(adapter_dir), **kwargs)
        check_adapter_base(loaded.get_base_model(), adapter_dir)
        return loaded
    check_adapter_base(model, adapter_dir)
    return peft.PeftModel.from_pretrained(model, adapter_dir, **kwargs)
