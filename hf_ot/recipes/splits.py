"""The recipe's tokenized splits with its tokenizer, model and collator, every split checked before training."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from . import data as data_lib
from .build import build_model
from .config import RecipeConfig
from .tokenizer import build_char_tokenizer, build_subword_tokenizer, check_tokenizer_pads, recipe_tokenizer


@dataclass
class TaskRun:
    """What a recipe trains (raw: translation's text pairs, for generation; block_size: a causal LM's)."""

    model: Any
    tokenizer: Any
    train: Any
    validation: Any
    collator: Any
    raw: Any = None
    block_size: int | None = None


def prepare_task(cfg: RecipeConfig, tokenizer=None) -> TaskRun:
    """The task's data, tokenizer (`tokenizer`: a resumed run's) and model, every split checked before training."""
    from transformers import DataCollatorForSeq2Seq, DataCollatorWithPadding, default_data_collator

    task = cfg.task
    if task == "causal-lm":  # (its blocks are checked as they are made: data.lm_datasets)
        tokenizer, train, validation = causal_lm_datasets(cfg, tokenizer=tokenizer)
        model = build_model(cfg.model, task, tokenizer)
        size = check_block_size(cfg.data.block_size, getattr(model.config, "max_position_embeddings", None))
        return TaskRun(model, tokenizer, train, validation, default_data_collator, block_size=size)
    if task == "sequence-classification":
        tokenizer = tokenizer if tokenizer is not None else recipe_tokenizer(cfg.tokenizer, cfg.model)
        check_tokenizer_pads(tokenizer, task)
        train, validation = classification_datasets(cfg, tokenizer)
        model = build_model(cfg.model, task, tokenizer, num_labels=train.features["label"].num_classes)
        if names := data_lib.label_names(train):  # pipelines, the card and the Hub widget show the user's names
            model.config.id2label, model.config.label2id = dict(enumerate(names)), {n: i for i, n in enumerate(names)}
        if model.config.pad_token_id is None:
            model.config.pad_token_id = tokenizer.pad_token_id
        run = TaskRun(model, tokenizer, train, validation, DataCollatorWithPadding(tokenizer))
    else:
        tokenizer, encoded, raw = translation_datasets(cfg, tokenizer)
        check_tokenizer_pads(tokenizer, task)
        model = build_model(cfg.model, task, tokenizer)
        collator = DataCollatorForSeq2Seq(tokenizer, model=model)
        run = TaskRun(model, tokenizer, encoded["train"], encoded["validation"], collator, raw=raw)
    data_lib.check_datasets(run.train, run.validation, task, cfg.data)
    return run


def check_block_size(block_size: int | None, positions: int | None) -> int:
    """data.block_size (default 128) within the model's max_position_embeddings; returns the block size."""
    size = block_size if block_size is not None else 128
    if positions is not None and positions < size:
        raise UsageError(
            f"data.block_size={size}{'' if block_size is not None else ' (the default)'} exceeds the model's "
            f"max_position_embeddings={positions}: lower data.block_size or raise model.scratch.n_positions."
        )
    return size


def causal_lm_datasets(cfg: RecipeConfig, tokenizer=None):
    """(tokenizer, train blocks, validation blocks), as run_clm (a cached map). Default tokenizer: char."""
    splits = data_lib.text_splits(cfg.data)
    if tokenizer is None and (cfg.tokenizer or "char") == "char":
        tokenizer = build_char_tokenizer(data_lib.text_characters(splits))
    elif tokenizer is None:
        tokenizer = recipe_tokenizer(cfg.tokenizer, cfg.model)
    return tokenizer, *data_lib.lm_datasets(cfg.data, tokenizer, splits=splits)


def _limited(ds, data):
    """ds with data.max_train_samples (a seeded random subset) and data.max_eval_samples (the first examples)."""
    for split in ("train", "validation", "test"):
        if split in ds and (limit := data.max_train_samples if split == "train" else data.max_eval_samples):
            chosen = ds[split].shuffle(seed=0) if split == "train" else ds[split]
            if split != "train" and limit < len(chosen):  # examples left unscored: said
                key = "data.max_eval_samples"
                logging.getLogger("hf_ot").warning(
                    f"{split}: scoring {limit} of {len(chosen)} examples ({key}={limit})"
                )
            ds[split] = chosen.select(range(min(len(chosen), limit)))
    return ds


def classification_datasets(cfg: RecipeConfig, tokenizer):
    ds = data_lib.load_classification(cfg.data)
    if (classes := ds["train"].features["label"]).num_classes < 2:  # one output: a regression in transformers
        raise ValueError(
            f"{cfg.data.train_file or cfg.data.dataset}: the labels are one class ({classes.names}): a classifier "
            "needs two classes or more. Give examples of the others, or name every class in data.label_names."
        )
    ids = [] if data_lib.label_names(ds["train"]) or cfg.data.num_labels else [s.unique("label") for s in ds.values()]
    if ids and 0 not in (found := sorted({y for split in ids for y in split})):  # (1..5 stars, 1/2 polarity)
        raise ValueError(
            f"{cfg.data.train_file or cfg.data.dataset}: the integer labels {found[:10]} have no class 0 (labels are "
            f"class ids 0..N-1): class 0 would have no example. Rewrite them as 0..N-1, or set data.num_labels="
            f"{found[-1] + 1} to keep them as ids."
        )
    ds = _limited(ds, cfg.data)
    max_len = int(cfg.data.max_length or 64)
    ds = ds.map(lambda b: tokenizer(b["text"], truncation=True, max_length=max_len), batched=True)
    return ds["train"], ds["validation"]


def translation_datasets(cfg: RecipeConfig, tokenizer=None):
    """(tokenizer, tokenized pairs, the pairs as text). Default tokenizer: bpe, trained on the training pairs."""
    data = cfg.data
    ds = _limited(data_lib.load_translation(data), data)
    if tokenizer is None and (cfg.tokenizer or "bpe") == "bpe":  # trained on the training pairs, read in batches
        pairs = data_lib.iter_texts(ds["train"], ("source", "target"))
        tokenizer = build_subword_tokenizer(pairs, data.vocab_size or 4000)
    elif tokenizer is None:
        tokenizer = recipe_tokenizer(cfg.tokenizer, cfg.model)
    prefix, cut = data.source_prefix or "", dict(truncation=True, max_length=int(data.max_length or 64))
    encode = lambda b: tokenizer([prefix + s for s in b["source"]], text_target=b["target"], **cut)  # labels: targets'
    return tokenizer, ds.map(encode, batched=True), ds
