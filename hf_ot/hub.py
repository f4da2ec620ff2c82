"""Saving, model cards and pushing OT models to the Hub (huggingface_hub does the work)."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData, get_token

from .registry import TASK_AUTO_CLASSES, family_of

PIPELINE_TAGS = {
    "causal-lm": "text-generation",
    "masked-lm": "fill-mask",
    "seq2seq-lm": "text2text-generation",
    "sequence-classification": "text-classification",
    "token-classification": "token-classification",
    "base": "feature-extraction",
}


class PushError(RuntimeError):
    """A push that could not happen; the message says why and what to do."""


def safe_save(save, out_dir, overwrite: bool = False) -> Path:
    """Run save(tmp_dir) beside out_dir and move the result into place only once complete: a failure loses nothing.

    An existing non-empty out_dir is refused unless overwrite=True; it is replaced only after the new save succeeded.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} exists and is not a folder.")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ValueError(f"{out} exists and is not empty: choose another folder or pass overwrite=True (--overwrite).")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        save(tmp)
        if out.exists():
            backup = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            backup.rmdir()
            out.rename(backup)
            tmp.rename(out)
            shutil.rmtree(backup)
        else:
            tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def task_of(model) -> str:
    family = family_of(model.config.model_type)
    for task, cls in family.tasks.items():
        if isinstance(model, cls):
            return task
    return "base"


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
) -> ModelCard:
    """The model card: Hub metadata (validated by huggingface_hub) plus OT settings, size, results, how to load."""
    cfg = model.config
    task = task_of(model)
    family = family_of(cfg.model_type)
    name = repo_id or f"ot-{family.base_model_type}"
    metrics = sorted({r.metric_type for r in eval_results or []}) or None
    card_data = ModelCardData(
        library_name="transformers",
        base_model=base_model,
        datasets=datasets,
        metrics=metrics,
        license=license,
        language=language,
        pipeline_tag=PIPELINE_TAGS[task],
        tags=["hf_ot", "ot-transformer", "optimal-transport", "continuous-depth", family.base_model_type,
              "custom_code"],
        model_name=name,
        eval_results=eval_results or None,
    )
    steps, time = cfg.ot_steps_and_time("encoder")
    dec_steps, dec_time = cfg.ot_steps_and_time("decoder")
    template = resources.files("hf_ot.model_cards").joinpath("ot_model_card.md").read_text()
    card = ModelCard.from_template(
        card_data,
        template_str=template,
        model_name=name,
        repo_id=repo_id or "path/to/folder",
        base_model=base_model,
        family=family.base_model_type.upper(),
        architecture=type(model).__name__,
        model_type=cfg.model_type,
        mode=cfg.ot_mode,
        solver=cfg.ot_solver,
        steps=steps,
        time=time,
        reg_lambda=cfg.ot_lambda,
        decoder_steps=dec_steps if cfg.is_encoder_decoder else None,
        decoder_time=dec_time,
        parameters=f"{model.num_parameters():,}",
        auto_class=TASK_AUTO_CLASSES[task].__name__,
        training=training,
        results=eval_results,
    )
    ModelCard(str(card))  # re-parse the rendered text: raises on malformed YAML metadata
    return card


def save_model(model, output_dir, *, tokenizer=None, card: ModelCard | None = None, overwrite: bool = False,
               **card_kwargs) -> Path:
    """Write a folder complete on its own: config with auto_map, safetensors, the model code, the generation config,
    the tokenizer when given and README.md (the model card). Written beside output_dir, then moved into place."""

    def save(folder):
        model.save_pretrained(folder)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
        (card or render_model_card(model, **card_kwargs)).save(Path(folder) / "README.md")

    return safe_save(save, output_dir, overwrite=overwrite)


@dataclass
class PushPlan:
    repo_id: str
    folder: str
    files: list[str] = field(default_factory=list)
    commit_message: str = ""
    private: bool = False


def plan_push(folder, repo_id: str, commit_message: str | None = None, private: bool = False) -> PushPlan:
    """What a push would upload, where, with which commit message; checks the folder is a loadable OT model."""
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
