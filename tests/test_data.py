"""Data at scale and data mistakes named with the fix.

References are computed here by hand: the character split of the whole text, and windows cut from the token list of
the whole string (character-level tokens: one id per character)."""

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset, DatasetDict, IterableDataset

from hf_ot.recipes import data as data_lib

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
    with pytest.raises(
        ValueError,
        match=r"validation text \(110 tokens, 110 characters\) has no complete block of "
        r"data.block_size=128.*Lower data.block_size, raise data.val_fraction",
    ):
        data_lib.lm_datasets(data, tokenizer)


def test_block_size_longer_than_the_text_names_both(tmp_path):
    text = random_text(1000, seed=7)[:1500]
    tokenizer, _ = char_tokenizer(text)
    data = {"source": "file", "train_file": write(tmp_path / "t.txt", text), "block_size": 4096}
    with pytest.raises(
        ValueError,
        match=r"train text \(1350 tokens, 1350 characters\) has no complete block of "
        r"data.block_size=4096",
    ):
        data_lib.lm_datasets(data, tokenizer)


def test_check_datasets_on_every_kind_of_split():
    full = Dataset.from_dict({"input_ids": [[1, 2]]})
    empty = Dataset.from_dict({"input_ids": []})
    data_lib.check_datasets(full, full, task="causal-lm")
    with pytest.raises(
        ValueError,
        match=r"validation split has no complete block of data.block_size=64.*"
        r"raise data.val_fraction",
    ):
        data_lib.check_datasets(full, empty, task="causal-lm", data={"block_size": 64})
    with pytest.raises(ValueError, match="train split has no complete block"):
        data_lib.check_datasets(full.to_iterable_dataset().filter(lambda row: False), full, task="causal-lm")
    with pytest.raises(ValueError, match=r"train split has no examples.*raise data.max_train_samples=3"):
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
    with pytest.raises(
        ValueError,
        match=r"validation.tsv is not valid utf-8 text \(first bad byte at line 3 "
        r".*0xe9.*data.encoding",
    ):
        data_lib.load_classification(data)
    ds = data_lib.load_classification({**data, "encoding": "latin-1"})  # the fix the message names
    assert ds["validation"]["text"][1] == "un café noir"
    text_file = write(tmp_path / "t.txt", "x" * 2000 + "\ncafé\n", encoding="latin-1")
    with pytest.raises(ValueError, match=r"not valid utf-8 text \(first bad byte at line 2"):
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
    with pytest.raises(ValueError, match=r"\['label'\] are in .*train.tsv but not in .*validation.tsv.*same header"):
        data_lib.load_classification(sst(tmp_path, GOOD, "sentence\tlabels\ngood\t1\n"))


def test_header_only_file_is_named(tmp_path):
    with pytest.raises(
        ValueError, match=r"data.validation_file: .*validation.tsv has no rows \(only a header line\?\)"
    ):
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
    assert any(str(copies / "sst2") in m and "download of the Hub dataset stanfordnlp/sst2" in m for m in said)


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
    assert any("the Hub dataset karpathy/tiny_shakespeare" in r.getMessage() for r in caplog.records)


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
