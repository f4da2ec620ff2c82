"""run_recipe: check, prepare, train with OTTrainer, evaluate, save the model and its card (one process or many)."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import io
import logging
import math
import re
from pathlib import Path
from typing import Any, cast

import torch

from ..checkpoints import read_json
from ..errors import UsageError
from ..run_folders import RESULT_MARKER, check_run_folder, read_run_record, remove_checkpoints, safe_save
from ..scale_out import check_engine_before_running, check_engine_settings
from . import data as data_lib
from .config import TRAINING_DEFAULTS, RecipeConfig, _schema, scratch_config_class
from .evaluate import elasticity_after_training, evaluate_trained, text_metric_names
from .plots import plot_training_curves
from .resume import check_resume_settings, global_batch, load_checkpoint_tokenizer, write_run_record
from .splits import check_block_size, check_same_data, prepare_task


def training_arguments(cfg: RecipeConfig, output_dir: str, is_ot: bool = True):
    """TrainingArguments from the config's `training` section (OTTrainingArguments for OT models)."""
    from ..training import OTTrainingArguments, PlainTrainingArguments

    # lambda is not here: it lives in model.ot.ot_lambda, the model config's; a baseline takes no ot_* argument
    train = {k: v for k, v in cfg.training.items() if is_ot or not k.startswith("ot_")}
    trainer_dir, cpu = str(cfg.trainer_dir(output_dir)), not torch.cuda.is_available()
    defaults = dict(TRAINING_DEFAULTS, output_dir=trainer_dir, use_cpu=cpu)
    if is_ot and train.get("load_best_model_at_end") and not train.get("metric_for_best_model"):
        # eval_loss of an OT model is task loss + lambda * reg: select the best checkpoint on the task loss
        defaults["metric_for_best_model"] = "task_loss"
    return (OTTrainingArguments if is_ot else PlainTrainingArguments)(**{**defaults, **train})


def run_recipe(cfg: RecipeConfig | dict, overwrite: bool = False, resume: bool | str = False) -> dict:
    """Run a recipe end to end and return its results; resume=True / PATH continues from a checkpoint of this run."""
    from ..run_folders import FolderLock
    from ..training import check_training_arguments

    cfg = RecipeConfig.from_dict(cfg if isinstance(cfg, dict) else cfg.to_dict())  # checked, and a copy
    output_dir = str(cfg.resolved_output_dir())  # relative to the cwd
    trainer_dir = str(cfg.trainer_dir(output_dir).expanduser().resolve())
    check_engine_settings(dict(cfg.training))  # DeepSpeed without its package: refused before anything runs
    try:  # TrainingArguments' own checks and hf_ot's (made by OTTrainingArguments, not a baseline's), before the data
        args = training_arguments(cfg, output_dir, cfg.is_ot)
        check_training_arguments(args)
    except ValueError as err:  # its command-line flags (--logging_steps) named as recipe keys (training.*)
        raise UsageError("training: " + re.sub(r"--(\w+)", r"training.\1", str(err))) from None
    _ = args.device  # accelerate's PartialState, set up as Trainer will: which process is the main one
    with contextlib.ExitStack() as locks:
        if args.distributed_state is None or args.distributed_state.is_main_process:  # it holds the run's folders
            locks.enter_context(FolderLock(output_dir, what="hf-ot run"))
            if Path(output_dir) not in (Path(trainer_dir), *Path(trainer_dir).parents):
                locks.enter_context(FolderLock(trainer_dir, what="hf-ot run (its training.output_dir)"))
        return _run_recipe(cfg, args, output_dir, trainer_dir, overwrite, resume)


