"""Data at scale and data mistakes named with the fix.

References are computed here by hand: the character split of the whole text, and windows cut from the token list of
the whole string (character-level tokens: one id per character)."""

import bz2
import csv
import gzip
import json
import random
import re
import shlex
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import REPO, set_flags, tiny_run
from datasets import ClassLabel, Dataset, DatasetDict, IterableDataset
from helpers import (
    _long_source_translation_folder,
    assert_names,
    assert_nothing_trained,
    quick_cfg,
    raises_naming,
    train,
)

from hf_ot.cli import main
from hf_ot.errors import UsageError
from hf_ot.recipes import build_char_tokenizer, run_recipe
from hf_ot.recipes import data as data_lib
from hf_ot.recipes.config import DataSection, load_config
from hf_ot.recipes.run import card_data

BLOCK = 16


def char_tokenizer(text: str):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<pad>": 1, **{c: i + 2 for i, c in enumerate(sorted(set(text)))}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>"), vocab


def random_text(lines: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    alphabet = "abcdefghij klmnopqrstuvwxyz,.;éü漢字"  # multi-byte characters: the split counts characters
    return "".join("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) + "\n" for _ in range(lines))


def windows(ids: list[int], block: int, stride: int) -> list[list[int]]:
    return [ids[i : i + block] for i in range(0, len(ids) - block + 1, stride)]


def write(path, text: str, encoding: str = "utf-8"):
    path.write_bytes(text.encode(encoding))
    return str(path)


# --------------------------------------------------------------------------------------------- splits


def test_embedded_split_is_the_character_split_of_the_text():
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[k] for k in sorted(topics))
    cut = int(len(text) * 0.9)
    splits = data_lib.text_splits({"source": "embedded"})
    train, val = ("".join(splits[name]["text"]) for name in ("train", "validation"))
    assert train == text[:cut] and val == text[cut:]


@pytest.mark.parametrize("val_fraction", [0.1, 0.37])
def test_file_split_is_the_character_split_without_one_string(tmp_path, val_fraction):
    text = random_text(700)
    splits = data_lib.text_splits(
        {"source": "file", "train_file": write(tmp_path / "t.txt", text), "val_fraction": val_fraction}
    )
    cut = int(len(text) * (1 - val_fraction))
    assert "".join(splits["train"]["text"]) == text[:cut]
    assert "".join(splits["validation"]["text"]) == text[cut:]
    # the file is read into Arrow rows (one per line, memory-mapped from the cache), not into one string
    assert len(splits["train"]) + len(splits["validation"]) in (700, 701)  # the cut line is in both
    assert max(len(t) for t in splits["train"]["text"]) <= 41
    assert splits["train"].cache_files


def test_validation_file_is_used_as_is(tmp_path):
    train, val = random_text(200, seed=1), random_text(50, seed=2)
    splits = data_lib.text_splits(
        {
            "source": "file",
            "train_file": write(tmp_path / "a.txt", train),
            "validation_file": write(tmp_path / "b.txt", val),
        }
    )
    assert "".join(splits["train"]["text"]) == train and "".join(splits["validation"]["text"]) == val


def test_hub_text_is_joined_by_newlines_and_split_by_characters(monkeypatch):
    docs = [random_text(3, seed=i).replace("\n", " ") for i in range(60)]

    def fake_load_dataset(name, config=None, split=None, streaming=False):
        ds = Dataset.from_dict({"body": docs, "id": list(range(len(docs)))})
        return ds.to_iterable_dataset() if streaming else ds

    monkeypatch.setattr(data_lib, "load_dataset", fake_load_dataset)
    text = "".join(d + "\n" for d in docs)
    cut = int(len(text) * 0.9)
    splits = data_lib.text_splits({"source": "hub", "dataset": "me/docs", "text_column": "body"})
    assert "".join(splits["train"]["text"]) == text[:cut] and "".join(splits["validation"]["text"]) == text[cut:]
    # streaming: an IterableDataset; validation = the first data.validation_rows documents
    streamed = data_lib.text_splits(
        {"source": "hub", "dataset": "me/docs", "text_column": "body", "streaming": True, "validation_rows": 5}
    )
    assert isinstance(streamed["train"], IterableDataset)
    assert [r["text"] for r in streamed["validation"]] == [d + "\n" for d in docs[:5]]
    assert [r["text"] for r in streamed["train"]] == [d + "\n" for d in docs[5:]]
    tokenizer, vocab = char_tokenizer(text)
    train, val = data_lib.lm_datasets({"block_size": BLOCK, "source": "hub"}, tokenizer, splits=streamed)
    assert isinstance(train, IterableDataset)
    assert [list(r["input_ids"]) for r in val] == windows(
        [vocab[c] for c in "".join(d + "\n" for d in docs[:5])], BLOCK, BLOCK
    )


# --------------------------------------------------------------------------------------------- blocks


@pytest.mark.parametrize("stride", [BLOCK, 5])
def test_blocks_of_a_short_text_are_the_windows_of_the_whole_token_list(tmp_path, stride):
    text = random_text(300)  # fewer rows than one group: blocked exactly as one string
    tokenizer, vocab = char_tokenizer(text)
    data = {"source": "file", "train_file": write(tmp_path / "t.txt", text), "block_size": BLOCK, "stride": stride}
    train, val = data_lib.lm_datasets(data, tokenizer)
    cut = int(len(text) * 0.9)
    assert train["input_ids"] == windows([vocab[c] for c in text[:cut]], BLOCK, stride)
    assert val["input_ids"] == windows([vocab[c] for c in text[cut:]], BLOCK, stride)
    assert train["labels"] == train["input_ids"]


def test_small_text_is_one_group_large_text_is_cut_per_group_of_rows_as_run_clm_does(tmp_path):
    text = random_text(2500, seed=3)
    tokenizer, vocab = char_tokenizer(text)
    rows = Dataset.from_dict({"text": text.splitlines(keepends=True)})
    assert data_lib.lm_blocks(rows, tokenizer, BLOCK)["input_ids"] == windows([vocab[c] for c in text], BLOCK, BLOCK)
    blocks = data_lib.lm_blocks(rows, tokenizer, BLOCK, group_rows=data_lib.GROUP_ROWS)  # as for a large text
    lines = text.splitlines(keepends=True)
    expected = []
    for g in range(0, len(lines), data_lib.GROUP_ROWS):  # run_clm's group_texts: per map batch, tail dropped
        expected += windows([vocab[c] for c in "".join(lines[g : g + data_lib.GROUP_ROWS])], BLOCK, BLOCK)
    assert blocks["input_ids"] == expected


def test_large_text_is_grouped_by_bytes_and_read_in_large_record_batches(tmp_path, monkeypatch):
    text = random_text(2500, seed=6)
    tokenizer, vocab = char_tokenizer(text)
    path = write(tmp_path / "t.txt", text)
    splits = data_lib.text_splits({"source": "file", "train_file": path})
    # a memory-mapped Arrow stream of small record batches gets every page mapped when read: the text file is read
    # into record batches of up to a 10 MB chunk, not datasets' default of 1000 rows
    assert len(splits["train"]) > 2000 and len(splits["train"].data.to_batches()) <= 2
    monkeypatch.setattr(data_lib, "EXACT_BYTES", 1000)  # as for a text of over 20 MB
    monkeypatch.setattr(data_lib, "GROUP_BYTES", 4000)
    rows = splits["train"]["text"]
    blocks = data_lib.lm_blocks(splits["train"], tokenizer, BLOCK)
    per_group = round(len(rows) * 4000 / len("".join(rows).encode()))  # rows of about GROUP_BYTES
    expected, sizes = [], []
    for g in range(0, len(rows), per_group):  # each group about GROUP_BYTES of text, its tail dropped
        group = "".join(rows[g : g + per_group])
        sizes.append(len(group.encode()))
        expected += windows([vocab[c] for c in group], BLOCK, BLOCK)
    assert blocks["input_ids"] == expected
    assert all(3000 < n < 5000 for n in sizes[:-1])
    # each group's blocks are one record batch of the cache file
    assert len(sizes) > 5 and len(blocks.data.to_batches()) in (len(sizes) - 1, len(sizes))


def test_streaming_gives_the_same_blocks_as_the_cached_map(tmp_path):
    text = random_text(2500, seed=4)
    tokenizer, vocab = char_tokenizer(text)
    path = write(tmp_path / "t.txt", text)
    splits = data_lib.text_splits({"source": "file", "train_file": path})
    one = data_lib.lm_blocks(splits["train"], tokenizer, BLOCK, group_rows=100)  # (workers: the test below)
    assert len(one) > 1000
    assert all(f["filename"].endswith(".arrow") for f in one.cache_files)  # cached on disk beside the source
    streamed = data_lib.lm_blocks(splits["train"].to_iterable_dataset(), tokenizer, BLOCK, group_rows=100)
    assert isinstance(streamed, IterableDataset)
    assert [list(r["input_ids"]) for r in streamed] == one["input_ids"]
    # what a Trainer does with streamed rows: collate, forward with labels
    from transformers import GPT2Config, GPT2LMHeadModel, default_data_collator

    batch = default_data_collator([row for _, row in zip(range(2), streamed)])
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_layer=1, n_embd=16, n_head=2, n_positions=BLOCK))
    assert batch["input_ids"].dtype == batch["labels"].dtype == torch.int64 and model(**batch).loss.isfinite()
    limited = data_lib.lm_blocks(splits["train"].to_iterable_dataset(), tokenizer, BLOCK, limit=7, group_rows=100)
    assert [list(r["input_ids"]) for r in limited] == one["input_ids"][:7]


def test_a_large_text_is_tokenized_by_datasets_workers_and_cached_once(tmp_path):
    text = random_text(2500, seed=7)
    tokenizer, vocab = char_tokenizer(text)
    splits = data_lib.text_splits({"source": "file", "train_file": write(tmp_path / "t.txt", text)})
    train = splits["train"]
    lines = train["text"]

    def groups(rows):  # run_clm's group_texts: blocks never cross a group of 30 rows
        return [
            b
            for g in range(0, len(rows), 30)
            for b in windows([vocab[c] for c in "".join(rows[g : g + 30])], BLOCK, BLOCK)
        ]

    half = (len(lines) + 1) // 2  # datasets' num_proc=2: two contiguous shards, each grouped from its first row
    workers = data_lib.lm_blocks(train, tokenizer, BLOCK, num_proc=2, group_rows=30)
    assert workers["input_ids"] == groups(lines[:half]) + groups(lines[half:])
    files = {f["filename"] for f in workers.cache_files}
    assert len(files) == 2  # one cache file per worker, beside the source
    cache_dir = Path(next(iter(files))).parent
    before = set(cache_dir.iterdir())
    for num_proc in (2, None, 3):  # datasets reuses the cached shards for any num_proc: the same blocks
        again = data_lib.lm_blocks(train, tokenizer, BLOCK, num_proc=num_proc, group_rows=30)
        assert {f["filename"] for f in again.cache_files} == files and again["input_ids"] == workers["input_ids"]
    assert set(cache_dir.iterdir()) == before
    other = data_lib.text_splits({"source": "file", "train_file": write(tmp_path / "t2.txt", text)})["train"]
    assert data_lib.lm_blocks(other, tokenizer, BLOCK, group_rows=30)["input_ids"] == groups(lines)  # one process
    assert data_lib._text_lengths(train).tolist() == [len(line) for line in lines]


def test_a_selection_of_rows_is_measured_by_its_own_text(tmp_path):
    text = random_text(2500, seed=8)
    tokenizer, vocab = char_tokenizer(text)
    train = data_lib.text_splits({"source": "file", "train_file": write(tmp_path / "t.txt", text)})["train"]
    kept = train.filter(lambda row: len(row["text"]) > 20)  # an indices mapping over the file's rows
    assert data_lib._text_lengths(kept, "bytes").sum() == sum(len(t.encode()) for t in kept["text"])
    assert data_lib._text_lengths(train, "bytes").sum() == sum(len(t.encode()) for t in train["text"])
    # a small selection is one group, blocked exactly as one string
    joined = "".join(kept["text"])
    assert data_lib.lm_blocks(kept, tokenizer, BLOCK)["input_ids"] == windows([vocab[c] for c in joined], BLOCK, BLOCK)


def test_blocks_of_one_string_are_its_windows():
    text = random_text(100, seed=5)
    tokenizer, vocab = char_tokenizer(text)
    ds = data_lib.lm_blocks(Dataset.from_dict({"text": [text]}), tokenizer, BLOCK, 7, limit=9)
    assert ds["input_ids"] == windows([vocab[c] for c in text], BLOCK, 7)[:9]


# ------------------------------------------------------------------------------ too little data for a block


def test_validation_without_one_block_fails_before_training(tmp_path):
    text = random_text(1000, seed=6)[:1100]  # 1,100 characters: validation has 110, fewer than block_size 128
    tokenizer, _ = char_tokenizer(text)
    data = {"source": "file", "train_file": write(tmp_path / "t.txt", text), "block_size": 128}
    with raises_naming(
        ValueError, "validation text", "110 tokens", "data.block_size=128", "lower data.block_size", "data.val_fraction"
    ):
        data_lib.lm_datasets(data, tokenizer)


def test_block_size_longer_than_the_text_names_both(tmp_path):
    text = random_text(1000, seed=7)[:1500]
    tokenizer, _ = char_tokenizer(text)
    data = {"source": "file", "train_file": write(tmp_path / "t.txt", text), "block_size": 4096}
    with raises_naming(ValueError, "train text", "1350 tokens", "data.block_size=4096"):
        data_lib.lm_datasets(data, tokenizer)


def test_check_datasets_on_every_kind_of_split():
    full = Dataset.from_dict({"input_ids": [[1, 2]]})
    empty = Dataset.from_dict({"input_ids": []})
    data_lib.check_datasets(full, full, task="causal-lm")
    with raises_naming(ValueError, "validation split", "data.block_size=64", "data.val_fraction"):
        data_lib.check_datasets(full, empty, task="causal-lm", data={"block_size": 64})
    with pytest.raises(ValueError, match="train split has no complete block"):
        data_lib.check_datasets(full.to_iterable_dataset().filter(lambda row: False), full, task="causal-lm")
    with raises_naming(ValueError, "train split", "no examples", "data.max_train_samples=3"):
        data_lib.check_datasets(empty, full, task="sequence-classification", data={"max_train_samples": 3})
    with pytest.raises(ValueError, match="validation split has no examples"):
        data_lib.check_datasets(full, empty, task="translation")


# ----------------------------------------------------------------------------------------- data mistakes


def sst(tmp_path, train: str, validation: str, **extra) -> dict:
    return {
        "train_file": write(tmp_path / "train.tsv", train),
        "num_labels": 2,
        "validation_file": write(tmp_path / "validation.tsv", validation),
        **extra,
    }


GOOD = "sentence\tlabel\ngood film\t1\nbad film\t0\n"


