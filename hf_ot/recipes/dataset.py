"""The recipe's training and validation splits, tokenized: LM blocks, classification and translation pairs; each split
checked before training (a split without rows is an error, not an IndexError after training)."""

from __future__ import annotations

from .. import data as data_lib
from .tokenizer import build_char_tokenizer, load_tokenizer


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
