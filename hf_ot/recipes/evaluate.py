"""A recipe task's evaluation after training and of saved models (clean or noisy). Perplexity is of the task loss,
never eval_loss (task + lambda * reg); teacher-forced BLEU / ROUGE are labelled so (docs/training.md, Metrics)."""

from __future__ import annotations

import glob
import logging
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from .. import metrics as ev
from ..errors import UsageError
from ..run_folders import check_no_live_run, check_outputs_replaceable, check_writable, write_json, writing_outputs
from .config import DataSection, RecipeConfig, _given, load_config
from .plots import plot_xy

TEACHER_FORCED = (
    "teacher-forced: the argmax next token given the true prefix (official evaluate.py); it rewards "
    "copying the input, it does not score generated text"
)
ROBUSTNESS_FILES = ("robustness.json", "robustness.png")  # what robustness writes into its folder
# each task's headline number in results (after training and of a saved model), and its axis label in plots
TASK_METRIC = {
    "causal-lm": ("loss", "validation loss (teacher-forced CE)"),
    "sequence-classification": ("accuracy", "validation accuracy"),
    "translation": ("bleu", "validation BLEU (generated text)"),
}


def text_metric_names(config: RecipeConfig, metrics=None) -> tuple[str, ...]:
    """The text metrics to compute (evaluation.metrics, default BLEU and ROUGE), checked; a classifier computes none."""
    default = () if config.task == "sequence-classification" else ("bleu", "rouge")
    names = tuple(ev.check_metric_names(_given(metrics, _given(config.evaluation.metrics, default))))
    return () if config.task == "sequence-classification" else names


# The caps on the evaluation data, per task. The validation during and after training reads the recipe's (documented
# there: generate_samples default 100); `hf-ot evaluate` and `calibrate` score all of it unless their command line
# sets one (--set KEY=N). Every cut that leaves data unscored is said on the console and in the results (scored, of).
EVAL_CAPS = {
    "causal-lm": ("data.max_eval_blocks", "evaluation.max_batches"),
    "sequence-classification": ("data.max_eval_samples", "evaluation.max_batches"),
    "translation": ("data.max_eval_samples", "evaluation.generate_samples"),
}
UNITS = {"causal-lm": "blocks", "sequence-classification": "examples", "translation": "sentences"}


def eval_caps(config: RecipeConfig, told=None) -> dict[str, int]:
    """{cap key: examples it leaves} for the task: the recipe's (told=None), else only those in `told` (--set)."""
    out = {}
    for key in EVAL_CAPS[config.task]:
        section, name = key.split(".")
        value = getattr(getattr(config, section), name)
        if key == "evaluation.generate_samples" and told is None:
            value = _given(value, 100)  # (training's default)
        if value is not None and (told is None or key in told):
            out[f"{key}={value}"] = int(value) * (
                int(_given(config.evaluation.batch_size, 16)) if "batches" in key else 1
            )
    return out


def told_caps(overrides) -> set[str]:
    """The keys set on the command line (--set KEY=VALUE)."""
    return {str(o).partition("=")[0].strip() for o in overrides or ()}


def _capped(total: int, caps: dict[str, int], task: str, what: str) -> tuple[int, dict]:
    """(examples scored, {"scored", "of", "cap"}): the tightest cap; a cut leaving data unscored said on the console."""
    scored, cap = total, None
    for name, limit in caps.items():
        if limit < scored:
            scored, cap = limit, name
    coverage: dict[str, Any] = {"scored": scored, "of": total}
    if cap:
        coverage["cap"] = cap
        logging.getLogger("hf_ot").warning(
            f"{what}: scoring {scored} of {total} {UNITS[task]} ({cap}; --set {cap.partition('=')[0]}=null: all)"
        )
    return scored, coverage