def test_classification_files_load_as_they_are(tmp_path):
    ds = data_lib.load_classification(sst(tmp_path, GOOD, GOOD))
    assert ds["train"]["text"] == ["good film", "bad film"] and ds["validation"]["label"] == [1, 0]


def test_non_utf8_text_is_named_with_the_line_and_the_fix(tmp_path):
    latin = "sentence\tlabel\ngood film\t1\nun café noir\t0\n"
    data = sst(tmp_path, GOOD, "")
    write(tmp_path / "validation.tsv", latin, encoding="latin-1")
    with raises_naming(ValueError, "validation.tsv", "utf-8", "line 3", "0xe9", "data.encoding"):
        data_lib.load_classification(data)
    ds = data_lib.load_classification({**data, "encoding": "latin-1"})  # the fix the message names
    assert ds["validation"]["text"][1] == "un café noir"
    text_file = write(tmp_path / "t.txt", "x" * 2000 + "\ncafé\n", encoding="latin-1")
    with raises_naming(ValueError, "utf-8", "line 2"):
        data_lib.text_splits({"source": "file", "train_file": text_file})


def test_labels_out_of_range_are_named_with_num_labels(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"labels \[2, 5\] are outside 0..1 \(data.num_labels=2\).*"
        r"Set data.num_labels.*\(6 for these labels\)",
    ):
        data_lib.load_classification(sst(tmp_path, GOOD + "ok\t2\nmeh\t5\n", GOOD))
    with pytest.raises(ValueError, match=r"labels \[-1\].*GLUE's test split"):
        data_lib.load_classification(sst(tmp_path, GOOD, "sentence\tlabel\nhidden\t-1\n"))
    with pytest.raises(ValueError, match="must hold integer class ids.*empty cells"):
        data_lib.load_classification(sst(tmp_path, GOOD + "no label\t\n", GOOD))


def test_column_in_one_file_only_is_named(tmp_path):
    with raises_naming(ValueError, "['label']", "train.tsv", "validation.tsv", "same header"):
        data_lib.load_classification(sst(tmp_path, GOOD, "sentence\tlabels\ngood\t1\n"))


def test_header_only_file_is_named(tmp_path):
    with raises_naming(ValueError, "data.validation_file", "validation.tsv", "no rows", "header"):
        data_lib.load_classification(sst(tmp_path, GOOD, "sentence\tlabel\n"))


def test_string_labels_are_inferred_sorted_or_ordered_by_label_names(tmp_path):
    """As transformers' run_glue: string labels need no list (sorted names are the ids); data.label_names only fixes
    the order; integer labels with label_names are named by them."""
    words = "sentence\tlabel\ngood film\tpositive\nbad film\tnegative\nso so\tneutral\n"
    ds = data_lib.load_classification(sst(tmp_path, words, words, num_labels=None))
    assert ds["train"]["label"] == [2, 0, 1]
    assert data_lib.label_names(ds["train"]) == ["negative", "neutral", "positive"]
    ordered = ["positive", "neutral", "negative"]
    ds = data_lib.load_classification(sst(tmp_path, words, words, num_labels=None, label_names=ordered))
    assert ds["train"]["label"] == [0, 2, 1] and data_lib.label_names(ds["train"]) == ordered
    with pytest.raises(ValueError, match=r"labels \['positive'\] are not in data.label_names"):
        data_lib.load_classification(sst(tmp_path, words, words, label_names=["negative", "neutral"]))
    ds = data_lib.load_classification(sst(tmp_path, GOOD, GOOD, label_names=["bad", "good"]))
    assert ds["train"]["label"] == [1, 0] and data_lib.label_names(ds["train"]) == ["bad", "good"]
    assert data_lib.label_names(data_lib.load_classification(sst(tmp_path, GOOD, GOOD))["train"]) is None


def test_translation_files_load_into_arrow_and_check_alignment(tmp_path):
    src, tgt = "ein Hund\nzwei Katzen\n", "a dog\ntwo cats\n"
    data = {
        "train_source": write(tmp_path / "tr.de", src),
        "train_target": write(tmp_path / "tr.en", tgt),
        "validation_source": write(tmp_path / "va.de", src),
        "validation_target": write(tmp_path / "va.en", tgt),
    }
    ds = data_lib.load_translation(data)
    assert ds["train"]["source"] == src.splitlines() and ds["validation"]["target"] == tgt.splitlines()
    write(tmp_path / "va.en", "a dog\n")
    with pytest.raises(ValueError, match="has 2 lines but .* has 1"):
        data_lib.load_translation(data)
    write(tmp_path / "va.en", "a dög\ntwo cats\n", encoding="latin-1")
    with pytest.raises(ValueError, match=r"va.en is not valid utf-8.*line 1"):
        data_lib.load_translation(data)


def test_iter_texts_and_characters_stream_in_batches():
    ds = Dataset.from_dict({"source": ["ab", "c"], "target": ["xy", "z"]})
    assert list(data_lib.iter_texts(ds, ("source", "target"), batch_size=1)) == [["ab"], ["xy"], ["c"], ["z"]]
    assert data_lib.text_characters({"a": Dataset.from_dict({"text": ["bca", "é"]})}) == "abcé"
    digits = lambda texts, **_: {"input_ids": [[int(c) for c in t] for t in texts]}  # a tokenizer of digits
    blocks = data_lib._TokenizeAndGroup(digits, 2, 1)({"text": ["12", "3"]})["input_ids"]
    assert blocks.dtype == np.int64 and np.array_equal(blocks, [[1, 2], [2, 3]])


@pytest.mark.parametrize("text", ["a" * 1500, "b" * 1400 + "\n", "x\n" * 600 + "y" * 200])
def test_split_when_the_cut_falls_in_the_last_or_only_row(tmp_path, text):
    splits = data_lib.text_splits({"source": "file", "train_file": write(tmp_path / "t.txt", text)})
    cut = int(len(text) * 0.9)
    assert "".join(splits["train"]["text"]) == text[:cut] and "".join(splits["validation"]["text"]) == text[cut:]


def test_character_counts_of_a_text_of_many_record_batches(tmp_path):
    text = random_text(120_000, seed=8)  # over 100k rows: counted over several Arrow record batches
    splits = data_lib.text_splits({"source": "file", "train_file": write(tmp_path / "t.txt", text), "num_proc": 2})
    cut = int(len(text) * 0.9)
    assert "".join(splits["train"]["text"]) == text[:cut] and "".join(splits["validation"]["text"]) == text[cut:]
    rows = Dataset.from_dict({"text": text.splitlines(keepends=True)})
    counts = data_lib._text_lengths(rows)
    assert isinstance(counts, np.ndarray) and counts.tolist() == [len(t) for t in rows["text"]]


def test_translation_says_which_column_is_the_source_and_which_the_target(tmp_path, caplog):
    """A JSON Lines file of {"en", "de"} pairs trains de -> en by default, and says so with the keys that turn it
    round; given columns read en -> de; line files name the languages of their file names."""
    rows = [{"en": f"a sentence {i}", "de": f"ein Satz {i}"} for i in range(20)]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level("WARNING", logger="hf_ot"):
        ds = data_lib.load_translation({"train_file": str(tmp_path / "pairs.jsonl")})
    pairs = sorted(pair for split in ds.values() for pair in zip(split["source"], split["target"]))
    assert ds.direction == "de -> en" and pairs == sorted((r["de"], r["en"]) for r in rows)
    said = [r.getMessage() for r in caplog.records if "translating" in r.getMessage()]
    assert len(said) == 1 and "de -> en" in said[0] and "data.source_column" in said[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="hf_ot"):
        ds = data_lib.load_translation(
            {"train_file": str(tmp_path / "pairs.jsonl"), "source_column": "en", "target_column": "de"}
        )
    assert ds.direction == "en -> de" and ds["train"][0]["source"].startswith("a sentence")
    assert any("translating en -> de" in r.getMessage() for r in caplog.records)
    (tmp_path / "train.fr").write_text("".join(f"une phrase {i}\n" for i in range(10)))
    (tmp_path / "train.en.gz").write_bytes(gzip.compress("".join(f"a sentence {i}\n" for i in range(10)).encode()))
    lines = {"train_source": str(tmp_path / "train.fr"), "train_target": str(tmp_path / "train.en.gz")}
    assert data_lib.load_translation(lines).direction == "fr -> en"


def _recipe_copy_paths(root: Path, folder: str) -> dict:
    """A packaged recipe's data keys, its offline copy under root/shared/data/<folder> (the recipes' layout)."""
    base = root / "shared" / "data" / folder
    if folder == "multi30k":
        return {
            f"{s}_{side}": str(base / f"{n}.{lang}.gz")
            for s, n in (("train", "train"), ("validation", "val"))
            for side, lang in (("source", "de"), ("target", "en"))
        }
    if folder == "sst2":
        return {"train_file": str(base / "train.tsv"), "validation_file": str(base / "validation.tsv")}
    return {"train_file": str(base / "input.txt"), "val_fraction": 0.1}


@pytest.fixture
def said_again():
    data_lib._say.cache_clear()  # (each resolution is said once a process)
    yield
    data_lib._say.cache_clear()


@pytest.mark.parametrize(
    "folder, hub, read",
    [
        ("multi30k", "bentrevett/multi30k", data_lib.load_translation),
        ("sst2", "stanfordnlp/sst2", data_lib.load_classification),
        ("tinyshakespeare", "karpathy/tiny_shakespeare", data_lib.text_splits),
    ],
)
def test_a_recipe_without_its_offline_copy_offline_names_the_hub_dataset_and_the_setting(
    folder, hub, read, tmp_path, monkeypatch, said_again
):
    """A packaged recipe's ../shared/data copy absent and the Hub off, its dataset not cached: the error names the Hub
    dataset, HF_OT_DATA (the setting for a local copy) and the download command. (load_dataset stands in for datasets
    offline: its ConnectionError, as HF_HUB_OFFLINE=1 gives where nothing is cached.)"""
    asked = []

    def offline(path, *args, **kwargs):
        asked.append(path)
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_OT_DATA", raising=False)
    monkeypatch.setattr(data_lib, "load_dataset", offline)
    with pytest.raises(ConnectionError) as err:
        read(_recipe_copy_paths(tmp_path, folder))
    assert asked == [hub] and "HF_OT_DATA" in str(err.value) and f"hf download {hub}" in str(err.value)


def test_a_recipe_reads_its_local_copy_from_hf_ot_data_and_says_which(tmp_path, monkeypatch, caplog, said_again):
    """HF_OT_DATA=DIR: DIR/<folder> read as the recipe reads ../shared/data/<folder>, or, holding a download of the Hub
    dataset (hf download ... --local-dir DIR/<folder>), read as that dataset; the console says which."""
    copies = tmp_path / "copies"
    (copies / "multi30k").mkdir(parents=True)
    for name, lang, text in (
        ("train", "de", "ein Satz"),
        ("train", "en", "a sentence"),
        ("val", "de", "ein Hund"),
        ("val", "en", "a dog"),
    ):
        lines = "".join(f"{text} {i}\n" for i in range(12 if name == "train" else 3))
        (copies / "multi30k" / f"{name}.{lang}.gz").write_bytes(gzip.compress(lines.encode()))
    rows = [{"sentence": f"review {i} {'good' if i % 2 else 'bad'}", "label": i % 2} for i in range(10)]
    (copies / "sst2" / "data").mkdir(parents=True)
    for split in ("train", "validation"):
        Dataset.from_list(rows).to_parquet(str(copies / "sst2" / "data" / f"{split}-00000-of-00001.parquet"))
    monkeypatch.setenv("HF_OT_DATA", str(copies))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with caplog.at_level("WARNING", logger="hf_ot"):
        pairs = data_lib.load_translation(_recipe_copy_paths(tmp_path, "multi30k"))
        reviews = data_lib.load_classification(_recipe_copy_paths(tmp_path, "sst2"))
    assert pairs["validation"]["source"] == ["ein Hund 0", "ein Hund 1", "ein Hund 2"] and len(pairs["train"]) == 12
    assert reviews["validation"]["text"] == [r["sentence"] for r in rows] and reviews["train"]["label"][:2] == [0, 1]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("data:")]
    assert any("offline copy of bentrevett/multi30k" in m and str(copies / "multi30k") in m for m in said)
    assert any(str(copies / "sst2") in m and "stanfordnlp/sst2" in m and "download" in m for m in said)


def test_a_recipe_without_its_offline_copy_online_reads_the_hub_dataset_and_says_so(
    tmp_path, monkeypatch, caplog, said_again
):
    """Online (no HF_HUB_OFFLINE) without the copy: the recipe's Hub dataset (tiny_shakespeare: its Parquet export, the
    repository holds a loading script), said on the console. (load_dataset stands in for the Hub.)"""
    asked = []

    def hub(path, name=None, **kwargs):
        asked.append((path, kwargs.get("revision")))
        text = "To be, or not to be, that is the question. " * 50
        return DatasetDict(
            {"train": Dataset.from_dict({"text": [text]}), "validation": Dataset.from_dict({"text": [text]})}
        )

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_OT_DATA", raising=False)
    monkeypatch.setattr(data_lib, "load_dataset", hub)
    with caplog.at_level("WARNING", logger="hf_ot"):
        splits = data_lib.text_splits(_recipe_copy_paths(tmp_path, "tinyshakespeare"))
    assert asked == [("karpathy/tiny_shakespeare", "refs/convert/parquet")] and "question" in splits["train"][0]["text"]
    assert_names(caplog.text, "Hub dataset", "karpathy/tiny_shakespeare")


def test_a_cut_of_the_validation_blocks_is_said(tmp_path, caplog):
    """data.max_eval_blocks leaves validation blocks unscored after training: said with what it keeps of how many."""
    text = random_text(2500, seed=3)
    tokenizer, _ = char_tokenizer(text)
    data = {"source": "file", "train_file": write(tmp_path / "t.txt", text), "block_size": BLOCK, "max_eval_blocks": 2}
    with caplog.at_level("WARNING", logger="hf_ot"):
        _, val = data_lib.lm_datasets(data, tokenizer)
    every = len(data_lib.lm_blocks(data_lib.text_splits(data)["validation"], tokenizer, BLOCK))
    assert len(val) == 2 < every
    said = [r.getMessage() for r in caplog.records if "(data.max_eval_blocks=2)" in r.getMessage()]
    assert said and "using 2 " in said[0]  # (the whole count where the text was tokenized whole: only its start was)


TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(60))


def error_of(data: dict) -> str:
    with pytest.raises(ValueError) as err:
        data_lib.text_splits(data)
    return str(err.value)


def write_data_reading(path: Path, content) -> str:
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return str(path)