def _run_recipe(cfg: RecipeConfig, args, output_dir: str, trainer_dir: str, overwrite: bool, resume) -> dict:
    from transformers import set_seed

    from ..checkpoints import TRAINER_STATE
    from ..training import GuardedTrainer, OTTrainer

    checkpoint = check_run_folder(output_dir, trainer_dir, overwrite, resume)  # before anything runs
    settings, saves = cfg.to_dict(), args.save_strategy != "no"  # settings: what a later --resume compares
    # the data's fingerprint (files hashed) is needed only by runs that save checkpoints or resume one
    data_fp = data_lib.data_fingerprint(cfg.data) if checkpoint or saves else {}
    # a resumed run is the same run: its settings and data as saved with it, its tokenizer from the checkpoint
    defaults = {f"training.{k}": key.default for k, key in _schema()["training"].children.items()}  # type: ignore[union-attr]
    batch = global_batch(args)  # (processes x per device x accumulation: kept by a resume)
    record = check_resume_settings(checkpoint, settings, data_fp, defaults, batch) if checkpoint else None
    saved_tokenizer = load_checkpoint_tokenizer(checkpoint, record) if checkpoint else None
    state = read_json(Path(checkpoint, TRAINER_STATE)) if checkpoint else None
    # past max_steps Trainer trains nothing, silently (at it, a resume still evaluates and saves a finished run)
    if state and 0 < args.max_steps < int(state.get("global_step") or 0):
        raise UsageError(
            f"--resume: {checkpoint} is at step {state['global_step']}, past training.max_steps={args.max_steps}: "
            "nothing is left to train. Raise training.max_steps, or start over with --overwrite."
        )
    check_before_data(cfg, args)  # what can fail without the data fails now
    set_seed(int(cfg.training.get("seed", 1337)))  # the same initial weights on every process
    if args.process_index == 0:  # what the run runs on, logged once: processes and the global batch
        logging.getLogger("hf_ot").warning(
            f"training on {batch['world_size']} process(es) ({args.device}): global batch {batch['global_batch']} = "
            f"{batch['per_device']} per device x {batch['world_size']} processes x {batch['accumulation']} "
            "accumulation steps"
        )
    with args.main_process_first(desc="data preparation"):  # the main process prepares (and caches) the data first
        run = prepare_task(cfg, saved_tokenizer)  # data, tokenizer, model: all checked before any training
    check_same_data(cfg, run, args.distributed_state)  # every process's data alike, before any collective of training
    splits = dict(train_dataset=run.train, eval_dataset=run.validation, data_collator=run.collator)
    trainer = (OTTrainer if cfg.is_ot else GuardedTrainer)(run.model, args, processing_class=run.tokenizer, **splits)
    if overwrite and trainer.is_world_process_zero():  # the old run's checkpoints must not be resumed later
        remove_checkpoints(args.output_dir)
    if saves and trainer.is_world_process_zero() and (not checkpoint or read_run_record(args.output_dir) is None):
        # the checkpoint folder is this run's: what a later --resume must find unchanged
        write_run_record(args.output_dir, output_dir, settings, data_fp, run.tokenizer, batch)
    trainer.accelerator.wait_for_everyone()
    trained = trainer.train(resume_from_checkpoint=checkpoint)
    history = list(trainer.state.log_history)  # training's own log, before the evaluation adds to it
    results = {"task": cfg.task, "ot": cfg.model.ot, "parameters": run.model.num_parameters()}
    if direction := getattr(run.raw, "direction", None):  # translation: source -> target (on the card too)
        results["translation"] = direction
    results["train_runtime_s"] = trained.metrics["train_runtime"]
    if run.block_size is not None:  # `hf-ot evaluate` of the saved model evaluates at this block size unless told
        results["block_size"] = run.block_size
    results.update(evaluate_trained(cfg, trainer, run.tokenizer, run.validation, run.raw))
    elasticity = elasticity_after_training(cfg, trainer, run.tokenizer)
    if elasticity is not None:
        results["elasticity"] = elasticity.to_dict()
    if trainer.is_world_process_zero():
        save_run(cfg, trainer, run.tokenizer, results, history, Path(output_dir), elasticity)
    trainer.accelerator.wait_for_everyone()
    return results


def check_before_data(cfg: RecipeConfig, args) -> None:
    """The checks that need no data: text metrics (their packages), logging backends, block size, FSDP."""
    from transformers.integrations import get_reporting_integration_callbacks

    from ..run_folders import local_or_hub

    text_metric_names(cfg)  # a classifier's too, and the default ones: else a run would fail (or skip one) once trained
    for key, name in (("model.base", cfg.model.base), ("tokenizer", cfg.tokenizer)):  # a file or a mistyped folder
        if isinstance(name, str) and name not in ("minilm", "char", "bpe"):
            local_or_hub(name, key, model=key == "model.base")
    try:  # each report_to backend's callback can be built: an unknown name (ValueError), or its package missing
        for callback in get_reporting_integration_callbacks(args.report_to):
            callback()
    except (ValueError, RuntimeError, ImportError) as err:
        raise UsageError(f"training.report_to={args.report_to}: {err}") from None
    if cfg.task == "causal-lm":  # the model's positions, read before any data (None: from the Hub, checked once built)
        try:
            if cfg.model.base:
                values = read_json(Path(str(cfg.model.base)).expanduser() / "config.json", "Give a model folder.")
                positions = values.get("max_position_embeddings") or values.get("n_positions")  # (GPT-2's name)
            else:
                scratch = dict(cfg.model.scratch or {})
                positions = scratch_config_class(str(scratch.pop("family", None)))(**scratch).max_position_embeddings
        except Exception:  # no local config, or a bad field: named by build_model, as before
            positions = None
        check_block_size(cfg.data.block_size, positions if isinstance(positions, int) else None)
    check_engine_before_running(args)