def eval_data(
    config: RecipeConfig, tokenizer, block_size: int | None = None, label_names=None, raw=None, caps=None, what=""
) -> tuple[Any, dict]:
    """(the validation data as _task_metrics takes it, {"scored", "of", "cap"}): cut to `caps` (eval_caps; None: the
    recipe's), translation of the `raw` split when given."""
    from .data import load_translation

    caps = eval_caps(config) if caps is None else caps
    what = what or "evaluation"
    if config.task == "causal-lm":
        blocks = lm_eval_dataset(config, tokenizer, block_size, limit=False)
        n, coverage = _capped(len(blocks), caps, config.task, what)
        return blocks.select(range(n)), coverage
    if config.task == "sequence-classification":
        ids, special, labels = classification_eval_set(config, tokenizer, label_names, limit=False)
        n, coverage = _capped(len(labels), caps, config.task, what)
        return (ids[:n], special[:n], labels[:n]), coverage
    raw = evaluation_split(load_translation, config.data) if raw is None else raw
    n, coverage = _capped(len(raw), caps, config.task, what)
    prefix = _given(config.data.source_prefix, "")
    return ([prefix + s for s in raw["source"][:n]], list(raw["target"][:n])), coverage


def check_distinct(items, what: str, flag: str) -> None:
    """A point given twice (a sweep's seed or value, a noise rate) would run and count twice: refused, naming it."""
    items = list(items)
    for i, item in enumerate(items):  # 1 and 1.0, or 1 and "1", are one point; True and 1 are two
        if same := [s for s in items[:i] if str(s) == str(item) or s == item and bool not in (type(s), type(item))]:
            raise UsageError(
                f"{flag}: the {what} {item!r} is given more than once (as {same[0]!r}): each run needs its own "
                f"point. Give each {what} once."
            )


def evaluate_trained(config: RecipeConfig, trainer, tokenizer, eval_ds, raw=None) -> dict[str, Any]:
    """A trained run's task loss, reg and task metrics (`raw`: translation's splits); same results on every process."""
    metrics = trainer.evaluate()
    out: dict[str, Any] = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    if "eval_task_loss" in out and config.task in ("causal-lm", "translation"):  # a per-token cross-entropy
        out["eval_perplexity"] = math.exp(min(out["eval_task_loss"], 700.0))  # from the task loss, not eval_loss
    if config.task == "sequence-classification":  # the trainer's own sharded pass (ZeRO-3 / FSDP: gathered weights)
        pred = trainer.predict(eval_ds)
        accuracy = ev.accuracy(torch.as_tensor(pred.predictions), pred.label_ids)
        return {**out, "eval_samples": len(pred.label_ids), "accuracy": accuracy}
    accelerator, names = trainer.accelerator, text_metric_names(config)
    model = accelerator.unwrap_model(trainer.model)
    if config.task == "causal-lm":  # (its validation blocks already cut to data.max_eval_blocks)
        caps = {k: v for k, v in eval_caps(config).items() if "max_batches" in k}
        n, coverage = _capped(len(eval_ds), caps, config.task, "validation text metrics")
        data = eval_ds.select(range(n))
    else:  # (translation: the pairs already cut to data.max_eval_samples)
        caps = {k: v for k, v in eval_caps(config).items() if "generate_samples" in k}
        data, coverage = eval_data(config, tokenizer, raw=raw["validation"], caps=caps, what="validation BLEU / ROUGE")
    run = _task_metrics(config, model, tokenizer, data, names, accelerator)
    out |= {
        "scored": coverage["scored"],
        "of": coverage["of"],
        **({"cap": coverage["cap"]} if "cap" in coverage else {}),
    }
    if config.task == "translation":
        beams = int(_given(config.evaluation.num_beams, 1))
        out["text_metrics_protocol"] = f"generated (greedy / {beams} beams) vs references"
        if "test" in raw:  # test pairs given (data.test_source, a test split): scored as the validation ones, test_*
            test, tested = eval_data(config, tokenizer, raw=raw["test"], caps=caps, what="test BLEU / ROUGE")
            scores = _task_metrics(config, model, tokenizer, test, names, accelerator)
            out |= {f"test_{k}": v for k, v in {**scores, **tested}.items() if k != "examples"}
    elif names:
        out["text_metrics_protocol"] = TEACHER_FORCED
    return {**out, "eval_samples": run.pop("samples"), **run}