TINY_T5 = [  # the smallest translation_t5 run: one layer of width 16, a 200-token BPE, 2 generated sentences
    "training.max_steps=1",
    "training.save_strategy=no",
    "training.per_device_train_batch_size=4",
    "data.vocab_size=200",
    "data.max_length=16",
    "evaluation.generate_samples=2",
    "evaluation.max_new_tokens=4",
    "model.scratch.d_model=16",
    "model.scratch.d_ff=16",
    "model.scratch.d_kv=8",
    "model.scratch.num_heads=2",
    "model.scratch.num_layers=1",
    "model.scratch.num_decoder_layers=1",
]


DOCS = [f"Document {i}: the quick brown fox jumps over the lazy dog, again and again." for i in range(40)]


FORMATS_OF_LABELS = ["csv", "jsonl", "parquet", "saved"]  # one label check, whatever reads the rows


PAIRS = [(f"ein Satz {i}", f"a sentence {i}") for i in range(30)]


REVIEWS = [(f"review number {i} {'loved it' if i % 3 else 'hated it'}", "pos" if i % 3 else "neg") for i in range(30)]


TABLE_FORMATS = ["csv", "tsv", "json", "jsonl", "jsonl.gz", "parquet", "folder", "glob", "saved", "format-key"]


TOY = {  # short settings per task; the README's commands are run as written, these appended
    "sst2_minilm": ["data.max_length=16", "training.per_device_eval_batch_size=4", "evaluation.elasticity=false"],
    "quickstart": [
        "data.block_size=16",
        "data.max_eval_blocks=4",
        "model.scratch.n_embd=16",
        "model.scratch.n_layer=1",
        "model.scratch.n_positions=16",
        "model.ot.ot_num_steps=1",
    ],
    "translation_t5": [
        "data.vocab_size=300",
        "data.max_length=16",
        "evaluation.generate_samples=2",
        "evaluation.max_new_tokens=4",
        "model.scratch.d_model=16",
        "model.scratch.d_ff=32",
        "model.scratch.d_kv=8",
        "model.scratch.num_heads=2",
    ],
}


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Train on your own data\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in re.findall(r"```bash\n(.*?)```", section, re.S) for line in line.splitlines()]


def table_source(tmp_path: Path, fmt: str, rows: list[dict]) -> dict:
    """The data keys that point at `rows` stored as `fmt` (two files for folder and glob; a save_to_disk folder)."""
    if fmt in ("folder", "glob"):
        half = len(rows) // 2
        write_rows(tmp_path / "parts" / "a.jsonl", "jsonl", rows[:half])
        write_rows(tmp_path / "parts" / "b.jsonl", "jsonl", rows[half:])
        return {"train_file": str(tmp_path / "parts" / ("*.jsonl" if fmt == "glob" else ""))}
    if fmt == "saved":
        Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
        return {"train_file": str(tmp_path / "saved")}
    if fmt == "format-key":  # an extension that says nothing: data.format does
        return {"train_file": str(write_rows(tmp_path / "data.dat", "jsonl", rows)), "format": "jsonl"}
    suffix = {"jsonl.gz": "jsonl.gz"}.get(fmt, fmt)
    return {"train_file": str(write_rows(tmp_path / f"data.{suffix}", fmt, rows))}


