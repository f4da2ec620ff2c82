"""Saving a model folder complete on its own (weights, code, tokenizer, card) and pushing it to the Hub
(huggingface_hub does the work)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub import HfApi, ModelCard, get_token
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from .adapters import mark_saved
from .cards import render_model_card
from .errors import PushError
from .run_folders import safe_save
from .tokenizers import check_tokenizer


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

def save_model(model, output_dir, *, tokenizer=None, card: ModelCard | None = None, overwrite: bool = False,
               **card_kwargs) -> Path:
    """Write a folder complete on its own: config with auto_map, safetensors, the model code, the generation config,
    the tokenizer when given and README.md (the model card). Written beside output_dir, then moved into place.

    overwrite=True replaces a folder that holds an hf_ot model, never any other non-empty folder. An empty
    (made-up) tokenizer is refused."""

    check_tokenizer(tokenizer)  # before anything is written

    def save(folder):
        model.save_pretrained(folder)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
        (card or render_model_card(model, **card_kwargs)).save(Path(folder) / "README.md")

    saved = safe_save(save, output_dir, overwrite=overwrite)
    mark_saved(model, saved)  # PEFT adapters of this model now name this folder as their base (hf_ot.adapters)
    return saved

@dataclass
class PushPlan:
    repo_id: str
    folder: str
    files: list[str] = field(default_factory=list)
    commit_message: str = ""
    private: bool = False

def plan_push(folder, repo_id: str, commit_message: str | None = None, private: bool = False) -> PushPlan:
    """What a push would upload, where, with which commit message; checks the repo id and that the folder is a
    loadable OT model."""
    check_repo_id(repo_id)
    path = Path(folder)
    if not (path / "config.json").is_file():
        raise PushError(f"{path} has no config.json: save the model first (hf_ot.save_model or save_pretrained).")
    files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not any(f.endswith(".safetensors") for f in files):
        raise PushError(f"{path} has no .safetensors weights.")
    if not any(f.endswith(".py") for f in files):
        raise PushError(f"{path} has no model code (*.py): it would not load with trust_remote_code.")
    message = commit_message or f"Upload OT-Transformer ({len(files)} files) with hf_ot"
    return PushPlan(repo_id=repo_id, folder=str(path), files=files, commit_message=message, private=private)

def push_to_hub(folder, repo_id: str, *, commit_message: str | None = None, private: bool = False,
                token: str | None = None, dry_run: bool = False, api: HfApi | None = None) -> PushPlan:
    """Upload a saved OT model folder to the Hub repo `repo_id` (created if needed). The local folder is only read.

    dry_run=True returns the plan without any network access. Without a token or network: PushError with the fix.
    """
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
                          repo_type="model", ignore_patterns=[".*"])
    except Exception as err:  # network, auth, permission: one readable message
        raise PushError(f"Push to {repo_id} failed: {type(err).__name__}: {err}. "
                        f"Check your network and token; {plan.folder} is unchanged.") from err
    return plan