def _task_metrics(config: RecipeConfig, model, tokenizer, data, names, accelerator, rate: float = 0.0) -> dict:
    """The task's metrics of `model` on eval_data's `data`, a fraction `rate` of the input tokens replaced."""
    spec = config.evaluation
    batch_size = int(_given(spec.batch_size, 16))
    ev.prepare_text_metrics(names, accelerator)
    if config.task == "causal-lm":
        res = ev.teacher_forced_lm(
            model, data, tokenizer, batch_size, rate, accelerator=accelerator
        )  # (cut: eval_data)
        out = {k: v for k, v in vars(res).items() if k not in ("predictions", "references")}  # loss, perplexity, ...
        return {**out, **ev.text_metrics(res.predictions, res.references, names, accelerator=accelerator)}
    if config.task == "sequence-classification":
        ids, special, labels = data  # (noisy_ids returns the ids themselves at rate 0)
        noisy = ev.noisy_ids(ids, special, rate, model.config.vocab_size)
        logits = ev.predict(model, tokenizer, noisy, batch_size, accelerator=accelerator)
        return {"samples": len(labels), "accuracy": ev.accuracy(logits, labels)}
    sources, refs = data
    greedy: dict[str, Any] = dict(do_sample=False, num_beams=int(_given(spec.num_beams, 1)))
    greedy["max_new_tokens"] = int(_given(spec.max_new_tokens, 48))
    greedy["max_length"] = int(_given(config.data.max_length, 64))  # the sources' cut in training (splits.py)
    hyps = ev.generate_texts(model, tokenizer, sources, batch_size, rate, accelerator=accelerator, **greedy)
    examples = [dict(source=s, prediction=h, reference=r) for s, r, h in zip(sources, refs, hyps)][:3]
    return {"samples": len(hyps), **ev.text_metrics(hyps, refs, names, accelerator=accelerator), "examples": examples}


def elasticity_after_training(config: RecipeConfig, trainer, tokenizer):
    """evaluation.elasticity: the trained OT model's calibrate grid (its setting kept); None when not asked for."""
    from ..calibration import calibrate

    if not (config.is_ot and config.evaluation.elasticity):
        return None
    accelerator, spec = trainer.accelerator, config.evaluation
    model = accelerator.unwrap_model(trainer.model)
    batches, metric, _ = calibration_batches(config, tokenizer, spec.max_batches, None, model_label_names(model))
    return calibrate(model, batches, metric=metric, max_steps=spec.elasticity_max_steps, accelerator=accelerator)


def load_for_eval(folder: str, trust_remote_code: bool = False, task: str | None = None, ot_only: str | None = None):
    """A saved model (for `task`, else as its config says) and its tokenizer; its own code runs only if trusted.
    `ot_only`: what needs an hf_ot OT model, refused for another before anything loads. Config, tokenizer and
    weights come from one save of the folder, also while another process replaces it (read_one_save)."""
    from ..run_folders import read_one_save

    return read_one_save(folder, lambda: _load_for_eval(folder, trust_remote_code, task, ot_only))


def _load_for_eval(folder: str, trust_remote_code: bool, task: str | None, ot_only: str | None):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

    from ..checkpoints import check_model_files
    from ..tokenizers import load_tokenizer
    from .tokenizer import check_tokenizer_pads

    check_model_files(folder)  # a corrupt config, an auto_map out of the folder, a cut-short shard: named first
    config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    heads = " ".join(config.architectures or ())  # the task the model was saved for, where its class says it
    if ot_only and not hasattr(config, "ot_num_steps"):
        raise UsageError(f"{ot_only}; {heads or config.model_type} in {folder} is not one.")
    kinds = {"SequenceClassification": "sequence-classification", "CausalLM": "causal-lm", "LMHead": "causal-lm"}
    saved = "translation" if config.is_encoder_decoder else next((t for k, t in kinds.items() if k in heads), None)
    if task is not None and saved is not None and task != saved:  # another head would be a random new one
        raise UsageError(
            f"{folder} holds a {saved} model ({heads}), but the recipe's task is {task}: evaluate it with a {saved} "
            "recipe (--config), or give the model of this task."
        )
    autos = {"causal-lm": AutoModelForCausalLM, "translation": AutoModelForSeq2SeqLM}
    auto = autos.get(task or saved or "causal-lm", AutoModelForSequenceClassification)  # (or a classifier)
    tokenizer = load_tokenizer(
        folder, vocab_size=getattr(config, "vocab_size", None), trust_remote_code=trust_remote_code
    )
    if (kind := task or saved) in ("translation", "sequence-classification"):  # their batches are padded
        check_tokenizer_pads(tokenizer, str(kind), folder)
    model = auto.from_pretrained(folder, trust_remote_code=trust_remote_code).eval()
    return model, tokenizer