def write_rows(path: Path, fmt: str, rows: list[dict]) -> Path:
    """rows written as `fmt` with the standard library / pyarrow (not through datasets, which reads them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt in ("csv", "tsv"):
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t" if fmt == "tsv" else ",")
            writer.writeheader()
            writer.writerows(rows)
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt in ("jsonl", "jsonl.gz", "jsonl.bz2"):
        text = "".join(json.dumps(r) + "\n" for r in rows).encode()
        path.write_bytes(gzip.compress(text) if fmt.endswith("gz") else bz2.compress(text) if "bz2" in fmt else text)
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        raise AssertionError(fmt)
    return path


def test_a_short_stream_names_the_rows_held_out_for_validation(tmp_path, capsys):
    # a stream without a validation file holds out its first data.validation_rows (1000) rows: a 200-line file
    # leaves no training text, which the error blamed on the block size and the text's length alone
    notes = tmp_path / "notes.txt"
    notes.write_text("\n".join(f"Note {i}: the shared field moves every token a little further." for i in range(200)))
    flags = set_flags(tiny_run(f"data.train_file={notes}", "data.streaming=true"))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) == 1
    assert "data.validation_rows" in capsys.readouterr().err


def test_results_name_the_data_a_run_read(tmp_path):
    # a baseline (model.ot=null) writes no card: nothing it wrote said that it was trained on the user's notes.txt
    import json

    notes = tmp_path / "notes.txt"
    notes.write_text("\n".join(f"Note {i}: the shared field moves every token a little further." for i in range(60)))
    flags = set_flags(tiny_run(f"data.train_file={notes}", "model.ot=null", "training.save_strategy=no", max_steps=1))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) == 0
    assert json.loads((tmp_path / "run" / "results.json").read_text())["data"] == "notes.txt"


@pytest.mark.parametrize(
    "setting",
    [
        "data.val_fraction=0",  # refused, but once the data was read (exit 1)
        "data.stride=-1",  # likewise
        "data.stride=0",  # "must be >= 1" for -1, yet 0 is taken as unset
        "data.max_train_blocks=0",  # "at most this many blocks": 0 trained on all of them
        "data.block_size=1",  # no next token to predict: "training diverged ... lower the learning rate"
    ],
)
def test_data_settings_out_of_bounds_are_refused_before_the_data(tmp_path, capsys, monkeypatch, setting):
    from hf_ot.recipes import data

    monkeypatch.setattr(data, "_embedded_rows", lambda *a, **k: pytest.fail("data prepared"))
    flags = set_flags(tiny_run(setting))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) == 2
    assert setting.partition("=")[0] in capsys.readouterr().err


@pytest.mark.parametrize("setting", ["data.max_length=0", "data.max_train_samples=0", "data.max_eval_samples=0"])
def test_a_classifiers_zero_limits_are_refused_before_the_data(tmp_path, capsys, monkeypatch, setting):
    # each trained as if unset (max_length 64, every sample), without a word
    from hf_ot.recipes import data

    monkeypatch.setattr(data, "load_splits", lambda *a, **k: pytest.fail("data read"))
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,pos\na dull film,neg\n" * 5)
    flags = set_flags([f"data.train_file={tmp_path / 'reviews.csv'}", "training.max_steps=1", setting])
    assert main(["train", "sst2_minilm", "--output-dir", str(tmp_path / "run"), *flags]) == 2
    assert setting.partition("=")[0] in capsys.readouterr().err


@pytest.mark.parametrize("recipe", ["sst2_minilm", "translation_t5"])
def test_streaming_is_refused_where_the_task_cannot_stream(recipe):
    # only causal-lm streams: a classifier or translator given data.streaming=true read its data whole, silently
    with pytest.raises(UsageError, match=r"data\.streaming.*causal-lm"):
        load_config(recipe, ["data.streaming=true"])
    assert load_config(recipe, ["data.streaming=false"]).data.streaming is False


def test_labels_minus_one_and_one_get_a_hint_that_fixes_them(tmp_path):
    # the hint was data.num_labels=2, which leaves the -1 outside 0..1
    from hf_ot.recipes import data

    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,1\na dull film,-1\n" * 5)
    with pytest.raises(ValueError) as caught:
        data.load_classification({"train_file": str(tmp_path / "reviews.csv")})
    message = str(caught.value)
    assert "0..N-1" in message and "class names" in message and "GLUE" in message
    assert "data.num_labels" not in message


def test_translation_examples_name_the_reference_from_the_data(tmp_path, monkeypatch):
    # recipes/evaluate.py zips (sources, references) with the generated texts as (source, prediction, reference):
    # the file's target sentence was shown as the model's prediction, the untrained model's output as the reference
    import json

    monkeypatch.chdir(tmp_path)
    rows = [{"source": f"ein Hund läuft {i} mal", "target": f"a dog runs {i} times"} for i in range(40)]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    flags = set_flags(["data.train_file=pairs.jsonl", *TINY_T5])
    assert main(["train", "translation_t5", "--output-dir", "run", *flags]) == 0
    examples = json.loads((tmp_path / "run" / "results.json").read_text())["examples"]
    targets = {r["target"] for r in rows}
    assert examples and all(e["reference"] in targets for e in examples), examples


def test_reading_a_saved_dataset_writes_nothing_into_it(tmp_path):
    # data.train_file=<a save_to_disk folder> (train, evaluate, calibrate alike): each map/filter/select hf_ot runs
    # left a cache-<fingerprint>.arrow beside the user's data (six for a classifier), in a folder that is not hf_ot's
    from conftest import snapshot
    from datasets import Dataset

    from hf_ot.recipes import data as data_lib

    rows = {"text": [f"review {i}" for i in range(20)], "label": ["neg", "pos"] * 10}
    Dataset.from_dict(rows).save_to_disk(str(tmp_path / "saved"))
    before = snapshot(tmp_path / "saved")
    data_lib.load_classification({"train_file": str(tmp_path / "saved")})
    assert snapshot(tmp_path / "saved") == before


def test_an_existing_file_named_with_brackets_is_read(tmp_path):
    # data_files() treats any name glob.has_magic() flags as a pattern: 'reviews [v2].csv' (the file is there) was
    # "data.train_file: nothing matches 'reviews [v2].csv'"; the path as given names a file, so it is that file
    from hf_ot.recipes import data as data_lib

    (tmp_path / "reviews [v2].csv").write_text("text,label\n" + "a good film,pos\na dull film,neg\n" * 10)
    splits = data_lib.load_classification({"train_file": str(tmp_path / "reviews [v2].csv")})
    assert splits["train"].num_rows + splits["validation"].num_rows == 20


@pytest.mark.parametrize("setting", ["model.scratch.n_layer=0", "model.scratch.n_head=0", "model.scratch.n_embd=0"])
def test_scratch_sizes_that_make_no_model_are_refused_before_the_data(tmp_path, capsys, monkeypatch, setting):
    # n_layer=0: "n_layer=0: ... give n_layer >= 1" (exit 1) once the text was tokenized; n_head=0 and n_embd=0: a
    # ZeroDivisionError traceback from transformers (n_embd=15 with n_head=2 is refused early, naming the key)
    from hf_ot.recipes import data

    monkeypatch.setattr(data, "_embedded_rows", lambda *a, **k: pytest.fail("data prepared"))
    flags = set_flags(tiny_run(setting))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) == 2
    assert setting.partition("=")[0] in capsys.readouterr().err


@pytest.mark.parametrize("form", ["pairs file + validation_source/target", "source/target files + validation_file"])
def test_translation_validation_data_given_is_used_or_refused(tmp_path, form):
    # train_file=pairs.jsonl with validation_source/validation_target (or train_source/train_target with
    # validation_file) held out a tenth of the training pairs instead, without a word about the validation files
    import json

    from hf_ot.recipes import data as data_lib

    (tmp_path / "pairs.jsonl").write_text(
        "".join(json.dumps({"source": f"ein Hund {i}", "target": f"a dog {i}"}) + "\n" for i in range(30))
    )
    (tmp_path / "train.de").write_text("".join(f"ein Hund {i}\n" for i in range(30)))
    (tmp_path / "train.en").write_text("".join(f"a dog {i}\n" for i in range(30)))
    (tmp_path / "val.de").write_text("".join(f"eine Katze {i}\n" for i in range(5)))
    (tmp_path / "val.en").write_text("".join(f"a cat {i}\n" for i in range(5)))
    (tmp_path / "val.jsonl").write_text(
        "".join(json.dumps({"source": f"eine Katze {i}", "target": f"a cat {i}"}) + "\n" for i in range(5))
    )
    if form.startswith("pairs"):
        spec = {"train_file": "pairs.jsonl", "validation_source": "val.de", "validation_target": "val.en"}
    else:
        spec = {"train_source": "train.de", "train_target": "train.en", "validation_file": "val.jsonl"}
    spec = {k: str(tmp_path / v) for k, v in spec.items()}
    try:
        splits = data_lib.load_translation(spec)
    except Exception as err:  # refused, naming the setting that would be left unused: as good
        assert "validation" in str(err)
    else:
        assert sorted(splits["validation"]["target"]) == [f"a cat {i}" for i in range(5)]
        assert splits["train"].num_rows == 30


@pytest.mark.parametrize("task", ["classification", "translation"])
def test_an_empty_text_cell_is_text_or_named_with_its_file(tmp_path, task):
    # labels read as missing are refused naming the file ("empty cells read as missing"); a text cell read as
    # missing (None) reached the tokenizer: `hf-ot train sst2_minilm` failed with "text input must be of type
    # `str` ..." and nothing else
    from hf_ot.recipes import data as data_lib

    if task == "classification":
        path, load, columns = tmp_path / "reviews.csv", data_lib.load_classification, ["text"]
        path.write_text("text,label\n" + "a good film,pos\n,neg\n" * 10)
    else:
        path, load, columns = tmp_path / "pairs.csv", data_lib.load_translation, ["source", "target"]
        path.write_text("source,target\n" + "ein Hund,a dog\n,a cat\n" * 10)
    try:
        splits = load({"train_file": str(path)})
    except Exception as err:
        assert path.name in str(err)
    else:
        assert all(isinstance(t, str) for split in splits.values() for c in columns for t in split[c])


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_a_data_format_that_is_not_the_files_names_data_format(tmp_path, fmt):
    # a CSV read as json: datasets' "DatasetGenerationError: An error occurred while generating the dataset"
    # traceback; a Parquet file read as jsonl: "is not valid utf-8 text ... set data.encoding" (the wrong fix)
    import pandas as pd

    from hf_ot.recipes import data as data_lib

    rows = {"text": ["a good film", "a dull film"] * 10, "label": ["pos", "neg"] * 10}
    path = tmp_path / ("reviews.csv" if fmt == "json" else "reviews.parquet")
    if fmt == "json":
        pd.DataFrame(rows).to_csv(path, index=False)
    else:
        pd.DataFrame(rows).to_parquet(path)
    with pytest.raises(Exception, match="data.format") as err:
        data_lib.load_classification({"train_file": str(path), "format": fmt})
    assert path.name in str(err.value) and "data.encoding" not in str(err.value)


def test_the_hubs_nested_translation_rows_are_read_or_named_with_the_file(tmp_path):
    # rows as run_translation.py and the Hub's translation sets (wmt16, opus_books) hold them, {"translation": {"de":
    # ..., "en": ...}}: "the data has ['translation']. Name the column in the recipe: --set data.source_column=NAME";
    # doing so ends in "KeyError: 'Field \"source\" does not exist in schema'", neither file nor key named
    import json

    from hf_ot.recipes import data as data_lib

    pairs = [{"de": f"ein Hund {i}", "en": f"a dog {i}"} for i in range(20)]
    (tmp_path / "pairs.json").write_text(json.dumps([{"translation": p} for p in pairs]))
    spec = {"train_file": str(tmp_path / "pairs.json"), "source_column": "translation", "target_column": "translation"}
    try:
        splits = data_lib.load_translation(spec)
    except Exception as err:
        assert isinstance(err, ValueError) and "pairs.json" in str(err), repr(err)
    else:
        got = sorted(s for split in splits.values() for s in split["source"])
        assert got == sorted(p["de"] for p in pairs)


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "{run}", "--config", "quickstart"],  # "Unrecognized model in runs/notes. Should have a
        ["calibrate", "{run}", "--config", "quickstart"],  # `model_type` key in its config.json." (exit 1): no
        ["push", "{run}", "me/notes", "--dry-run"],  # config.json is there; push: "save the model first"
    ],
)
def test_a_run_folder_given_as_the_model_names_the_model_inside_it(tmp_path, capsys, command):
    # `hf-ot train --output-dir runs/notes` saves its model in runs/notes/model; the run folder is what a user types
    from helpers import tiny_lm

    run = tmp_path / "run"
    tiny_lm(run)  # the model in run/model, as a run leaves it
    assert main([arg.format(run=run) for arg in command]) == 2
    assert str(run / "model") in capsys.readouterr().err


def test_a_validation_folder_of_test_files_is_read_or_named(tmp_path, monkeypatch):
    # data.validation_file=valdir holding only test.csv (a folder's files are split by name): "KeyError: 'train'"
    from hf_ot.recipes import data as data_lib

    monkeypatch.chdir(tmp_path)
    rows = "text,label\n" + "a good film,pos\na dull film,neg\n" * 5
    (tmp_path / "reviews.csv").write_text(rows)
    (tmp_path / "valdir").mkdir()
    (tmp_path / "valdir" / "test.csv").write_text(rows)
    cfg = load_config("sst2_minilm", ["data.train_file=reviews.csv", "data.validation_file=valdir"])
    try:
        splits = data_lib.load_classification(cfg.data)
    except Exception as err:
        assert isinstance(err, ValueError) and "valdir" in str(err), repr(err)
    else:
        assert len(splits["validation"]) == 10


@pytest.mark.parametrize("labels, ids", [("pos,neg,pos,neg", [1, 0, 1, 0]), ("1,0,5,0", None)])
def test_a_saved_datasets_classes_number_the_validation_files_labels(tmp_path, labels, ids):
    # data.train_file=<save_to_disk folder, label a ClassLabel(neg, pos)>, data.validation_file=val.csv labelled
    # pos/neg: the validation labels stayed strings and `hf-ot train sst2_minilm` failed once the model was built
    # with "Unable to create tensor, you should probably activate truncation and/or padding ..." (exit 1); an id 5
    # (no class of the two) was kept unchecked
    from datasets import ClassLabel, Dataset, Features, Value

    from hf_ot.recipes import data as data_lib

    features = Features(text=Value("string"), label=ClassLabel(names=["neg", "pos"]))
    rows = {"text": [f"review {i}" for i in range(20)], "label": [i % 2 for i in range(20)]}
    Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "saved"))
    lines = "".join(f"text {i},{label}\n" for i, label in enumerate(labels.split(",")))
    (tmp_path / "val.csv").write_text("text,label\n" + lines)
    spec = {"train_file": str(tmp_path / "saved"), "validation_file": str(tmp_path / "val.csv")}
    try:
        splits = data_lib.load_classification(spec)
    except ValueError as err:  # refused, naming the validation file: as good (an id past the classes must be)
        assert "val.csv" in str(err), str(err)
    else:
        assert ids is not None and list(splits["validation"]["label"]) == ids
        assert splits["validation"].features["label"] == splits["train"].features["label"]


def test_a_damaged_trainer_state_is_named_as_damaged_not_missing(tmp_path, caplog):
    # `hf-ot train ... --resume` with trainer/checkpoint-3/trainer_state.json holding [1, 2] (damaged, not cut short
    # by a kill: valid JSON): "checkpoint-3 is incomplete (no trainer_state.json: its save was cut short) and is
    # passed over", the folder moved to .incomplete-checkpoint-3, the run resumed from checkpoint-2 (exit 0);
    # `--resume trainer/checkpoint-3` is refused: "trainer_state.json holds list, not a JSON object"
    import logging

    import torch
    from safetensors.torch import save_file

    from hf_ot.checkpoints import CheckpointError, choose_checkpoint

    for step, state in ((2, "{}"), (3, "[1, 2]")):
        (folder := tmp_path / f"checkpoint-{step}").mkdir()
        save_file({"w": torch.zeros(1)}, str(folder / "model.safetensors"))
        (folder / "trainer_state.json").write_text(state)
    caplog.set_level(logging.WARNING)
    try:
        choose_checkpoint(tmp_path, True)
    except CheckpointError as err:
        assert "checkpoint-3" in str(err) and "trainer_state.json" in str(err), str(err)
    else:
        assert "checkpoint-3" in caplog.text and "no trainer_state.json" not in caplog.text, caplog.text


def test_a_figures_legend_leaves_every_point_in_sight(tmp_path, monkeypatch):
    # `hf-ot robustness --models a=... b=... --rates 0.1 0.3`: a loss rises with the noise rate, so the upper line's
    # last point lies in the upper right corner, under the legend drawn there (sweep.png hid its lambda=1 point alike)
    from matplotlib.figure import Figure

    from hf_ot.recipes.plots import plot_xy

    drawn, save = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (drawn.append(fig), save(fig, *a, **k)))
    series = {  # robustness.json's losses of two tiny quickstart models, clean and at 0.1 and 0.3
        "a": [(0.0, 3.5256, 0.0), (0.1, 3.5258, 0.0), (0.3, 3.52585, 0.0)],
        "b": [(0.0, 3.5250, 0.0), (0.1, 3.5252, 0.0), (0.3, 3.5253, 0.0)],
    }
    plot_xy(series, tmp_path / "robustness.png", "fraction of input tokens replaced", "validation loss", "noise")
    (fig,) = drawn
    ax = fig.axes[0]
    box = (fig.legends[0] if fig.legends else ax.get_legend()).get_window_extent()
    hidden = [
        (x, y) for line in ax.lines for x, y in line.get_xydata() if box.contains(*ax.transData.transform((x, y)))
    ]
    assert not hidden, hidden


@pytest.mark.parametrize("name", ["sums.csv", "sums.jsonl"])
def test_a_text_column_of_numbers_is_text_or_named_with_its_file(tmp_path, name):
    # `hf-ot train quickstart --set data.train_file=sums.csv`, a text column of digits only (read as int64):
    # "Function 'binary_length' has no kernel matching input types (int64)" (exit 1; before today's cut "unsupported
    # operand type(s) for +: 'int' and 'str'"), neither the file nor data.text_column named
    import json

    from hf_ot.recipes import data as data_lib

    numbers = [i * 37 for i in range(40)]
    path = tmp_path / name
    if name.endswith(".csv"):
        path.write_text("text\n" + "".join(f"{n}\n" for n in numbers))
    else:
        path.write_text("".join(json.dumps({"text": n}) + "\n" for n in numbers))
    try:
        splits = data_lib.text_splits({"train_file": str(path)})
    except Exception as err:
        assert name in str(err), f"{type(err).__name__}: {err}"
    else:
        assert "".join(t for split in splits.values() for t in split["text"]).split() == [str(n) for n in numbers]


def test_a_classifiers_text_column_of_numbers_is_text_or_named_with_its_file(tmp_path):
    # `hf-ot train sst2_minilm --set data.train_file=codes.csv`, texts that are all digits (read as int64): "text input
    # must be of type `str` (single example), `list[str]` ..." from the tokenizer (exit 1), no file or column named
    from hf_ot.recipes import data as data_lib

    (tmp_path / "codes.csv").write_text("text,label\n" + "".join(f"{i * 7},{i % 2}\n" for i in range(30)))
    try:
        splits = data_lib.load_classification({"train_file": str(tmp_path / "codes.csv")})
    except ValueError as err:
        assert "codes.csv" in str(err), str(err)
    else:
        assert all(isinstance(t, str) for split in splits.values() for t in split["text"])


@pytest.mark.parametrize("names", [["pos", "neg"], ["a", "b", "c"]])
def test_label_names_given_for_a_saved_datasets_classes_are_used_or_refused(tmp_path, names):
    # data.train_file=<save_to_disk folder, label a ClassLabel(neg, pos)> with data.label_names=[pos, neg] (or three
    # names): the run trained on neg, pos without a word; a CSV's labels follow data.label_names, and one naming
    # classes the data does not have is refused with data.num_labels
    from datasets import ClassLabel, Dataset, Features, Value

    from hf_ot.recipes import data as data_lib

    features = Features(text=Value("string"), label=ClassLabel(names=["neg", "pos"]))
    rows = {"text": [f"review {i}" for i in range(20)], "label": [i % 2 for i in range(20)]}
    Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "saved"))
    try:
        splits = data_lib.load_classification({"train_file": str(tmp_path / "saved"), "label_names": names})
    except ValueError as err:
        assert "data.label_names" in str(err), str(err)
    else:
        assert splits["train"].features["label"].names == names
        by_text = {t: y for split in splits.values() for t, y in zip(split["text"], split["label"])}
        assert by_text["review 1"] == names.index("pos")  # (review 1 is pos)


@pytest.mark.parametrize("bom", ["utf-16", "utf-16-be"])
def test_a_utf16_file_is_named_as_utf16(tmp_path, bom):
    # Excel's "Unicode text" export: reviews.csv in UTF-16 with its byte order mark: "is not valid utf-8 text (first
    # bad byte at line 1 (0xff)): re-save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`), or set data.encoding (e.g.
    # latin-1)": latin-1 reads it as text with a NUL after every letter
    from hf_ot.recipes import data as data_lib

    text = "text,label\n" + "a good film,pos\na dull film,neg\n" * 5
    (tmp_path / "reviews.csv").write_bytes(("\ufeff" + text).encode(bom))
    with pytest.raises(ValueError) as caught:
        data_lib.load_classification({"train_file": str(tmp_path / "reviews.csv")})
    assert "data.encoding=utf-16" in str(caught.value) and "latin" not in str(caught.value), str(caught.value)
    assert data_lib.load_classification({"train_file": str(tmp_path / "reviews.csv"), "encoding": "utf-16"})
    # data.encoding reads every file: a UTF-8 one beside it was "An error occurred while generating the dataset"
    (tmp_path / "a.de").write_bytes("\ufeffHallo\n".encode(bom))
    (tmp_path / "a.en").write_text("Hello\n")
    pairs = {"train_source": str(tmp_path / "a.de"), "train_target": str(tmp_path / "a.en"), "encoding": "utf-16"}
    with raises_naming(ValueError, "a.en", "utf-16", "data.encoding"):
        data_lib.load_translation(pairs)


def test_integer_labels_from_one_are_refused_or_numbered_from_zero(tmp_path):
    # Yelp-polarity style reviews.csv labelled 1 (negative) and 2 (positive): `hf-ot train sst2_minilm --set
    # data.train_file=reviews.csv` trained a 3-class head whose class 0 has no example (id2label LABEL_0..LABEL_2),
    # without a word; run_glue numbers such labels 0..N-1
    from hf_ot.recipes import splits as splits_lib

    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,2\na dull film,1\n" * 5)
    tokenizer = lambda texts, **kw: {"input_ids": [[1]] * len(texts)}  # noqa: E731
    cfg = load_config("sst2_minilm", [f"data.train_file={tmp_path / 'reviews.csv'}", "data.validation_file=null"])
    try:
        train, _ = splits_lib.classification_datasets(cfg, tokenizer)
    except ValueError as err:  # refused, naming the file and the fix: as good
        assert "reviews.csv" in str(err) and "data.num_labels=3" in str(err), str(err)
    else:
        assert train.features["label"].num_classes == 2
    cfg = load_config("sst2_minilm", [f"data.train_file={tmp_path / 'reviews.csv'}", "data.num_labels=3"])
    assert splits_lib.classification_datasets(cfg, tokenizer)[0].features["label"].num_classes == 3  # class 0 unused


@pytest.mark.parametrize("task", ["classification", "causal-lm"])
def test_a_json_text_column_of_numbers_and_text_is_the_text(tmp_path, task):
    # reviews.jsonl whose "text" is a number in some rows ({"text": 42, ...}, {"text": "a good film", ...}): datasets
    # reads the column as Json, and the cast to string trained on '"a good film"', quotes and all, without a word
    import json

    from hf_ot.recipes import data as data_lib

    rows = [{"text": i if i % 2 else f"review {i}", "label": i % 2} for i in range(20)]
    (tmp_path / "reviews.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"train_file": str(tmp_path / "reviews.jsonl"), "val_fraction": 0.5}
    if task == "classification":
        splits = data_lib.load_classification(spec)
        texts = sorted(t for split in splits.values() for t in split["text"])
    else:
        splits = data_lib.text_splits(spec)
        texts = "".join(t for name in ("train", "validation") for t in splits[name]["text"]).splitlines()
    assert sorted(texts) == sorted(str(r["text"]) for r in rows)


@pytest.mark.parametrize("task", ["classification", "causal-lm"])
def test_a_text_column_of_lists_is_named_with_its_file(tmp_path, task):
    # notes.jsonl with {"text": ["a", "b"]} rows: "Couldn't cast array of type list<item: string> to string" (exit 1)
    import json

    from hf_ot.recipes import data as data_lib

    rows = [{"text": [f"note {i}", "more"], "label": i % 2} for i in range(20)]
    (tmp_path / "notes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    load = data_lib.load_classification if task == "classification" else data_lib.text_splits
    with pytest.raises(ValueError, match=r"notes\.jsonl.*'text'"):
        load({"train_file": str(tmp_path / "notes.jsonl")})


@pytest.mark.parametrize("name, sep", [("reviews.csv", ","), ("reviews.tsv", "\t")])
@pytest.mark.parametrize(
    "row", ['"great film, I said,1', "a good film, really,1"], ids=["unclosed-quote", "extra-field"]
)
def test_an_unclosed_quote_in_a_csv_is_named_with_its_file(tmp_path, name, sep, row):
    # a review that starts with a quote it never closes ("great film, I said): `hf-ot train sst2_minilm --set
    # data.train_file=reviews.csv` failed with "An error occurred while generating the dataset" (exit 1), no file,
    # line or cause named (pandas: "EOF inside string starting at row 1"); a row with one field too many alike
    from hf_ot.recipes import data as data_lib

    rows = ["text,label", "fine,1", row, "a dull film,0", "awful,0"]
    (tmp_path / name).write_text("\n".join(r.replace(",", sep) for r in rows) + "\n")
    with pytest.raises(ValueError) as caught:
        data_lib.load_classification({"train_file": str(tmp_path / name)})
    assert name in str(caught.value) and "quote" in str(caught.value), str(caught.value)


def test_translation_evaluation_cuts_sources_at_data_max_length(tmp_path):
    # hf-ot evaluate MODEL --config translation_bart on validation sentences longer than the model's positions:
    # training cuts sources at data.max_length (default 64), evaluation tokenized them with truncation=True only (a
    # trained BPE tokenizer's model_max_length is 1e30): IndexError in BART's position embedding, and a model shown
    # longer inputs than it trained on. Evaluation reads the sources as training did.
    from hf_ot.recipes.evaluate import evaluate_folder

    folder, overrides = _long_source_translation_folder(tmp_path)
    result = evaluate_folder(str(folder), "translation_bart", overrides)
    assert result["runs"][0]["samples"] == 2
    # calibrate's batches (its sibling) cut sources and targets at the same length, 64 when the recipe gives none
    from hf_ot.recipes.config import load_config
    from hf_ot.recipes.evaluate import calibration_batches
    from hf_ot.tokenizers import load_tokenizer

    config = load_config("translation_bart", [*overrides, "data.max_length=null"])
    batches, _, _ = calibration_batches(config, load_tokenizer(str(folder)))
    assert batches[0]["input_ids"].shape[1] == 64


@pytest.mark.parametrize("command", ["evaluate", "calibrate"])
def test_ot_only_options_on_a_plain_model_are_refused_before_loading_it(tmp_path, command):
    # hf-ot evaluate runs/sstbase/model --config sst2_minilm --steps 2 (a model.ot=null baseline): the weights were
    # loaded ("Loading weights ...", minutes for a large model), then "--steps / --solver apply to hf_ot OT models";
    # calibrate alike. The config says it: refused first (here the folder holds only its config)
    from transformers import BertConfig

    from hf_ot.recipes import evaluate

    BertConfig(architectures=["BertForSequenceClassification"]).save_pretrained(tmp_path / "model")
    with pytest.raises(UsageError, match="not one"):
        if command == "evaluate":
            evaluate.evaluate_folder(str(tmp_path / "model"), "sst2_minilm", ot_num_steps=2)
        else:
            evaluate.calibrate_folder(str(tmp_path / "model"), "sst2_minilm")


@pytest.mark.parametrize(
    "labels, fix",
    [(["data.label_names=[a,a]"], "more than once"), (["data.label_names=[]"], "two classes or more")]
    + [(["data.label_names=[a,b,c]", "data.num_labels=2"], "names 3 classes")],
)
def test_class_settings_that_disagree_are_refused_before_the_data_is_read(tmp_path, labels, fix):
    # hf-ot train sst2_minilm --set data.train_file=fruit.csv --set data.label_names=[a,a]: "Generating train split: 60
    # examples", then "names a class more than once"; num_labels=2 with 3 label_names alike; label_names=[] trained
    # with the labels found (evaluate refuses [] as disagreeing with the model's classes). The config says it all
    with pytest.raises(UsageError, match=fix):
        load_config("sst2_minilm", [f"data.train_file={tmp_path / 'never_read.csv'}", *labels])


def test_a_validation_label_the_training_data_lacks_is_refused(tmp_path):
    # hf-ot train sst2_minilm --set data.train_file=ab.csv --set data.validation_file=ab_val.csv (labels a, b; the
    # validation file's a and c): trained a model of classes [a, b, c], 'c' without one training example (a typo,
    # 'Pos' for 'pos', made a class). Refused, naming the file and label; data.label_names may name such a class
    from hf_ot.recipes.data import UnknownLabels, label_names, load_classification

    (tmp_path / "ab.csv").write_text("text,label\n" + "".join(f"t{i},{'ab'[i % 2]}\n" for i in range(20)))
    (tmp_path / "ab_val.csv").write_text("text,label\nx,a\ny,c\n")
    data = {"train_file": str(tmp_path / "ab.csv"), "validation_file": str(tmp_path / "ab_val.csv")}
    with pytest.raises(UnknownLabels, match=r"ab_val\.csv.*\['c'\]"):
        load_classification(data)
    named = load_classification({**data, "label_names": ["a", "b", "c"]})
    assert label_names(named["train"]) == ["a", "b", "c"] and named["validation"]["label"] == [0, 2]
    one_file = load_classification({"train_file": str(tmp_path / "ab.csv"), "val_fraction": 0.5})  # (held out: one)
    assert label_names(one_file["train"]) == ["a", "b"]


def test_a_translation_model_is_evaluated_on_a_validation_file_of_columns(tmp_path):
    # hf-ot evaluate runs/pairs/model --config translation_t5 --set data.validation_file=tr.jsonl: "data.train_source,
    # data.train_target, ... data.validation_file: give the pairs one way" (the recipe's line files, never set by
    # the user, were kept beside the file given); classification evaluates on such a file
    import json

    from hf_ot.recipes.data import load_translation
    from hf_ot.recipes.evaluate import evaluation_split

    rows = [{"translation": {"de": f"ein Hund {i}", "en": f"a dog {i}"}} for i in range(5)]
    (tmp_path / "tr.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config("translation_t5", [f"data.validation_file={tmp_path / 'tr.jsonl'}"])
    split = evaluation_split(load_translation, cfg.data)
    assert split["source"] == [f"ein Hund {i}" for i in range(5)] and split["target"][0] == "a dog 0"


def test_a_validation_file_read_by_data_format_names_the_format(tmp_path):
    # hf-ot train sst2_minilm --set data.train_file=r.txt --set data.format=tsv --set data.validation_file=v.csv:
    # "Column(s) ['label', 'text'] are in r.txt but not in v.csv (which has ['text,label']): ... Fix its header line."
    # The header is right: data.format=tsv read the .csv as TSV too. The error says so
    from hf_ot.recipes.data import load_classification

    (tmp_path / "r.txt").write_text("text\tlabel\n" + "".join(f"t{i}\t{'ab'[i % 2]}\n" for i in range(10)))
    (tmp_path / "v.csv").write_text("text,label\nx,a\ny,b\n")
    data = {"train_file": str(tmp_path / "r.txt"), "format": "tsv", "validation_file": str(tmp_path / "v.csv")}
    with raises_naming(ValueError, "v.csv", "data.format=tsv", "unset data.format"):
        load_classification(data)


@pytest.mark.parametrize("dev", ["dev", "valid", "val"])
def test_a_saved_datasets_dev_split_is_its_validation(tmp_path, dev):
    # hf-ot train sst2_minilm --set data.train_file=dd_dev (DatasetDict(train=..., dev=...).save_to_disk): the dev split
    # was never read; a tenth of train was held out instead. datasets names a folder's dev* / valid* / val* files the
    # validation split (datasets.data_files.SPLIT_KEYWORDS): its saved and Hub splits of those names are too
    from datasets import Dataset, DatasetDict

    from hf_ot.recipes.data import load_classification

    train = Dataset.from_dict({"text": [f"t{i}" for i in range(20)], "label": ["a", "b"] * 10})
    DatasetDict({"train": train, dev: Dataset.from_dict({"text": ["d1", "d2"], "label": ["a", "b"]})}).save_to_disk(
        str(tmp_path / "saved")
    )
    ds = load_classification({"train_file": str(tmp_path / "saved")})
    assert list(ds["validation"]["text"]) == ["d1", "d2"] and len(ds["train"]) == 20
    given = load_classification({"train_file": str(tmp_path / "saved"), "validation_file": str(tmp_path / "saved")})
    assert list(given["validation"]["text"]) == ["d1", "d2"]  # (as data.validation_file: its dev split, not train)


def test_named_labels_on_unnamed_classes_name_the_fix_where_no_training_data_numbers_them(tmp_path, monkeypatch):
    # hf-ot evaluate runs/int/model --config sst2_minilm --set data.validation_file=ab_val.csv (a model trained on ids
    # 0/1, id2label LABEL_0/LABEL_1; the file's labels a, b): "Column(s) ['sentence'] are in ../shared/data/sst2/
    # train.tsv but not in ab_val.csv": the recipe's training file (not the model's data, not given) was read to
    # number the names (installed: "train.tsv not found"); the error named neither the model's unnamed classes nor
    # the fix
    from conftest import make_base

    from hf_ot.recipes import evaluate

    model = make_base("bert", "BertForSequenceClassification")  # id2label LABEL_0, LABEL_1
    monkeypatch.setattr(evaluate, "load_for_eval", lambda *a, **k: (model, None))
    (tmp_path / "ab_val.csv").write_text("text,label\nx,a\ny,b\n")
    with pytest.raises(UsageError, match=r"ab_val\.csv: labels \['a', 'b'\] .*no names.*data\.label_names"):
        evaluate.evaluate_folder("unused", "sst2_minilm", [f"data.validation_file={tmp_path / 'ab_val.csv'}"])


@pytest.mark.parametrize("setting", [None, "data.num_labels=1", "data.label_names=[pos]"])
def test_labels_of_one_class_are_refused_not_trained_as_a_regression(tmp_path, setting):
    # hf-ot train sst2_minilm --set data.train_file=one.csv (every label pos): trained, "accuracy": 1.0, a model of
    # one output that transformers makes a regression (config problem_type "regression", MSE on the class id);
    # data.num_labels=1 and a data.label_names of one name alike. A classifier needs two classes or more
    from hf_ot.recipes.splits import classification_datasets

    (tmp_path / "one.csv").write_text("text,label\n" + "".join(f"good film {i},pos\n" for i in range(10)))
    with pytest.raises(ValueError, match="two classes or more|>= 2"):
        cfg = load_config("sst2_minilm", [f"data.train_file={tmp_path / 'one.csv'}", *[setting] * bool(setting)])
        classification_datasets(cfg, None)


def test_aligned_line_files_take_a_validation_file_of_columns(tmp_path):
    # hf-ot train translation_t5 --set data.train_source=tr.de --set data.train_target=tr.en --set
    # data.validation_file=val.jsonl: "give the pairs one way": the validation file, read as any other, is what a
    # user expects to be the validation pairs
    import json

    from hf_ot.recipes.data import load_translation

    (tmp_path / "tr.de").write_text("".join(f"ein Hund {i}\n" for i in range(6)))
    (tmp_path / "tr.en").write_text("".join(f"a dog {i}\n" for i in range(6)))
    (tmp_path / "val.jsonl").write_text(
        "".join(json.dumps({"source": f"K {i}", "target": f"C {i}"}) + "\n" for i in (1, 2))
    )
    keys = [f"data.train_source={tmp_path / 'tr.de'}", f"data.train_target={tmp_path / 'tr.en'}"]
    cfg = load_config("translation_t5", [*keys, f"data.validation_file={tmp_path / 'val.jsonl'}"])
    ds = load_translation(cfg.data)
    assert ds["train"]["source"] == [f"ein Hund {i}" for i in range(6)] and ds["train"]["target"][5] == "a dog 5"
    assert ds["validation"]["source"] == ["K 1", "K 2"] and ds["validation"]["target"] == ["C 1", "C 2"]


@pytest.mark.parametrize("form", ["validation_file", "folder"])
def test_a_short_validation_text_is_named_with_its_file(tmp_path, form):
    # hf-ot train quickstart --set data.train_file=notes.txt --set data.validation_file=small.txt: "The validation
    # text (10 tokens, 10 characters) has no complete block of data.block_size=128 tokens" named no file; a folder's
    # short validation.txt was told to "raise data.val_fraction", which holds out nothing when the data has its split
    from hf_ot.recipes.splits import causal_lm_datasets

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train.txt").write_text("".join(f"Note {i}: the field moves every token.\n" for i in range(200)))
    (tmp_path / "d" / "validation.txt").write_text("tiny note\n")
    keys = [f"data.train_file={tmp_path / 'd'}"]
    if form == "validation_file":
        keys = [
            f"data.train_file={tmp_path / 'd' / 'train.txt'}",
            f"data.validation_file={tmp_path / 'd/validation.txt'}",
        ]
    named = "validation.txt" if form == "validation_file" else "(validation)"  # the file, or the folder's split
    with raises_naming(ValueError, "data.block_size=128", named) as err:
        causal_lm_datasets(load_config("quickstart", keys))
    assert "val_fraction" not in str(err.value)


@pytest.mark.parametrize("recipe", ["sst2_minilm", "quickstart", "translation_t5"])
def test_an_excel_workbook_is_named_as_one_with_the_fix(tmp_path, recipe):
    # hf-ot train sst2_minilm --set data.train_file=reviews.xlsx: "has a lone carriage return (\r without \n) in line
    # 2"; quickstart: "An error occurred while generating the dataset"; translation_t5: "'Content_Types' does not
    # appear to be an IPv4 or IPv6 address". A workbook (a ZIP archive) is no data file datasets reads
    import zipfile

    from hf_ot.recipes import data as data_lib

    with zipfile.ZipFile(tmp_path / "reviews.xlsx", "w", zipfile.ZIP_DEFLATED) as book:
        book.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types>' + "<Default/>" * 50 + "</Types>")
        book.writestr("xl/worksheets/sheet1.xml", "".join(f"<row r='{i}'><v>{i}</v></row>" for i in range(200)))
    cfg = load_config(recipe, [f"data.train_file={tmp_path / 'reviews.xlsx'}"])
    read = {"sst2_minilm": data_lib.load_classification, "quickstart": data_lib.text_splits}
    with raises_naming(ValueError, "reviews.xlsx", "as CSV"):
        read.get(recipe, data_lib.load_translation)(cfg.data)


def test_a_semicolon_separated_csv_is_named_with_its_separator(tmp_path):
    # hf-ot train sst2_minilm --set data.train_file=semi.csv (Excel's CSV in many locales: text;label): "column(s)
    # ['text', 'sentence'] not found; the data has ['text;label']. Name the column ... data.text_column=NAME"
    from hf_ot.recipes.data import load_classification

    (tmp_path / "semi.csv").write_text("text;label\n" + "".join(f"film {i};{'ab'[i % 2]}\n" for i in range(10)))
    with pytest.raises(ValueError, match=r"semi\.csv.*';'.*comma") as err:
        load_classification({"train_file": str(tmp_path / "semi.csv")})
    assert "data.text_column" not in str(err.value)


def test_a_json_file_of_rows_as_arrays_is_told_to_write_each_row_as_an_object(tmp_path):
    # [["great film", "pos"], ...] for a classifier: datasets reads one column "text" of lists, and the error said
    # "column(s) ['label'] not found ... --set data.label_column=NAME", which no name fixes
    import json

    from hf_ot.recipes.data import load_classification

    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([["great film", "pos"], ["dull film", "neg"]] * 5))
    with pytest.raises(ValueError, match="rows are lists") as err:
        load_classification({"train_file": str(rows)})
    assert "label_column" not in str(err.value) and '{"text": ..., "label": ...}' in str(err.value)


@pytest.mark.usefixtures("in_repo")
def test_label_names_holding_a_list_get_the_label_error_not_a_type_error(tmp_path):
    # the duplicate check became len(set(names)): `label_names: [[bad, good]]` (a YAML list in a list) ended in
    # "TypeError: unhashable type: 'list'"; before, the labels were named as not among data.label_names
    from hf_ot.recipes.data import load_classification

    (tmp_path / "d.csv").write_text("text,label\na good film,good\na dull film,bad\n")
    data = {"train_file": str(tmp_path / "d.csv"), "validation_file": str(tmp_path / "d.csv")}
    with pytest.raises(ValueError, match=r"data.label_names=\[\['bad', 'good'\]\] holds 1 name"):  # (one: a list)
        load_classification({**data, "label_names": [["bad", "good"]]})


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "nonexist", "--config", "quickstart"],
        ["calibrate", "nonexist", "--config", "quickstart"],
        ["check", "nonexist"],
        ["convert", "nonexist", "out"],
    ],
)
def test_a_bare_missing_folder_is_named_before_the_hub_is_tried(argv, tmp_path, monkeypatch, capsys):
    # hf-ot evaluate nonexist: "We couldn't connect to 'https://huggingface.co' ..." alone read as a network problem;
    # a bare name (gpt2, or a mistyped folder) is tried on the Hub, with a note that no local folder has that name
    monkeypatch.chdir(tmp_path)
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "no local folder 'nonexist'" in err and "trying it as a Hub repo id" in err
    assert not (tmp_path / "out").exists()


def test_a_scratch_model_the_family_cannot_build_is_refused_before_the_data(tmp_path, capsys, monkeypatch):
    from hf_ot.recipes import data

    monkeypatch.setattr(data, "_embedded_rows", lambda *a, **k: pytest.fail("data prepared"))
    flags = tiny_run("model.scratch.n_embd=30", "model.scratch.n_head=4")  # 30 is no multiple of 4
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *set_flags(flags)]) == 2
    err = capsys.readouterr().err
    assert_names(err, "model.scratch", "gpt2", "num_heads", "30")
    assert not (tmp_path / "run").exists()


def test_a_whitespace_only_file_is_the_same_error_as_an_empty_one(tmp_path):
    empty = write_data_reading(tmp_path / "empty.txt", "")
    blank = write_data_reading(tmp_path / "blank.txt", " \n\t\n\r\n" * 2000)  # 10,000 characters, none of them text
    first = error_of({"source": "file", "train_file": empty})
    second = error_of({"source": "file", "train_file": blank})
    assert "is empty" in first and first.replace(empty, "F") == second.replace(blank, "F")
    good = write_data_reading(tmp_path / "good.txt", TEXT * 3)
    third = error_of({"source": "file", "train_file": good, "validation_file": blank})
    assert third.replace(blank, "F") == second.replace(blank, "F").replace("data.train_file", "data.validation_file")


def test_a_utf8_byte_order_mark_is_not_text(tmp_path):
    path = write_data_reading(tmp_path / "bom.txt", b"\xef\xbb\xbf" + (TEXT * 3).encode())
    splits = data_lib.text_splits({"source": "file", "train_file": path})
    assert splits["train"][0]["text"].startswith("line 0")
    assert "\ufeff" not in data_lib.text_characters(splits)
    src = write_data_reading(tmp_path / "src.txt", b"\xef\xbb\xbfeins\nzwei\n")
    tgt = write_data_reading(tmp_path / "tgt.txt", b"\xef\xbb\xbfone\r\ntwo\r\n")
    pairs = data_lib.load_translation(
        {"train_source": src, "train_target": tgt, "validation_source": src, "validation_target": tgt}
    )["train"]
    assert pairs["source"] == ["eins", "zwei"] and pairs["target"] == ["one", "two"]
    csv = write_data_reading(tmp_path / "train.csv", b"\xef\xbb\xbfsentence,label\nfine,1\nbad,0\n")
    ds = data_lib.load_classification({"train_file": csv, "validation_file": csv, "num_labels": 2})
    assert ds["train"]["text"] == ["fine", "bad"]


def test_parallel_files_split_exactly_as_files_are(tmp_path):
    sources = [f"quelle {i}" for i in range(20)]
    targets = [f"target {i}" for i in range(20)]
    sources[3] = "quelle 3 with a lone \r inside"
    targets[7] = "target 7 with a lone \r inside"
    targets[9] = "target 9 with \x0b, \x1c, \x85 and \u2028 (str.splitlines would split here)"
    src = write_data_reading(tmp_path / "src.de", "\n".join(sources) + "\n")
    tgt = write_data_reading(tmp_path / "tgt.en", "\r\n".join(targets))  # Windows line ends, no final one
    pairs = data_lib.load_translation(
        {"train_source": src, "train_target": tgt, "validation_source": src, "validation_target": tgt}
    )["train"]
    assert pairs["source"] == sources and pairs["target"] == targets
    short = write_data_reading(tmp_path / "short.en", "\n".join(targets[:19]) + "\n")
    with pytest.raises(ValueError, match="has 20 lines but .* has 19"):
        data_lib.load_translation(
            {"train_source": src, "train_target": short, "validation_source": src, "validation_target": tgt}
        )


def test_memory_is_bounded_by_characters_not_rows(tmp_path, monkeypatch):
    """A file with no newline is one row; it is cut into rows of ROW_CHARS characters and tokenized at most
    TOKENIZE_CHARS characters at a time, and the blocks are those of the whole text (scaled down: 10k, not 1M)."""
    monkeypatch.setattr(data_lib, "ROW_CHARS", 10_000)
    monkeypatch.setattr(data_lib, "TOKENIZE_CHARS", 10_000)
    text = ("abcdefghij " * 20_000).strip()  # 220k characters, one line
    path = write_data_reading(tmp_path / "one_line.txt", text)
    splits = data_lib.text_splits({"source": "file", "train_file": path, "val_fraction": 0.1})
    rows = list(splits["train"]["text"]) + list(splits["validation"]["text"])
    assert max(map(len, rows)) <= 10_000 and "".join(rows) == text
    tokenizer = build_char_tokenizer(data_lib.text_characters(splits))
    calls = []
    real = type(tokenizer).__call__

    def counting(self, texts, *args, **kwargs):
        calls.append(sum(map(len, texts)) if isinstance(texts, list) else len(texts))
        return real(self, texts, *args, **kwargs)

    monkeypatch.setattr(type(tokenizer), "__call__", counting)
    was_caching = datasets.is_caching_enabled()
    datasets.disable_caching()  # tokenized here, not read from an earlier run's cache of the same text
    try:
        train = data_lib.lm_blocks(splits["train"], tokenizer, 64)
    finally:
        if was_caching:
            datasets.enable_caching()
    assert calls and max(calls) <= 10_000
    vocab = tokenizer.get_vocab()
    ids = [vocab[c] for c in "".join(splits["train"]["text"])]
    assert train["input_ids"] == [ids[i : i + 64] for i in range(0, len(ids) - 63, 64)]


def test_split_text_cuts_before_whitespace_and_keeps_the_text():
    text = "word " * 5000
    pieces = data_lib.split_text(text, 1000)
    assert "".join(pieces) == text and max(map(len, pieces)) <= 1000
    assert all(p.startswith(" ") or i == 0 for i, p in enumerate(pieces))
    assert "".join(data_lib.split_text("x" * 2500, 1000)) == "x" * 2500


def test_streaming_local_text_files(tmp_path, monkeypatch):
    path = write_data_reading(tmp_path / "corpus.txt", TEXT * 5)
    data = {"source": "file", "train_file": path, "streaming": True, "validation_rows": 30, "block_size": 16}
    splits = data_lib.text_splits(data)
    tokenizer = build_char_tokenizer(data_lib.text_characters(splits))
    train, validation = data_lib.lm_datasets(data, tokenizer, splits=splits)
    assert len(next(iter(train))["input_ids"]) == 16 and next(iter(validation))
    # a local folder of text files read through the hub loader, streamed: its column is found
    folder = tmp_path / "texts"
    folder.mkdir()
    write_data_reading(folder / "a.txt", TEXT * 5)
    splits = data_lib.text_splits({"source": "hub", "dataset": str(folder), "streaming": True, "validation_rows": 30})
    assert next(iter(splits["train"]))["text"]


def test_a_recipe_trains_on_a_streamed_local_file(tmp_path, in_repo):
    from hf_ot.recipes import load_config, run_recipe

    path = write_data_reading(tmp_path / "corpus.txt", TEXT * 5)
    cfg = load_config(
        "quickstart",
        tiny_run(
            "data.source=file",
            f"data.train_file={path}",
            "data.streaming=true",
            "data.validation_rows=30",
            f"output_dir={tmp_path / 'run'}",
        ),
    )
    results = run_recipe(cfg)
    assert results["eval_task_loss"] > 0


def test_a_lone_carriage_return_in_a_classification_file_is_named(tmp_path):
    good = write_data_reading(
        tmp_path / "good.tsv", b"sentence\tlabel\r\ngood film\t1\r\nbad film\t0\r\n"
    )  # Windows line ends
    assert list(data_lib.load_classification({"train_file": good, "validation_file": good})["train"]["label"]) == [1, 0]
    bad = write_data_reading(tmp_path / "bad.tsv", b"sentence\tlabel\ngood film\t1\nbad \r film\t0\nok\t1\n")
    with raises_naming(ValueError, "bad.tsv", "carriage return", "line 3"):
        data_lib.load_classification({"train_file": bad, "validation_file": good})


@pytest.mark.parametrize("compression", ["gzip", "bz2", "lzma"])
def test_compressed_files_are_read_as_their_text(tmp_path, compression):
    """A .gz/.bz2/.xz file (the shipped Multi30k files are gzip) gives the rows of its decompressed text, for every
    reader; the checks that read raw bytes (BOM, empty file, lone \\r) see the same text."""
    import importlib

    module = importlib.import_module(compression)

    def packed(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_bytes(module.compress(text.encode()))
        return str(path)

    sources, targets = ["eins", "zwei", "drei"], ["one", "two", "three"]
    src, tgt = packed("src.de.z", "\n".join(sources) + "\n"), packed("tgt.en.z", "\r\n".join(targets) + "\r\n")
    pairs = data_lib.load_translation(
        {"train_source": src, "train_target": tgt, "validation_source": src, "validation_target": tgt}
    )["train"]
    assert pairs["source"] == sources and pairs["target"] == targets
    plain = data_lib.text_splits({"source": "file", "train_file": write_data_reading(tmp_path / "plain.txt", TEXT * 3)})
    squeezed = data_lib.text_splits({"source": "file", "train_file": packed("text.txt.z", TEXT * 3)})
    assert data_lib.text_characters(squeezed) == data_lib.text_characters(plain)
    assert "is empty" in error_of({"source": "file", "train_file": packed("blank.txt.z", " \n\t\n" * 50)})


@pytest.mark.parametrize("streaming", [False, True], ids=["read", "streamed"])
def test_a_file_starting_with_64_kib_of_blank_lines_is_not_empty(tmp_path, streaming):
    path = write_data_reading(tmp_path / "corpus.txt", "\n" * (1 << 16) + TEXT * 5)
    data = {"source": "file", "train_file": path, "streaming": streaming, "validation_rows": 30, "block_size": 16}
    splits = data_lib.text_splits(data)
    assert any(row["text"].strip() for row in splits["train"])
    blank = write_data_reading(tmp_path / "blank.txt", "\n \n" * (1 << 16))  # only whitespace: empty, read or streamed
    with pytest.raises(ValueError, match="empty"):
        data_lib.text_splits({**data, "train_file": blank})


def test_a_relative_data_path_is_taken_from_the_current_folder(tmp_path, monkeypatch):
    """`--set data.train_file=mine.txt` names the file in the folder the user runs from; the packaged recipes'
    ../shared/data paths still resolve beside the checkout when nothing of that name is in the current folder."""
    from hf_ot.recipes.data import resolve_path

    (tmp_path / "mine.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    assert resolve_path("mine.txt") == str(tmp_path / "mine.txt")
    checkout = Path(__file__).resolve().parents[1]
    assert resolve_path("README.md") == str(checkout / "README.md")  # not in tmp_path: the checkout's
    (tmp_path / "README.md").write_text("mine")
    assert resolve_path("README.md") == str(tmp_path / "README.md")  # the current folder's comes first
    assert resolve_path("missing.txt") == str(tmp_path / "missing.txt")  # named where the user looked


def test_in_memory_text_is_tokenized_once_across_processes(tmp_path, monkeypatch):
    """Under torchrun / accelerate (WORLD_SIZE > 1) the main process tokenizes the embedded text or a val_fraction
    split first and the other processes load its result: an in-memory map is cached under a name given by the input
    and the function (datasets caches maps of file-backed data only)."""
    import datasets

    from hf_ot.recipes.data import lm_blocks
    from hf_ot.recipes.tokenizer import build_char_tokenizer

    text = "the quick brown fox jumps over the lazy dog. " * 40
    tokenizer = build_char_tokenizer(text)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WORLD_SIZE", "2")
    first = lm_blocks(datasets.Dataset.from_dict({"text": [text]}), tokenizer, 16)
    assert list((tmp_path / "cache" / "hf_ot_in_memory").glob("*.arrow"))  # the main process's result, on disk

    def must_not_run(self, batch):
        raise AssertionError("the second process tokenized again")

    monkeypatch.setattr(data_lib._TokenizeAndGroup, "__call__", must_not_run)
    second = lm_blocks(datasets.Dataset.from_dict({"text": [text]}), tokenizer, 16)  # another process, same data
    assert second["input_ids"] == first["input_ids"] and len(first) > 0
    with pytest.raises(AssertionError, match="tokenized again"):  # other text: tokenized (and so refused here)
        lm_blocks(datasets.Dataset.from_dict({"text": [text + "more"]}), tokenizer, 16)


@pytest.mark.parametrize("task", ["classification", "causal-lm"])
def test_a_full_disk_while_datasets_caches_the_data_names_space_and_the_cache_folder(tmp_path, monkeypatch, task):
    import errno

    import datasets
    from datasets.arrow_writer import ArrowWriter

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ArrowWriter, "write_table", full)
    monkeypatch.setattr(ArrowWriter, "write_examples_on_file", full)
    monkeypatch.setattr(ArrowWriter, "write_batch", full)
    rows = "".join(f"review {i},{i % 2}\n" for i in range(20))
    path = tmp_path / ("r.csv" if task == "classification" else "t.txt")
    path.write_text("text,label\n" + rows if task == "classification" else rows)
    with pytest.raises(OSError, match="No space left") as err:
        if task == "classification":
            data_lib.load_classification({"train_file": str(path)})
        else:
            data_lib.text_splits({"train_file": str(path)})
    assert str(datasets.config.HF_DATASETS_CACHE) in str(err.value) and "HF_DATASETS_CACHE" in str(err.value)
    assert type(err.value) is OSError  # (not datasets' DatasetGenerationError)


@pytest.mark.parametrize("streaming", [False, True])
def test_one_line_text_is_read_and_tokenized_as_far_as_the_blocks_asked_for_need(tmp_path, monkeypatch, streaming):
    """A text of one line (scaled down: rows of 10k characters, a 1M-character line): data.max_train_blocks and
    data.validation_rows bound what is tokenized (and, streamed, what is read), not the file's size; the blocks are
    the first blocks of the whole text."""
    monkeypatch.setattr(data_lib, "ROW_CHARS", 10_000)
    monkeypatch.setattr(data_lib, "TOKENIZE_CHARS", 10_000)
    monkeypatch.setattr(data_lib, "GROUP_BYTES", 10_000)
    text = ("abcdefghij " * 100_000).strip()  # 1.1M characters, one line
    path = write_data_reading(tmp_path / "one_line.txt", text)
    read, opened = [0], data_lib._open_data

    class Counting:  # the file's bytes as read
        def __init__(self, f):
            self.f = f

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def read(self, *args):
            data = self.f.read(*args)
            read[0] += len(data)
            return data

        def read1(self, *args):
            return self.read(*args)

        def readinto(self, buffer):
            n = self.f.readinto(buffer)
            read[0] += n or 0
            return n

    monkeypatch.setattr(data_lib, "_open_data", lambda p: Counting(opened(p)))
    tokenizer = build_char_tokenizer("abcdefghij ")
    tokenized, real = [0], type(tokenizer).__call__

    def counting(self, texts, *args, **kwargs):
        tokenized[0] += sum(map(len, texts)) if isinstance(texts, list) else len(texts)
        return real(self, texts, *args, **kwargs)

    monkeypatch.setattr(type(tokenizer), "__call__", counting)
    data = {"train_file": path, "block_size": 64, "max_train_blocks": 8, "max_eval_blocks": 8}
    data |= {"streaming": True, "validation_rows": 1} if streaming else {}
    splits = data_lib.text_splits(data)
    start = len(next(iter(splits["validation"]))["text"]) if streaming else 0  # (held out: the first row, the end)
    read[0] = 0  # (a file is read whole into datasets' cache, its checks read its start; a stream as needed)
    train, validation = data_lib.lm_datasets(data, tokenizer, splits=splits)
    blocks = [list(b["input_ids"]) for b in train]
    assert len(blocks) == 8 and len(validation) == 8
    assert tokenized[0] < len(text) // 10  # tokenized: the rows the blocks come from, not the whole line
    if streaming:
        assert 0 < read[0] < len(text) // 10  # read: the rows the blocks come from
    vocab = tokenizer.get_vocab()
    ids = [vocab[c] for c in text[start : start + 8 * 64]]
    assert blocks == [ids[i : i + 64] for i in range(0, 8 * 64, 64)]


@pytest.mark.parametrize("fmt", TABLE_FORMATS)
def test_classification_reads_every_format_with_string_labels_inferred(tmp_path, fmt):
    rows = [{"text": t, "label": label} for t, label in REVIEWS]
    ds = data_lib.load_classification(table_source(tmp_path, fmt, rows))
    assert data_lib.label_names(ds["train"]) == ["neg", "pos"]  # sorted, as transformers' run_glue
    got = sorted((t, ["neg", "pos"][label]) for split in ds.values() for t, label in zip(split["text"], split["label"]))
    assert got == sorted(REVIEWS) and len(ds["validation"]) == 3  # data.val_fraction 0.1 held out


@pytest.mark.parametrize("fmt", TABLE_FORMATS)
def test_translation_reads_every_format_of_pairs(tmp_path, fmt):
    rows = [{"source": s, "target": t} for s, t in PAIRS]
    ds = data_lib.load_translation(table_source(tmp_path, fmt, rows))
    got = sorted(pair for split in ds.values() for pair in zip(split["source"], split["target"]))
    assert got == sorted(PAIRS) and set(ds) == {"train", "validation"}


@pytest.mark.parametrize("fmt", ["text", "text.gz", *TABLE_FORMATS])
def test_causal_lm_reads_every_format_as_one_text(tmp_path, fmt):
    """A text file is its text exactly; a table's text column is its rows joined by newlines."""
    if fmt in ("text", "text.gz"):
        text = "".join(d + "\n" for d in DOCS)
        path = tmp_path / ("corpus.txt" + (".gz" if fmt == "text.gz" else ""))
        path.write_bytes(gzip.compress(text.encode()) if fmt == "text.gz" else text.encode())
        data = {"train_file": str(path)}
    else:
        text = "".join(d + "\n" for d in DOCS)
        data = table_source(tmp_path, fmt, [{"text": d, "other": 1} for d in DOCS])
    splits = data_lib.text_splits(data)
    joined = "".join(splits["train"]["text"]) + "".join(splits["validation"]["text"])
    assert joined == text and 0 < len("".join(splits["validation"]["text"])) < len(text) / 5