def save_run(cfg: RecipeConfig, trainer, tokenizer, results: dict, history: list, out: Path, elasticity=None) -> None:
    """The model and card, results.json, log_history.json and the curves, swapped into OUT in one step."""
    from ..cards import eval_results_of
    from ..hub import save_model
    from ..run_folders import save_id_of

    out.mkdir(parents=True, exist_ok=True)
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    data = card_data(cfg)  # the card's model-index entries: finite numbers; a causal LM's text metrics teacher-forced
    finite = {k: v for k, v in results.items() if isinstance(v, (int, float)) and math.isfinite(v)}
    forced = " (teacher-forced next token)" if cfg.task == "causal-lm" else ""
    evals = eval_results_of(finite, cfg.task, data["name"], data["type"], dataset_config=cfg.data.dataset_config) or []
    tag = lambda r: r if r.metric_type == "perplexity" else dataclasses.replace(r, metric_name=r.metric_name + forced)

    def save(folder):
        if not cfg.is_ot:  # a plain baseline
            unwrapped.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            return
        save_model(
            unwrapped,
            folder,
            tokenizer=tokenizer,
            overwrite=True,
            base_model=cfg.model.base if cfg.model.base not in (None, "minilm") else None,
            datasets=data["datasets"],
            license=cfg.card.license,
            language=cfg.card.language,
            eval_results=[tag(r) for r in evals] or None,
            pipeline_tag="translation" if cfg.task == "translation" else None,
            translation=results.get("translation"),
            training=dict(cfg.training),
        )
        if elasticity is not None:  # the grid on the card; the config keeps the trained setting
            from ..calibration import write_calibration

            write_calibration(folder, elasticity, choose=False)

    # the earlier model (checked by check_run_folder) is replaced only once the new one is complete, in one atomic swap
    # with the results and history that describe it: a kill leaves either pair (the next command finishes the swap)
    results["data"] = data["name"]  # (a baseline has no card: results name what it read)
    results[RESULT_MARKER] = 1  # the proof that a later run (or --result-file) may replace results.json
    pending: dict[str, Any] = {"log_history.json": history, "results.json": results}
    figure = io.BytesIO()  # drawn first (in memory) and swapped in with the model: a committed run is complete
    drawn = plot_training_curves(history, cast(Any, figure), cfg.task)
    if drawn is not None:  # results.json names the figure's hash: the proof a later run may replace it
        results["training_curves_sha256"] = hashlib.sha256(figure.getvalue()).hexdigest()
        pending["training_curves.png"] = figure.getvalue()
    safe_save(save, out / "model", overwrite=True, ot_only=False, pending=pending)
    if drawn is None:  # nothing logged: an earlier run's figure (checked as hf-ot's) must not stay beside these
        (out / "training_curves.png").unlink(missing_ok=True)
    results["model_save_id"] = save_id_of(out / "model")  # as in results.json: the model it describes


def card_data(cfg: RecipeConfig) -> dict:
    """The data the card names ({'name', 'type', 'datasets'}): the card section's, else the data actually read."""
    data, card = cfg.data, cfg.card
    hub = data.kind() == "hub" and not Path(data_lib.resolve_path(str(data.dataset))).exists()  # (else a local folder)
    named = [data.dataset, data.train_file, *(getattr(data, k) for k in data_lib.LINE_KEYS), data.validation_file]
    paths = [Path(str(n).rstrip("/")) for n in named if n]  # a glob with its folder: mine/*.csv, not *.csv
    names = [f"{p.parent.name}/{p.name}" if glob.has_magic(p.name) and p.parent.name else p.name for p in paths]
    if hub:  # the id as given, with its configuration
        names[0] = f"{data.dataset} ({data.dataset_config})" if data.dataset_config else str(data.dataset)
    if data.kind() == "embedded" and cfg.task == "causal-lm":
        names.insert(0, data_lib.EMBEDDED_NAME)
    return dict(
        name=card.dataset_name or ", ".join(dict.fromkeys(names)) or "custom data",
        type=card.dataset_type or (data.dataset if hub else "custom"),
        datasets=card.datasets if card.datasets is not None else [data.dataset] if hub else None,
    )