def eval_block_size(config: RecipeConfig, model, folder: str, overrides=None) -> int:
    """A saved causal LM's block size: --set data.block_size, else its run's (results.json), else the recipe's."""
    from ..checkpoints import read_json

    positions = getattr(model.config, "max_position_embeddings", None)
    size, run_results = config.data.block_size, Path(folder).expanduser().parent / "results.json"
    if any(str(o).partition("=")[0].strip() == "data.block_size" for o in overrides or ()):  # told (--set)
        if positions is not None and size is not None and size > positions:
            raise UsageError(
                f"data.block_size={size} is longer than the model's {positions} positions "
                f"(max_position_embeddings): evaluate with data.block_size <= {positions}."
            )
    elif run_results.is_file():
        saved = read_json(run_results, obj=False)  # None when unreadable
        size = saved.get("block_size", size or 128) if isinstance(saved, dict) else None
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise UsageError(
                f"{run_results} beside the model holds no hf-ot run's block size (got {str(saved)[:60]!r}): pass "
                "--set data.block_size=N, or move that file away."
            )
    size = int(_given(size, 128))
    return min(size, positions) if positions is not None else size


def lm_eval_dataset(config: RecipeConfig, tokenizer, block_size: int | None = None, limit: bool = True):
    """The recipe's validation blocks (only: the training text is not tokenized), tokenized with `tokenizer`; at most
    data.max_eval_blocks of them unless `limit` is False."""
    from datasets import Dataset, IterableDataset

    from .data import check_datasets, lm_blocks, text_splits
    from .tokenizer import warn_unknown_characters

    data = config.data
    size = int(_given(block_size, _given(data.block_size, 128)))
    splits = text_splits(data)
    if not isinstance(splits["validation"], IterableDataset):  # (a stream is read once)
        warn_unknown_characters(tokenizer, splits["validation"])
    blocks = lm_blocks(
        splits["validation"],
        tokenizer,
        size,
        data.stride,
        num_proc=data.num_proc,
        limit=data.max_eval_blocks if limit else None,
    )
    check_datasets(None, blocks, data=replace(data, block_size=size), texts=splits, tokenizer=tokenizer)
    return Dataset.from_list(list(blocks)) if isinstance(blocks, IterableDataset) else blocks


def model_label_names(model) -> list[str] | None:
    """The class names a classifier was trained with, in id order (None: transformers' default LABEL_i names)."""
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    return None if names == [f"LABEL_{i}" for i in range(len(names))] else names