def test_a_text_file_for_classification_and_a_missing_column_are_named(tmp_path):
    path = write_rows(tmp_path / "r.jsonl", "jsonl", [{"review": t, "label": label} for t, label in REVIEWS])
    with raises_naming(ValueError, "['text', 'sentence']", "not found", "['review', 'label']"):
        data_lib.load_classification({"train_file": str(path)})
    assert data_lib.load_classification({"train_file": str(path), "text_column": "review"})["train"].num_rows == 27
    with pytest.raises(FileNotFoundError, match="nothing matches"):
        data_lib.load_classification({"train_file": str(tmp_path / "none" / "*.csv")})


def test_hub_and_saved_splits_keep_their_class_names(tmp_path, monkeypatch):
    """A dataset with a ClassLabel (Hub or save_to_disk) keeps its names and split; a Hub id is loaded only when
    data.dataset names it."""
    feature = ClassLabel(names=["negative", "positive"])
    dd = DatasetDict(
        train=Dataset.from_dict({"sentence": ["a", "b", "c"], "label": [0, 1, 1]}).cast_column("label", feature),
        validation=Dataset.from_dict({"sentence": ["d"], "label": [1]}).cast_column("label", feature),
    )
    asked = []
    monkeypatch.setattr(data_lib, "load_dataset", lambda name, config=None: asked.append((name, config)) or dd)
    ds = data_lib.load_classification({"dataset": "user/reviews", "dataset_config": "v1"})
    assert asked == [("user/reviews", "v1")] and data_lib.label_names(ds["validation"]) == ["negative", "positive"]
    assert ds["validation"]["text"] == ["d"]
    dd.save_to_disk(str(tmp_path / "saved"))
    ds = data_lib.load_classification({"dataset": str(tmp_path / "saved")})
    assert len(asked) == 1 and ds["train"]["label"] == [0, 1, 1] and len(ds["validation"]) == 1


