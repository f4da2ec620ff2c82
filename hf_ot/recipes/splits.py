"""The recipe's tokenized splits with its tokenizer, model and collator, every split checked before training."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

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
        tokenizer = tokenizer if tokenizer is not None else recipe_tokenizer(cfg.tokenizer, cfg.model, task)
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


def check_same_data(cfg: RecipeConfig, run: TaskRun, state) -> None:
    """Training on several processes (`state`: accelerate's PartialState): every process's settings, data files (by
    content), tokenizer and tokenized splits alike, else a UsageError on every process naming what differs, before
    training's first collective (unequal batches would wait in one until the backend's timeout)."""
    import json

    import pyarrow.compute as pc

    from ..metrics import check_same_work, digest

    def blocks(ds, rows: slice = slice(None)) -> str | int:  # the tokenized rows' ids (and labels), by content
        if not hasattr(ds, "with_format") or not hasattr(ds, "__len__"):
            return "a stream"
        table = ds.with_format("arrow")[rows]
        columns = [c for c in ("input_ids", "labels", "label") if c in table.column_names]
        flat = [pc.list_flatten(table[c]) if str(table[c].type).startswith("list") else table[c] for c in columns]
        return digest([len(ds), *(torch.from_numpy(f.to_numpy(zero_copy_only=False).copy()) for f in flat)])

    if getattr(state, "num_processes", 1) == 1:
        return
    files = {
        key: [(d.get("bytes"), d.get("sha256")) for d in (found if isinstance(found, list) else [found])]
        for key, found in data_lib.data_fingerprint(cfg.data).items()  # (content, not paths: node-local copies)
    }
    settings = json.dumps(cfg.to_dict(), sort_keys=True, default=str)
    edges = slice(None) if not hasattr(run.train, "__len__") or len(run.train) <= 2000 else slice(0, 1000)
    check_same_work(
        state,
        "training",
        settings=digest(settings),
        data_files=digest(files),
        tokenizer=digest(sorted(run.tokenizer.get_vocab().items())),
        train_rows=len(run.train) if hasattr(run.train, "__len__") else "a stream",
        train_blocks=blocks(run.train, edges),
        validation_blocks=blocks(run.validation),
    )


def check_block_size(block_size: int | None, positions: int | None) -> int:
    """data.block_size (default 128) within the model's max_position_embeddings; returns the block size."""
    size = block_size if block_size is not None else 128
    if positions is not None and positions < size:
        raise UsageError(
            f"data.block_size={size}{'' if block_size is not None else ' (the default)'} exceeds the model's "
            f"max_position_embeddings={positions}: lower data.block_size or raise model.scratch.n_positions."
        )
    return size


@data_lib.caching
def causal_lm_datasets(cfg: RecipeConfig, tokenizer=None):
    """(tokenizer, train blocks, validation blocks), as run_clm (a cached map). Default tokenizer: char."""
    splits = data_lib.text_splits(cfg.data)
    if tokenizer is None and (cfg.tokenizer or "char") == "char":
        tokenizer = build_char_tokenizer(data_lib.text_characters(splits))
    elif tokenizer is None:
        tokenizer = recipe_tokenizer(cfg.tokenizer, cfg.model, cfg.task)
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


@data_lib.caching
def classification_datasets(cfg: RecipeConfig, tokenizer):
    ds = data_lib.load_classification(cfg.data)
    classes = ds["train"].features["label"]
    seen = sorted(set(ds["train"].unique("label")) - {-1})  # the training examples' classes, not validation's too
    if len(seen) < 2:  # one output: a regression in transformers; one class trained: nothing learnt
        raise ValueError(
            f"{cfg.data.train_file or cfg.data.dataset}: the training labels are one class "
            f"({[classes.int2str(i) for i in seen]}, of {classes.num_classes}): a classifier needs training examples "
            "of two classes or more. Give examples of the others."
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


@data_lib.caching
def translation_datasets(cfg: RecipeConfig, tokenizer=None):
    """(tokenizer, tokenized pairs, the pairs as text). Default tokenizer: bpe, trained on the training pairs."""
    data = cfg.data
    ds = _limited(data_lib.load_translation(data), data)
    if tokenizer is None and (cfg.tokenizer or "bpe") == "bpe":  # trained on the training pairs, read in batches
        pairs = data_lib.iter_texts(ds["train"], ("source", "target"))
        tokenizer = build_subword_tokenizer(pairs, data.vocab_size or 4000)
    elif tokenizer is None:
        tokenizer = recipe_tokenizer(cfg.tokenizer, cfg.model, cfg.task)
    prefix, cut = data.source_prefix or "", dict(truncation=True, max_length=int(data.max_length or 64))
    encode = lambda b: tokenizer([prefix + s for s in b["source"]], text_target=b["target"], **cut)  # labels: targets'
    return tokenizer, ds.map(encode, batched=True), ds