def evaluation_split(load, data: DataSection, label_names: list | None = None):
    """The validation split of `load` (a data reader), never reading the training files (seconds on every process)."""
    from .data import data_source, is_offline_copy

    paired = bool(data.train_source and data.validation_source) and not data.validation_file  # (given: it alone)
    if paired:
        source, target = data.validation_source, data.validation_target  # (the recipe's test files: not read)
        data = replace(data, train_source=source, train_target=target, test_source=None, test_target=None)
    elif label_names and not data.label_names:
        data = replace(data, label_names=label_names)  # a classifier's known class names fix the label ids
    if paired or not data.validation_file or is_offline_copy(data.validation_file):  # (a file of one's own: as it is)
        data = data_source(data)  # a packaged recipe's offline copy, or its Hub dataset
    if not paired and data.validation_file:
        from datasets.data_files import get_data_patterns

        from .data import LINE_KEYS, data_files, resolve_path, validation_split_of

        data_files(data.validation_file, "data.validation_file")  # a missing one named by its own key
        folder = resolve_path(data.validation_file)  # a folder's files split by name, read as training reads them
        patterns = get_data_patterns(glob.escape(folder)) if Path(folder).is_dir() else []
        split = validation_split_of([str(s) for s in patterns])
        lines = dict.fromkeys(LINE_KEYS)
        data = replace(data, train_file=data.validation_file, train_split=split, dataset=None, source=None, **lines)
    try:
        return load(data)["validation"]
    except ValueError as err:  # read as the reader's train split: named as the evaluation data
        if data.validation_file:
            text = str(err).replace("train split (", "evaluation data (").replace("(train split)", "(evaluation data)")
            err.args = (text, *err.args[1:])
        raise


def classification_eval_set(config: RecipeConfig, tokenizer, label_names=None, limit=True) -> tuple[list, list, list]:
    """The validation sentences tokenized, their special-token masks and labels (ids in `label_names`' order); the
    first data.max_eval_samples unless `limit` is False."""
    from .data import UnknownLabels, load_classification
    from .data import label_names as names_of

    data = config.data
    if label_names and data.label_names is not None and list(data.label_names) != list(label_names):
        raise UsageError(  # the model's ids are its classes: another order would compare other classes
            f"data.label_names={list(data.label_names)} disagrees with the model's classes {list(label_names)} (its "
            "id2label): drop data.label_names, the model's order is used."
        )
    try:
        val = evaluation_split(load_classification, data, label_names)
    except UnknownLabels as err:  # the classes are the model's: data.label_names cannot add one
        if not label_names:
            raise
        raise UsageError(
            f"{err.file} (the evaluation data): labels {err.labels[:5]} are not classes of the model, which has "
            f"{list(label_names)} (its id2label; ids 0..{len(label_names) - 1}). Evaluate on data of those classes."
        ) from None
    if not (label_names or data.label_names) and (names := names_of(val)) is not None:
        try:  # class names whose order the training labels set (sorted over every split): read those too
            val = load_classification(data)["validation"]
        except (ValueError, OSError) as err:  # (a recipe's training data beside a validation file of yours)
            raise UsageError(
                f"{data.validation_file or data.train_file}: labels {names[:5]} are class names, but the model's "
                "classes have no names (id2label LABEL_0, ...): their ids follow the training data's labels, which "
                f"could not be read ({err}). Write them as its class ids 0..N-1, or name its classes in id order in "
                "data.label_names."
            ) from None
    val = val.select(range(min(len(val), limit and data.max_eval_samples or len(val))))
    enc = tokenizer(
        list(val["text"]), truncation=True, max_length=int(_given(data.max_length, 64)), return_special_tokens_mask=True
    )
    return enc["input_ids"], enc["special_tokens_mask"], list(val["label"])


def check_model_classes(cfg: RecipeConfig, model, labels) -> None:
    """Label ids the classifier has no class for (unnamed classes: nothing checked them) refused, naming the file."""
    if bad := sorted({int(y) for y in labels if y >= model.config.num_labels}):
        file = cfg.data.validation_file or cfg.data.train_file or "the evaluation data"
        raise UsageError(
            f"{file}: labels {bad[:5]} are not classes of the model, which has {model.config.num_labels} (ids 0.."
            f"{model.config.num_labels - 1}). Evaluate on data of those classes."
        )