def test_integer_labels_with_names_and_without(tmp_path):
    path = write_rows(tmp_path / "r.csv", "csv", [{"text": t, "label": int(lab == "pos")} for t, lab in REVIEWS])
    named = data_lib.load_classification({"train_file": str(path), "label_names": ["bad", "good"]})
    assert data_lib.label_names(named["train"]) == ["bad", "good"]
    plain = data_lib.load_classification({"train_file": str(path)})
    assert data_lib.label_names(plain["train"]) is None and plain["train"].features["label"].num_classes == 2


def test_your_data_replaces_the_recipes_data_and_its_card_names(tmp_path):
    """--set data.train_file on a packaged recipe: the recipe's validation file and the card's SST-2 go with its data;
    the card names the user's file. card.dataset_name set with it is kept."""
    mine = str(tmp_path / "reviews.csv")
    cfg = load_config("sst2_minilm", [f"data.train_file={mine}"])
    assert cfg.data.validation_file is None and cfg.data.max_train_samples == 2000  # sizes stay
    assert (cfg.card.dataset_name, cfg.card.dataset_type, cfg.card.datasets) == (None, None, None)
    assert card_data(cfg) == {"name": "reviews.csv", "type": "custom", "datasets": None}
    named = load_config("sst2_minilm", [f"data.train_file={mine}", "card.dataset_name=My reviews"])
    assert card_data(named)["name"] == "My reviews"
    assert card_data(load_config("sst2_minilm"))["name"] == "SST-2"  # the recipe's own data keeps its card
    val = load_config("sst2_minilm", [f"data.validation_file={tmp_path / 'held_out.csv'}"])  # trains on SST-2 still
    assert val.data.train_file == "../shared/data/sst2/train.tsv" and val.card.dataset_name is None
    assert card_data(val)["name"] == "train.tsv, held_out.csv" and card_data(val)["datasets"] is None
    hub = load_config("translation_t5", ["data.dataset=user/pairs"])
    assert hub.data.train_source is None and card_data(hub) == {
        "name": "user/pairs",
        "type": "user/pairs",
        "datasets": ["user/pairs"],
    }
    quick = load_config("quickstart", [f"data.train_file={tmp_path / 'notes.txt'}"])
    assert quick.data.kind() == "file" and card_data(quick)["name"] == "notes.txt"
    assert "CPython" in card_data(load_config("quickstart"))["name"]
    globbed = load_config("sst2_minilm", [f"data.train_file={tmp_path / 'mine' / '*.csv'}"])
    assert card_data(globbed)["name"] == "mine/*.csv"  # the pattern alone (*.csv) names nothing


