"""Data read as the file holds it, or an error. Whitespace-only = empty; a UTF-8 BOM is not text;
parallel files split exactly as files are (a lone \\r stays inside its line) and must have as many lines; memory is
bounded by characters, not rows (a file without newlines is not one tokenizer call); data.streaming works on local
text files."""

from pathlib import Path

import pytest
from conftest import tiny_run

import hf_ot.recipes.data as data_lib
from hf_ot.recipes import build_char_tokenizer

TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(60))


def write(path: Path, content) -> str:
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return str(path)


def error_of(data: dict) -> str:
    with pytest.raises(ValueError) as err:
        data_lib.text_splits(data)
    return str(err.value)


def test_a_whitespace_only_file_is_the_same_error_as_an_empty_one(tmp_path):
    empty = write(tmp_path / "empty.txt", "")
    blank = write(tmp_path / "blank.txt", " \n\t\n\r\n" * 2000)  # 10,000 characters, none of them text
    first = error_of({"source": "file", "train_file": empty})
    second = error_of({"source": "file", "train_file": blank})
    assert "is empty" in first and first.replace(empty, "F") == second.replace(blank, "F")
    good = write(tmp_path / "good.txt", TEXT * 3)
    third = error_of({"source": "file", "train_file": good, "validation_file": blank})
    assert third.replace(blank, "F") == second.replace(blank, "F").replace("data.train_file", "data.validation_file")


def test_a_utf8_byte_order_mark_is_not_text(tmp_path):
    path = write(tmp_path / "bom.txt", b"\xef\xbb\xbf" + (TEXT * 3).encode())
    splits = data_lib.text_splits({"source": "file", "train_file": path})
    assert splits["train"][0]["text"].startswith("line 0")
    assert "\ufeff" not in data_lib.text_characters(splits)
    src = write(tmp_path / "src.txt", b"\xef\xbb\xbfeins\nzwei\n")
    tgt = write(tmp_path / "tgt.txt", b"\xef\xbb\xbfone\r\ntwo\r\n")
    pairs = data_lib.load_translation(
        {"train_source": src, "train_target": tgt, "validation_source": src, "validation_target": tgt}
    )["train"]
    assert pairs["source"] == ["eins", "zwei"] and pairs["target"] == ["one", "two"]
    csv = write(tmp_path / "train.csv", b"\xef\xbb\xbfsentence,label\nfine,1\nbad,0\n")
    ds = data_lib.load_classification({"train_file": csv, "validation_file": csv, "num_labels": 2})
    assert ds["train"]["text"] == ["fine", "bad"]


def test_parallel_files_split_exactly_as_files_are(tmp_path):
    sources = [f"quelle {i}" for i in range(20)]
    targets = [f"target {i}" for i in range(20)]
    sources[3] = "quelle 3 with a lone \r inside"
    targets[7] = "target 7 with a lone \r inside"
    targets[9] = "target 9 with \x0b, \x1c, \x85 and \u2028 (str.splitlines would split here)"
    src = write(tmp_path / "src.de", "\n".join(sources) + "\n")
    tgt = write(tmp_path / "tgt.en", "\r\n".join(targets))  # Windows line ends, no final one
    pairs = data_lib.load_translation(
        {"train_source": src, "train_target": tgt, "validation_source": src, "validation_target": tgt}
    )["train"]
    assert pairs["source"] == sources and pairs["target"] == targets
    short = write(tmp_path / "short.en", "\n".join(targets[:19]) + "\n")
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
    path = write(tmp_path / "one_line.txt", text)
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
    train = data_lib.lm_blocks(splits["train"], tokenizer, 64)
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
    path = write(tmp_path / "corpus.txt", TEXT * 5)
    data = {"source": "file", "train_file": path, "streaming": True, "validation_rows": 30, "block_size": 16}
    splits = data_lib.text_splits(data)
    tokenizer = build_char_tokenizer(data_lib.text_characters(splits))
    train, validation = data_lib.lm_datasets(data, tokenizer, splits=splits)
    assert len(next(iter(train))["input_ids"]) == 16 and next(iter(validation))
    # a local folder of text files read through the hub loader, streamed: its column is found
    folder = tmp_path / "texts"
    folder.mkdir()
    write(folder / "a.txt", TEXT * 5)
    splits = data_lib.text_splits({"source": "hub", "dataset": str(folder), "streaming": True, "validation_rows": 30})
    assert next(iter(splits["train"]))["text"]


def test_a_recipe_trains_on_a_streamed_local_file(tmp_path, in_repo):
    from hf_ot.recipes import load_config, run_recipe

    path = write(tmp_path / "corpus.txt", TEXT * 5)
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
    good = write(tmp_path / "good.tsv", b"sentence\tlabel\r\ngood film\t1\r\nbad film\t0\r\n")  # Windows line ends
    assert list(data_lib.load_classification({"train_file": good, "validation_file": good})["train"]["label"]) == [1, 0]
    bad = write(tmp_path / "bad.tsv", b"sentence\tlabel\ngood film\t1\nbad \r film\t0\nok\t1\n")
    with pytest.raises(ValueError, match=r"bad.tsv has a lone carriage return .* in line 3"):
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
    plain = data_lib.text_splits({"source": "file", "train_file": write(tmp_path / "plain.txt", TEXT * 3)})
    squeezed = data_lib.text_splits({"source": "file", "train_file": packed("text.txt.z", TEXT * 3)})
    assert data_lib.text_characters(squeezed) == data_lib.text_characters(plain)
    assert "is empty" in error_of({"source": "file", "train_file": packed("blank.txt.z", " \n\t\n" * 50)})


@pytest.mark.parametrize("streaming", [False, True], ids=["read", "streamed"])
def test_a_file_starting_with_64_kib_of_blank_lines_is_not_empty(tmp_path, streaming):
    path = write(tmp_path / "corpus.txt", "\n" * (1 << 16) + TEXT * 5)
    data = {"source": "file", "train_file": path, "streaming": streaming, "validation_rows": 30, "block_size": 16}
    splits = data_lib.text_splits(data)
    assert any(row["text"].strip() for row in splits["train"])
    blank = write(tmp_path / "blank.txt", "\n \n" * (1 << 16))  # only whitespace: empty, read or streamed
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
    path = write(tmp_path / "one_line.txt", text)
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