def evaluate_folder(
    folder: str,
    config: str | RecipeConfig,
    overrides=None,
    noise_rates=(),
    metrics=None,
    accelerator=None,
    trust_remote_code: bool = False,
    ot_num_steps: int | None = None,
    ot_solver: str | None = None,
) -> dict[str, Any]:
    """A saved model's task metrics on the recipe's validation data, clean and at each noise rate (with its drop)."""
    from ..calibration import _apply

    cfg = config if isinstance(config, RecipeConfig) else load_config(config, overrides)
    names = text_metric_names(cfg, metrics)  # before any model is loaded
    rates = [ev.check_noise_rate(r) for r in noise_rates]
    check_distinct(rates, "rate", "--noise")
    other_setting = ot_num_steps is not None or ot_solver is not None
    ot_only = "--ot-num-steps / --ot-solver apply to hf_ot OT models" if other_setting else None
    model, tokenizer = load_for_eval(folder, trust_remote_code, task=cfg.task, ot_only=ot_only)
    if other_setting:  # an OT model at another M (both stacks) or solver
        settings = model.config
        decoder = getattr(settings, "ot_decoder_num_steps", None)  # a decoder's own M, where set, follows ot_num_steps
        m = _given(ot_num_steps, settings.ot_num_steps)
        decoder = decoder if decoder is None or ot_num_steps is None else m
        _apply(settings, m, _given(ot_solver, settings.ot_solver), decoder)
    accelerator = accelerator or ev.launch_accelerator()
    model.to(accelerator.device)
    results: dict[str, Any] = {"model": folder, "task": cfg.task, "runs": []}
    if names:
        results["text_metrics_protocol"] = TEACHER_FORCED if cfg.task == "causal-lm" else "generated text vs references"
    if hasattr(model.config, "ot_num_steps"):
        results.update(num_steps=model.config.ot_num_steps, solver=model.config.ot_solver)
    if cfg.task == "causal-lm":
        results["block_size"] = eval_block_size(cfg, model, folder, overrides)
    caps = eval_caps(cfg, told_caps(overrides))  # all the data unless the command line cuts it
    data, coverage = eval_data(cfg, tokenizer, results.get("block_size"), model_label_names(model), caps=caps)
    results |= coverage
    if cfg.task == "sequence-classification":
        check_model_classes(cfg, model, data[2])
    for rate in (0.0, *[r for r in rates if r > 0]):
        run = {"noise_rate": rate, **_task_metrics(cfg, model, tokenizer, data, names, accelerator, rate)}
        run.pop("examples", None)
        if rate:  # the drop from the clean run, the first
            numbers = [k for k, v in run.items() if k not in ("noise_rate", "samples") and isinstance(v, (int, float))]
            run["drop"] = {k: run[k] - results["runs"][0][k] for k in numbers}
        results["runs"].append(run)
    return results


def robustness(
    models: dict[str, str],
    config: str | RecipeConfig,
    rates,
    overrides=None,
    out_dir="runs/robustness",
    trust_remote_code: bool = False,
    accelerator=None,
) -> dict[str, list]:
    """Saved models under test-time token noise: OUT/robustness.json and the task's metric in robustness.png."""
    out = Path(out_dir)
    check_outputs_replaceable(out, ROBUSTNESS_FILES)  # before any model is evaluated: never a file hf-ot did not write
    cfg = config if isinstance(config, RecipeConfig) else load_config(config, overrides)
    accelerator = accelerator or ev.launch_accelerator()
    key, label = TASK_METRIC[cfg.task]  # loss (no text metrics needed), accuracy, BLEU of generated text
    metrics = ("bleu",) if key == "bleu" else ()
    options = dict(metrics=metrics, accelerator=accelerator, trust_remote_code=trust_remote_code)
    table = {name: evaluate_folder(folder, cfg, overrides, rates, **options)["runs"] for name, folder in models.items()}

    def write() -> None:
        out.mkdir(parents=True, exist_ok=True)
        with writing_outputs(out, ROBUSTNESS_FILES):
            write_json(out / "robustness.json", table, indent=1)
            series = {name: [(r["noise_rate"], r[key], 0.0) for r in runs] for name, runs in table.items()}
            xlabel = "fraction of input tokens replaced"
            plot_xy(series, out / "robustness.png", xlabel, label, "robustness to test-time noise")

    ev.on_one_process(write, accelerator, 0)  # the main process writes; its error stops every process
    return table