@pytest.mark.filterwarnings("ignore::hf_ot.OTDeprecationWarning")  # training.ot_lambda: the earlier spelling
def test_lambda_has_one_home():
    moved = load_config("quickstart", ["training.ot_lambda=0.5", "model.ot.ot_lambda=0.5"])
    assert moved.model.ot["ot_lambda"] == 0.5 and "ot_lambda" not in moved.training
    only = load_config("sst2_minilm", ["model.ot={ot_num_steps: 2}", "training.ot_lambda=0.3"])
    assert only.model.ot == {"ot_num_steps": 2, "ot_lambda": 0.3} and "ot_lambda" not in only.training
    with raises_naming(UsageError, "training.ot_lambda=0.5", "model.ot.ot_lambda=1.0"):
        load_config("quickstart", ["training.ot_lambda=0.5", "model.ot.ot_lambda=1.0"])
    # checked once, where it lives: the model config's ot_lambda
    with raises_naming(UsageError, "model.ot.ot_lambda", "from 0 to 1e+06"):
        load_config("quickstart", ["training.ot_lambda=2e6", "model.ot.ot_lambda=2e6"])


def test_help_lists_every_recipe_key_from_the_dataclasses(capsys):
    import dataclasses

    from hf_ot.models.ot_config import OT_SETTINGS
    from hf_ot.recipes.config import SECTIONS
    from hf_ot.training import OTSeq2SeqTrainingArguments

    with pytest.raises(SystemExit) as done:
        main(["train", "sst2_minilm", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    keys = [f"{name}.{f.name}" for name, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
    keys += [f"model.ot.{s.field}" for s in OT_SETTINGS]
    keys += [f"training.{f.name}" for f in dataclasses.fields(OTSeq2SeqTrainingArguments) if f.init]
    keys.remove("training.ot_lambda")  # lambda lives in model.ot.ot_lambda
    listed = set(re.findall(r"^  ([a-z0-9_.]+) \(", out, re.M))
    assert set(keys) <= listed and "training.ot_lambda" not in listed
    assert re.search(
        r"^  data.train_file \(str, unset by default\)  \[this config: '../shared/data/sst2/train.tsv'\]$", out, re.M
    )
    assert re.search(r"^  training.eval_steps \(float, default 0.2\)", out, re.M)  # the recipe's own default
    assert re.search(
        r"^  model.ot.ot_lambda \(float, default 0.1\)  \[this config: 0.1\]\n      weight of reg", out, re.M
    )


def test_the_readme_section_has_one_command_per_task():
    commands = readme_commands()
    assert [shlex.split(c)[2] for c in commands] == ["sst2_minilm", "quickstart", "translation_t5"]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["classification-csv", "causal-lm-text", "translation-jsonl"])
def test_the_readme_commands_train_on_your_own_data(tmp_path, monkeypatch, index):
    from huggingface_hub import ModelCard

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "".join(f'"{t}",{lab}\n' for t, lab in REVIEWS))
    (tmp_path / "notes.txt").write_text("".join(d + "\n" for d in DOCS))
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps({"source": s, "target": t}) + "\n" for s, t in PAIRS))
    argv = shlex.split(readme_commands()[index])[1:]
    common = ["training.max_steps=2", "training.logging_steps=1", "training.per_device_train_batch_size=4"]
    assert main([*argv, *set_flags([*common, *TOY[argv[1]]])]) == 0
    out = Path(argv[argv.index("--output-dir") + 1])
    folder = out / "model"
    config = json.loads((folder / "config.json").read_text())
    card = ModelCard.load(folder / "README.md")
    names = {r.dataset_name for r in card.data.eval_results or []}
    data_file = {"sst2_minilm": "reviews.csv", "quickstart": "notes.txt", "translation_t5": "pairs.jsonl"}[argv[1]]
    assert names == {data_file}, names
    text = card.text
    for other in ("SST-2", "glue", "pydoc", "CPython", "Multi30k", "multi30k"):
        assert other not in text and other not in str(card.data.to_dict())
    if argv[1] == "sst2_minilm":
        from transformers import pipeline

        assert config["id2label"] == {"0": "neg", "1": "pos"} and config["label2id"] == {"neg": 0, "pos": 1}
        classify = pipeline("text-classification", model=str(folder), trust_remote_code=True)
        assert classify("loved it")[0]["label"] in {"neg", "pos"}
    else:
        from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

        auto = AutoModelForCausalLM if argv[1] == "quickstart" else AutoModelForSeq2SeqLM
        model = auto.from_pretrained(folder, trust_remote_code=True)
        assert model.config.ot_num_steps >= 1


def test_data_section_keys_all_have_help():
    import dataclasses

    assert all(f.metadata.get("help") for f in dataclasses.fields(DataSection))


def test_labels_that_are_no_class_ids_are_named_before_training(tmp_path):
    """Integer labels beyond the classes data.label_names names (they failed in the loss, mid-training), and labels
    that are no classes (booleans, floats, mixed JSON values) get the one error naming the fix."""
    path = write_rows(tmp_path / "r.jsonl", "jsonl", [{"text": f"row {i}", "label": i % 3} for i in range(12)])
    with pytest.raises(ValueError, match=r"labels \[2\] are outside 0..1 \(data.label_names names 2 classes\)"):
        data_lib.load_classification({"train_file": str(path), "label_names": ["bad", "good"]})
    for i, labels in enumerate(([True, False], [0.5, 1.5], ["pos", 1])):
        rows = [{"text": f"row {j}", "label": labels[j % 2]} for j in range(12)]
        with pytest.raises(ValueError, match="must hold integer class ids.*floats and booleans are not classes"):
            data_lib.load_classification({"train_file": str(write_rows(tmp_path / f"{i}.jsonl", "jsonl", rows))})
    names = write_rows(tmp_path / "names.jsonl", "jsonl", [{"text": "a", "label": "pos"}] * 4)
    ids = write_rows(tmp_path / "ids.csv", "csv", [{"text": "b", "label": 1}] * 2)
    with pytest.raises(ValueError, match="class names in one split and integer ids in another"):  # was a TypeError
        data_lib.load_classification({"train_file": str(names), "validation_file": str(ids)})


@pytest.mark.parametrize(
    "setting, key",
    [
        ("train_file=x.csv", "data.train_file"),
        ("max_steps=3", "training.max_steps"),
        ("lambda=1", "model.ot.ot_lambda"),  # an earlier spelling: the key that took its place
        ("ot_num_steps=1", "model.ot.ot_num_steps"),
        ("data.split=train", "data.train_split"),  # a key of earlier versions: the one that took its place
    ],
)
def test_a_key_given_without_its_section_names_the_key(setting, key):
    """`--set train_file=...` suggested 'training'; a key of another section is named with its section."""
    with pytest.raises(UsageError, match=rf"Did you mean '{re.escape(key)}'\?"):
        load_config("quickstart", [setting])


def test_a_json_file_of_one_object_is_read_as_its_columns_or_by_data_field(tmp_path):
    """datasets' JSON reader makes one row of a file that is one object: an object of columns is read as its
    columns, an object holding the rows under a key is named with data.field, which reads it (a causal LM raised a
    TypeError; a classifier said there was 1 training row)."""
    rows = [{"text": t, "label": label} for t, label in REVIEWS]
    columns = tmp_path / "columns.json"
    columns.write_text(json.dumps({"text": [r["text"] for r in rows], "label": [r["label"] for r in rows]}))
    assert len(data_lib.load_classification({"train_file": str(columns)})["train"]) == 27
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps({"version": 1, "data": rows}))
    with raises_naming(ValueError, "one JSON object", "['version', 'data']", "data.field=data"):
        data_lib.load_classification({"train_file": str(nested)})
    assert data_lib.label_names(data_lib.load_classification({"train_file": str(nested), "field": "data"})["train"])
    docs = tmp_path / "docs.json"
    docs.write_text(json.dumps({"text": DOCS}))
    splits = data_lib.text_splits({"train_file": str(docs)})
    assert "".join(splits["train"]["text"]) + "".join(splits["validation"]["text"]) == "".join(d + "\n" for d in DOCS)


def test_a_file_without_extension_is_read_by_its_content(tmp_path):
    """JSON Lines or Parquet without an extension are read as such (they were read as CSV, or as a causal LM's raw
    text, braces and all)."""
    jsonl = write_rows(tmp_path / "reviews.jsonl", "jsonl", [{"text": t, "label": label} for t, label in REVIEWS])
    parquet = write_rows(tmp_path / "reviews.parquet", "parquet", [{"text": t, "label": label} for t, label in REVIEWS])
    for path in (jsonl, parquet):
        bare = path.rename(tmp_path / "data")
        assert data_lib.label_names(data_lib.load_classification({"train_file": str(bare)})["train"]) == ["neg", "pos"]
        bare.unlink()
    write_rows(tmp_path / "notes", "jsonl", [{"text": d} for d in DOCS])
    splits = data_lib.text_splits({"train_file": str(tmp_path / "notes")})
    assert "{" not in "".join(splits["train"]["text"])


def test_a_folder_is_split_by_its_file_names_as_datasets_does(tmp_path):
    """A folder with train* and validation* files (of any formats) is those splits, given as data.train_file or
    data.dataset (its validation file was trained on; two formats failed in the reader); a README beside the data is
    left out; files of two formats without split names are named."""
    rows = [{"text": t, "label": label} for t, label in REVIEWS]
    write_rows(tmp_path / "d" / "train.jsonl", "jsonl", rows[:24])
    write_rows(tmp_path / "d" / "validation.csv", "csv", rows[24:])
    (tmp_path / "d" / "README.md").write_text("# my reviews\n")
    for key in ("train_file", "dataset"):
        ds = data_lib.load_classification({key: str(tmp_path / "d")})
        assert ds["validation"]["text"] == [r["text"] for r in rows[24:]] and len(ds["train"]) == 24
    write_rows(tmp_path / "mixed" / "a.jsonl", "jsonl", rows[:24])
    write_rows(tmp_path / "mixed" / "b.csv", "csv", rows[24:])
    with pytest.raises(ValueError, match=r"several formats \(csv, jsonl\)"):
        data_lib.load_classification({"train_file": str(tmp_path / "mixed")})
    with raises_naming(FileNotFoundError, "data.dataset", "'./typo'", "not found", "--set data.dataset=PATH"):
        data_lib.load_classification({"dataset": "./typo"})  # not a Hub id; the fix names the key given


def test_validation_data_is_the_users_whatever_the_training_data(tmp_path):
    """data.validation_file is the validation data beside a save_to_disk folder (it was ignored), as a save_to_disk
    folder (it failed in the arrow reader), and beside a causal LM's embedded text (it was ignored, also by
    `hf-ot evaluate`); the card names it."""
    rows = [{"text": t, "label": label} for t, label in REVIEWS]
    Dataset.from_list(rows[:20]).save_to_disk(str(tmp_path / "saved"))
    held = write_rows(tmp_path / "held.csv", "csv", rows[20:])
    ds = data_lib.load_classification({"train_file": str(tmp_path / "saved"), "validation_file": str(held)})
    assert (len(ds["train"]), len(ds["validation"])) == (20, 10)
    ds = data_lib.load_classification({"train_file": str(held), "validation_file": str(tmp_path / "saved")})
    assert (len(ds["train"]), len(ds["validation"])) == (10, 20)
    notes = tmp_path / "notes.txt"
    notes.write_text("".join(d + "\n" for d in DOCS))
    cfg = load_config("quickstart", [f"data.validation_file={notes}"])
    assert "".join(data_lib.text_splits(cfg.data)["validation"]["text"]) == notes.read_text()
    assert card_data(cfg)["name"] == "pydoc_data.topics (CPython reference manual), notes.txt"


def test_translation_pairs_of_a_folder_and_line_files_without_validation(tmp_path):
    """A folder of source/target pairs given as data.dataset is read with those columns (Multi30k's de/en were
    required); aligned line files without validation files hold out data.val_fraction, as every other input does."""
    write_rows(tmp_path / "d" / "train.jsonl", "jsonl", [{"source": s, "target": t} for s, t in PAIRS[:20]])
    write_rows(tmp_path / "d" / "validation.jsonl", "jsonl", [{"source": s, "target": t} for s, t in PAIRS[20:]])
    ds = data_lib.load_translation({"dataset": str(tmp_path / "d")})
    assert list(zip(ds["validation"]["source"], ds["validation"]["target"])) == PAIRS[20:]
    (tmp_path / "train.de").write_text("".join(s + "\n" for s, _ in PAIRS))
    (tmp_path / "train.en").write_text("".join(t + "\n" for _, t in PAIRS))
    ds = data_lib.load_translation(
        {"train_source": str(tmp_path / "train.de"), "train_target": str(tmp_path / "train.en")}
    )
    assert (len(ds["train"]), len(ds["validation"])) == (27, 3)
    assert sorted(pair for split in ds.values() for pair in zip(split["source"], split["target"])) == sorted(PAIRS)


def test_translation_test_pairs_are_scored_after_training(tmp_path, monkeypatch):
    """A folder's test split (also data.test_source / test_target) was read and never scored: after training its
    generated translations' BLEU and ROUGE are in results.json as test_*, against sacrebleu on the test pairs."""
    import sacrebleu

    from hf_ot import metrics

    pairs = [(f"der kleine Hund {i} läuft nach Hause", f"the little dog {i} runs home") for i in range(30)]

    def translate(model, tokenizer, sources, *args, **kwargs):  # a stand-in that gets the odd sentences right
        return [pairs[int(s.split()[3])][1] if int(s.split()[3]) % 2 else "the little cat runs" for s in sources]

    monkeypatch.setattr(metrics, "generate_texts", translate)
    monkeypatch.chdir(tmp_path)
    for split, rows in (("train", pairs[:20]), ("validation", pairs[20:25]), ("test", pairs[25:])):
        write_rows(tmp_path / "d" / f"{split}.jsonl", "jsonl", [{"source": s, "target": t} for s, t in rows])
    toy = [*TOY["translation_t5"], "evaluation.generate_samples=5", "evaluation.metrics=[bleu,rouge]"]
    flags = set_flags(["training.max_steps=2", "training.per_device_train_batch_size=4", *toy])
    assert main(["train", "translation_t5", "--set", "data.train_file=d", "--output-dir", "run", *flags]) == 0
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    sources, references = [s for s, _ in pairs[25:]], [t for _, t in pairs[25:]]
    expected = sacrebleu.corpus_bleu(translate(None, None, sources), [references]).score
    assert results["test_samples"] == 5 and 0 < expected < 100 and results["test_bleu"] == pytest.approx(expected)
    assert 0 < results["test_rouge1"] < 100 and results["test_bleu"] != results["bleu"]  # (validation: other pairs)


@pytest.mark.parametrize("fmt", FORMATS_OF_LABELS)
def test_an_integer_label_training_lacks_is_refused_naming_it_and_the_file(tmp_path, fmt):
    train = table_source(tmp_path / "t", fmt, [{"text": f"row {i}", "label": i % 2} for i in range(12)])["train_file"]
    rows = [{"text": f"held {i}", "label": i % 3} for i in range(9)]  # class 2: never trained
    validation = table_source(tmp_path / "v", fmt, rows)["train_file"]
    with pytest.raises(data_lib.UnknownLabels, match=r"labels \[2\] are not in the classes of .*data.num_labels") as e:
        data_lib.load_classification({"train_file": train, "validation_file": validation})
    assert e.value.file == validation and e.value.labels == [2]
    told = data_lib.load_classification({"train_file": train, "validation_file": validation, "num_labels": 3})
    assert told["validation"].features["label"].num_classes == 3  # data.num_labels says class 2 exists


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_training_set_of_one_class_is_refused_though_validation_has_two(tmp_path, fmt):
    from types import SimpleNamespace

    from hf_ot.recipes.splits import classification_datasets

    train = write_rows(tmp_path / f"t.{fmt}", fmt, [{"text": f"row {i}", "label": "pos"} for i in range(8)])
    rows = [{"text": f"r {i}", "label": ["pos", "neg"][i % 2]} for i in range(4)]
    validation = write_rows(tmp_path / f"v.{fmt}", fmt, rows)
    for labels in (None, ["neg", "pos"]):  # the validation classes, or data.label_names, give the model two classes
        data = {"train_file": str(train), "validation_file": str(validation), "label_names": labels}
        cfg = SimpleNamespace(data=DataSection.of(data))
        if labels is None:  # (named already as labels the training data lacks)
            with pytest.raises(data_lib.UnknownLabels, match="neg"):
                classification_datasets(cfg, tokenizer=None)
            continue
        with pytest.raises(ValueError, match=r"training labels are one class \(\['pos'\], of 2\)"):
            classification_datasets(cfg, tokenizer=None)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet"])
def test_labels_mixing_integer_ids_and_names_are_refused_in_every_format(tmp_path, fmt):
    labels = ["0", "1", "pos", "neg"] if fmt in ("jsonl", "parquet") else [0, 1, "pos", "neg"]  # (CSV: all text)
    path = write_rows(tmp_path / f"r.{fmt}", fmt, [{"text": f"row {i}", "label": labels[i % 4]} for i in range(12)])
    with raises_naming(ValueError, f"r.{fmt}", "'0', '1'", "'neg', 'pos'", "ids 0..N-1 or as names"):
        data_lib.load_classification({"train_file": str(path)})


def test_csv_classes_named_none_na_null_are_kept_and_rows_without_text_are_numbered(tmp_path):
    classes = ["None", "NA", "null", "n/a", "NaN"]
    rows = [{"text": f"review {i}", "label": classes[i % 5]} for i in range(15)] + [{"text": "NA", "label": "None"}]
    ds = data_lib.load_classification({"train_file": str(write_rows(tmp_path / "r.csv", "csv", rows))})
    assert sorted(data_lib.label_names(ds["train"])) == sorted(classes)
    assert len(ds["train"]) + len(ds["validation"]) == 16  # the text "NA" is a review too
    rows = [{"text": "" if i in (3, 7) else f"r {i}", "label": i % 2} for i in range(10)]
    empty = write_rows(tmp_path / "e.csv", "csv", rows)
    with raises_naming(ValueError, "2 rows without text", "[4, 8]"):
        data_lib.load_classification({"train_file": str(empty)})


def test_translation_run_states_its_direction_before_training_and_on_the_card(tmp_path, monkeypatch, caplog):
    """A JSON Lines file of {"en", "de"} pairs without data.source_column trains de -> en: the run says so before
    training, results.json and the model card state it."""
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "pairs.jsonl", "jsonl", [{"en": t, "de": s} for s, t in PAIRS])
    flags = set_flags(["training.max_steps=1", "training.per_device_train_batch_size=4", *TOY["translation_t5"]])
    assert main(["train", "translation_t5", "--set", "data.train_file=pairs.jsonl", "--output-dir", "run", *flags]) == 0
    assert_names(caplog.text, "de -> en", "data.source_column=de")
    assert json.loads((tmp_path / "run" / "results.json").read_text())["translation"] == "de -> en"
    assert "It translates **de -> en**" in (tmp_path / "run" / "model" / "README.md").read_text()


def test_a_bad_data_source_is_a_usage_error_at_config_load(tmp_path, capsys):
    message = "Config key 'data.source' must be 'embedded' or 'file' or 'hub', got 'bogus' (str)."
    with pytest.raises(UsageError, match="data.source"):
        load_config("quickstart", ["data.source=bogus"])
    assert train(tmp_path, "data.source=bogus") == 2
    err = capsys.readouterr().err
    assert err.strip().endswith(f"hf-ot train: error: {message}") and "training on" not in err
    assert not (tmp_path / "run").exists()


def test_a_block_longer_than_the_models_positions_is_refused_before_the_data_is_read(tmp_path, capsys, monkeypatch):
    import hf_ot.recipes.splits as splits_module  # where the recipe prepares its data (prepare_task)

    def no_data(*args, **kwargs):
        raise AssertionError("the data must not be prepared for a config that cannot run")

    monkeypatch.setattr(splits_module, "causal_lm_datasets", no_data)
    assert train(tmp_path, "data.block_size=64", "model.scratch.n_positions=16", "training.max_steps=1") == 2
    err = capsys.readouterr().err
    assert_names(err, "data.block_size=64", "max_position_embeddings=16")
    assert "Traceback" not in err


@pytest.mark.usefixtures("in_repo")
def test_validation_text_without_a_complete_block_fails_before_training(tmp_path):
    text = tmp_path / "short.txt"
    text.write_text(("All the world's a stage, and all the men and women merely players. " * 20)[:1100])
    out = tmp_path / "run"
    cfg = quick_cfg(
        out, "data.source=file", f"data.train_file={text}", "data.block_size=128", "model.scratch.n_positions=128"
    )
    with raises_naming(ValueError, "validation text", "110 tokens", "data.block_size=128", "val_fraction"):
        run_recipe(cfg)
    assert_nothing_trained(out)