def calibration_batches(
    config: RecipeConfig, tokenizer, max_batches=None, block_size=None, label_names: list | None = None, caps=None
) -> tuple[list[dict], str, dict]:
    """The recipe's validation data as batches of model inputs with labels, its task's calibration metric and what of
    the data they hold (eval_data's "scored", "of"; `caps`: eval_data's; max_batches: at most so many batches)."""
    from transformers import DataCollatorForSeq2Seq, DataCollatorWithPadding, default_data_collator

    collate: Any = default_data_collator
    metric = "loss"
    caps = {k: v for k, v in (eval_caps(config) if caps is None else caps).items() if "max_batches" not in k}
    if max_batches is not None:
        caps[f"max_batches={max_batches}"] = max_batches * int(_given(config.evaluation.batch_size, 16))
    data, coverage = eval_data(config, tokenizer, block_size, label_names, caps=caps, what="calibration")
    if config.task == "causal-lm":
        rows = [{"input_ids": b, "labels": b} for b in data["input_ids"]]
    elif config.task == "sequence-classification":
        rows = [{"input_ids": i, "labels": label} for i, _, label in zip(*data)]
        collate, metric = DataCollatorWithPadding(tokenizer), "accuracy"
    else:  # labels padded with -100, as the trainer's collator pads them
        sources, refs = data
        enc = tokenizer(sources, text_target=refs, truncation=True, max_length=int(_given(config.data.max_length, 64)))
        rows = [{"input_ids": i, "labels": t} for i, t in zip(enc["input_ids"], enc["labels"])]
        collate = DataCollatorForSeq2Seq(tokenizer)
    size = int(_given(config.evaluation.batch_size, 16))
    batches = [dict(collate(rows[start : start + size])) for start in range(0, len(rows), size)]
    return batches, metric, coverage


def calibrate_folder(
    folder: str,
    config: str | RecipeConfig,
    overrides=None,
    tolerance: float | None = None,
    write: bool = False,
    max_batches: int | None = None,
    trust_remote_code: bool = False,
    accelerator=None,
    solvers=None,
    max_steps: int | None = None,
) -> dict[str, Any]:
    """hf_ot.calibrate on a saved model and the recipe's validation data (the grid: `solvers`, default the three
    fixed-grid ones, x M' in 1..`max_steps`, default twice the trained M); `write` stores the choice in the folder."""
    from ..calibration import GRID_SOLVERS, calibrate, check_ours_to_write, check_tolerance, write_calibration
    from ..run_folders import save_id_of

    cfg = config if isinstance(config, RecipeConfig) else load_config(config, overrides)
    check_tolerance("accuracy" if cfg.task == "sequence-classification" else "loss", tolerance)  # before loading
    if write and not Path(folder).is_dir():
        raise UsageError(f"--write stores the choice in a local model folder; {folder} is not one (a Hub id?).")
    if write:  # (the folder and the one it is swapped in: refused now, not after the grid)
        check_writable(folder, Path(folder).parent, what=f"--write into {folder}")
        check_no_live_run(folder)
        check_ours_to_write(folder)
    loaded = save_id_of(folder)  # the model the grid measures: --write refuses a folder a save replaced meanwhile
    model, tokenizer = load_for_eval(
        folder, trust_remote_code, task=cfg.task, ot_only="calibrate applies to hf_ot OT models"
    )
    block_size = eval_block_size(cfg, model, folder, overrides) if cfg.task == "causal-lm" else None
    batches, metric, coverage = calibration_batches(cfg, tokenizer, max_batches, block_size, model_label_names(model))
    if cfg.task == "sequence-classification":
        check_model_classes(cfg, model, [y for batch in batches for y in batch["labels"].tolist()])
    accelerator = accelerator or ev.launch_accelerator()
    model.to(accelerator.device)
    result = calibrate(
        model,
        batches,
        metric=metric,
        tolerance=tolerance,
        accelerator=accelerator,
        max_steps=max_steps,
        solvers=solvers or GRID_SOLVERS,
    )
    out: dict[str, Any] = {"model": folder, "task": cfg.task, **coverage, **result.to_dict()}
    if write:
        out["written"] = ev.on_one_process(lambda: write_calibration(folder, result, save_id=loaded), accelerator, 0)
    return out
