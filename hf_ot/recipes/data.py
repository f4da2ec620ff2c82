"""Data for the recipes: any data a `datasets` user has (local CSV/TSV/JSON/JSONL/Parquet/Arrow/text files, also
compressed, folders, globs and save_to_disk folders, each read by datasets' own builder; Hub datasets when online) and
the embedded default text.

Data stays in Arrow files (memory-mapped, cached on disk) or streams; nothing here reads a corpus into one Python
string. The causal-LM path is transformers' run_clm example: `Dataset.map(batched=True, num_proc=...)` tokenizes a
batch of rows and cuts its concatenation into blocks (group_texts), cached by `datasets`; a Hub dataset can also
stream (`data.streaming: true`, an IterableDataset) for corpora larger than memory or disk.

Every loader checks its input before any training starts and names the problem and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from datasets import (
    ClassLabel,
    Dataset,
    DatasetDict,
    Features,
    IterableDataset,
    IterableDatasetDict,
    Sequence,
    Value,
    concatenate_datasets,
    is_caching_enabled,
    load_dataset,
)

from ..errors import UsageError
from .config import DataSection

# Rows tokenized and grouped together in a large text, as run_clm's group_texts: blocks never cross a group boundary,
# so up to block_size - 1 tokens per group are dropped. A group is the rows of GROUP_BYTES of text at the average row
# size (run_clm's 1000 rows are 45 KB of one-line rows, dropping ~5% of a line-per-row corpus; 1 MB drops ~0.2%), and
# its blocks are written as record batches of up to 1000 blocks (large batches keep what a memory-mapped read touches
# small). A stream, whose size is not known, is grouped GROUP_ROWS rows at a time. A text of at most EXACT_BYTES bytes
# is one group: blocked exactly as one string (nanoGPT's way; the recipes' small corpora keep their blocks).
GROUP_BYTES = 1_000_000
GROUP_ROWS = 1000
EXACT_BYTES = 20_000_000
# Rows per Arrow record batch when a local file is read (the text builder's tables are <= 10 MB chunks, csv's 10k rows):
# datasets' default of 1000 rows makes ~45 KB batches of one-line rows, and reading a memory-mapped stream of small
# batches maps every page of the file into the process.
TEXT_WRITER_BATCH_ROWS = 1_000_000
# The text builder's chunk, given explicitly: it is then part of datasets' cache key, so a text cached with other
# record batches is read again rather than reused.
TEXT_CHUNK_BYTES = 10 << 20
# Memory is bounded by bytes, not rows: a row longer than ROW_CHARS characters (a file without newlines is one row)
# is cut into rows of at most that many characters (before a whitespace where one is near), whose concatenation is
# the row; the tokenizer is called on at most TOKENIZE_CHARS characters at a time (its per-token memory is ~100
# bytes, so one call on 50 MB of text took 4 GB).
ROW_CHARS = 1_000_000
TOKENIZE_CHARS = 1_000_000
MIN_TEXT_CHARACTERS = 1000


def _given(value, default):
    """A config value, or the default where it is not set (None)."""
    return default if value is None else value


def resolve_path(path: str) -> str:
    """A relative path in a recipe config is taken from the current folder, as a user typing it expects; where
    nothing is there, from the repository checkout (the packaged recipes name ../shared/data beside it)."""
    p = Path(os.path.expanduser(path))
    if p.is_absolute():
        return str(p)
    here = Path.cwd() / p
    checkout = Path(__file__).resolve().parents[2] / p
    return str(checkout if not here.exists() and checkout.exists() else here)


def _column_names(ds) -> list[str]:
    """Column names, also of a stream whose features are not declared (a local text or json stream): read from its
    first row."""
    names = ds.column_names
    if names is None and isinstance(ds, IterableDataset):
        first = next(iter(ds), None)
        names = list(first) if isinstance(first, dict) else []
    return list(names or [])


_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "lzma"))


def _open_data(path: str):
    """A data file's bytes, decompressed when the file is gzip, bz2 or xz (known by its first bytes, not its name:
    datasets reads compressed files transparently, and every check here must read the same text it does)."""
    with open(path, "rb") as f:
        head = f.read(6)
    for magic, module in _COMPRESSED:
        if head.startswith(magic):
            import importlib

            return importlib.import_module(module).open(path, "rb")
    return open(path, "rb")


def _decode_error_position(path: str, encoding: str) -> str:
    """'line N' of the first byte that does not decode (read in chunks: any file size)."""
    import codecs

    decoder = codecs.getincrementaldecoder(encoding)()
    line, offset = 1, 0
    with _open_data(path) as f:
        while chunk := f.read(1 << 20):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as err:
                bad = chunk[err.start : err.start + 1].hex()
                line += chunk[: err.start].count(b"\n")
                return f"line {line} (byte offset {offset + err.start}: 0x{bad})"
            line += chunk.count(b"\n")
            offset += len(chunk)
    return "an unknown position"


def _encoding_of(path: str, data: DataSection) -> str:
    """data.encoding (default UTF-8); a UTF-8 file that starts with a byte order mark is read without it."""
    encoding = _given(data.encoding, "utf-8")
    if encoding.lower().replace("_", "-") in ("utf-8", "utf8"):
        with _open_data(path) as f:
            if f.read(3) == b"\xef\xbb\xbf":
                return "utf-8-sig"
    return encoding


def empty_file_error(what: str, path: str) -> ValueError:
    """One error for a file without text, whether it has no bytes or only whitespace."""
    return ValueError(f"{what}: {path} is empty (no text besides whitespace). Give a file with data.")


def _check_has_text(ds, what: str, path: str, column: str = "text") -> None:
    """A text with no character other than whitespace is an empty file (checked in Arrow, any size)."""
    import pyarrow.compute as pc

    if isinstance(ds, IterableDataset):
        return
    for batch in ds.with_format("arrow").iter(batch_size=100_000):
        if pc.any(pc.match_substring_regex(batch[column], r"\S")).as_py():
            return
    raise empty_file_error(what, path)


def _cause(err: BaseException | None, wanted) -> BaseException | None:
    """The first exception in err's chain of causes and contexts that `wanted` accepts (datasets wraps a reader's)."""
    while err is not None and not wanted(err):
        err = err.__cause__ or err.__context__
    return err


# ------------------------------------------------------------------------------------------ any data a user has

# file extension -> (datasets builder, the `format` it is); a compression suffix is looked through
_EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".arrow": "arrow",
    ".txt": "text",
    ".text": "text",
}
_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".lz4")
_BUILDERS = {"tsv": "csv", "jsonl": "json"}


def data_files(spec: str, what: str) -> list[str]:
    """The local files `spec` names: a file, a folder (its files, sorted; hidden ones left out) or a glob pattern."""
    import glob

    full = resolve_path(spec)
    if glob.has_magic(spec):
        found = sorted(p for p in glob.glob(full, recursive=True) if Path(p).is_file())
    elif Path(full).is_dir():
        found = sorted(str(p) for p in Path(full).rglob("*") if p.is_file() and not p.name.startswith("."))
    else:
        found = [full] if Path(full).is_file() else []
    if not found and not glob.has_magic(spec) and os.path.exists(full) and not Path(full).is_dir():
        # a device, FIFO or socket is no data file: reading it could block or never end
        raise UsageError(
            f"{what}: {full} is not a regular file (a device, pipe or socket); give the path of a data file, a "
            "folder or a glob."
        )
    if not found:
        raise FileNotFoundError(
            f"{what}: {'nothing matches' if glob.has_magic(spec) else 'file'} {spec!r} "
            f"{'' if glob.has_magic(spec) else 'not found '}(looked at {full}). Fix the path in the recipe config "
            "(--set data.train_file=PATH: a file, a folder or a glob), or give a Hub dataset (data.dataset) online."
        )
    return found


def saved_dataset(spec: str | None) -> bool:
    """Whether `spec` is a folder written by datasets' save_to_disk (a Dataset or a DatasetDict)."""
    if not spec:
        return False
    folder = Path(resolve_path(spec))
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def file_format(path: str, data: DataSection, default: str) -> str:
    """data.format, else the file's extension (through .gz/.bz2/.xz/...), else `default`."""
    if data.format is not None:
        return data.format
    name = path.lower()
    for suffix in _COMPRESSION_SUFFIXES:
        name = name.removesuffix(suffix)
    return _EXTENSIONS.get(Path(name).suffix, default)


def _not_decodable(what: str, path: str, encoding: str) -> ValueError:
    """The one message for a file that does not decode, with the position of its first bad byte and the fix."""
    return ValueError(
        f"{what}: {path} is not valid {encoding} text (first bad byte at {_decode_error_position(path, encoding)}). "
        "Re-save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8 IN > OUT`), or set data.encoding to the file's "
        "encoding (e.g. latin-1)."
    )


def load_table(spec: str, what: str, data: DataSection, default_format: str = "csv", streaming: bool = False):
    """(the rows of a file, folder or glob read by datasets' own builder for its format (csv, json, parquet, arrow,
    text; streaming: an IterableDataset), that format), with the errors a user can fix named (encoding, empty file,
    header only, a lone carriage return)."""
    files = data_files(spec, what)
    fmt = file_format(files[0], data, default_format)
    builder, path, encoding = _BUILDERS.get(fmt, fmt), files[0], _encoding_of(files[0], data)
    kwargs: dict = {"encoding": encoding} if builder in ("csv", "json", "text") else {}
    if builder == "csv":
        kwargs["delimiter"] = "\t" if fmt == "tsv" or path.lower().endswith((".tsv", ".tsv.gz")) else ","
        for name in files:
            if line := _lone_carriage_return(name):
                raise ValueError(
                    f"{what}: {name} has a lone carriage return (\\r, not followed by \\n) in line {line}: the CSV "
                    "reader would end the row there and shift its cells. Replace it (e.g. by a space) and keep only "
                    "Unix (\\n) or Windows (\\r\\n) line ends."
                )
    if fmt == "text":
        kwargs.update(keep_linebreaks=True, chunksize=TEXT_CHUNK_BYTES)
    if streaming:  # read as it is consumed, never converted to Arrow: checked up to its first character of text
        if all(_blank_file(name) for name in files):
            raise empty_file_error(what, spec)
        return load_dataset(builder, data_files=files, split="train", streaming=True, **kwargs), fmt
    try:
        ds = load_dataset(builder, data_files=files, split="train", writer_batch_size=TEXT_WRITER_BATCH_ROWS, **kwargs)
    except Exception as err:  # the errors a user can fix, named
        if _cause(err, lambda e: isinstance(e, UnicodeDecodeError)):
            raise _not_decodable(what, path, encoding) from None
        if builder in ("parquet", "arrow"):
            raise ValueError(f"{what}: {path} is not a readable {builder} file ({err}).") from None
        with _open_data(path) as f:
            lines = [line for line in (f.readline() for _ in range(2)) if line.strip()]
        if not lines:
            raise empty_file_error(what, path) from None
        if len(lines) == 1 and builder == "csv":
            raise ValueError(f"{what}: {path} has no rows (only a header line?). Give a file with examples.") from None
        raise
    if len(ds) == 0:
        raise empty_file_error(what, spec)
    if fmt == "text":  # lines of whitespace only are no text either
        _check_has_text(ds, what, spec)
    return ds, fmt


def load_splits(data: DataSection, default_format: str = "csv", streaming: bool = False, hold_out: bool = True):
    """(splits {'train', 'validation'[, 'test']}, where each came from, each split's file format or None) of any
    data a datasets user has, the one reader of every task: a Hub dataset or a local folder datasets reads by itself
    (data.dataset), a folder saved with save_to_disk, or local files of any format (data.train_file /
    data.validation_file). Without a validation split, hold_out holds out data.val_fraction of the training rows
    (seeded)."""
    from datasets import load_from_disk

    name = data.dataset if data.kind() == "hub" else data.train_file
    splits: dict = {}
    where: dict = {}
    formats: dict = {}
    if data.kind() == "hub" or saved_dataset(name):
        if not name:
            raise ValueError("data.source is hub but data.dataset is not set: name the Hub dataset id.")
        if saved_dataset(name):
            loaded = load_from_disk(resolve_path(name))
        else:  # a Hub id (downloaded: online), or a local folder of data files
            loaded = load_dataset(name, data.dataset_config, **({"streaming": True} if streaming else {}))
        if isinstance(loaded, (Dataset, IterableDataset)):
            loaded = {"train": loaded}
        for split in ("train", "validation", "test"):
            key = "split" if split == "train" and data.split else f"{split}_split"
            asked = getattr(data, key)
            if _given(asked, split) in loaded:
                splits[split] = loaded[_given(asked, split)]
            elif asked is not None:
                raise ValueError(f"data.{key}={asked!r} is not a split of {name}: it has {list(loaded)}.")
        if "train" not in splits:
            raise ValueError(f"{name} has no split 'train' (it has {list(loaded)}): set data.train_split.")
        where = {split: f"{name} ({split})" for split in splits}
    else:
        if data.train_file is None:
            raise FileNotFoundError("data.train_file is not set: give the path of the training data in the recipe.")
        for split in ("train", "validation"):
            if spec := getattr(data, f"{split}_file"):
                splits[split], formats[split] = load_table(spec, f"data.{split}_file", data, default_format, streaming)
                where[split] = spec
    if "validation" not in splits and hold_out:
        fraction = float(_given(data.val_fraction, 0.1))
        if not 0 < fraction < 1 or len(splits["train"]) < 2:
            raise ValueError(
                f"No validation data: give data.validation_file (or data.validation_split), or hold out a share of "
                f"the {len(splits['train'])} training rows with data.val_fraction between 0 and 1 (got {fraction})."
            )
        held = splits["train"].train_test_split(test_size=fraction, seed=0)
        splits["train"], splits["validation"] = held["train"], held["test"]
        where["validation"] = f"{where['train']} (data.val_fraction={fraction} of it)"
        formats["validation"] = formats.get("train")
    return splits, where, formats


def describe_data(data: DataSection | Mapping, task: str) -> dict:
    """What the model card says the data is: {'name', 'type', 'datasets'}: the Hub id for Hub data, the file or
    folder names for local data, the Python manual for the embedded text."""
    data = DataSection.of(data)
    kind = data.kind()
    if kind == "embedded" and task == "causal-lm":
        return {"name": "pydoc_data.topics (CPython reference manual)", "type": "custom", "datasets": None}
    if kind == "hub" and not saved_dataset(data.dataset) and not Path(resolve_path(str(data.dataset))).exists():
        name = f"{data.dataset} ({data.dataset_config})" if data.dataset_config else str(data.dataset)
        return {"name": name, "type": data.dataset, "datasets": [data.dataset]}
    named = [data.dataset, data.train_file, data.validation_file, data.train_source, data.train_target]
    names = [Path(str(n).rstrip("/")).name for n in named if n]
    return {"name": ", ".join(dict.fromkeys(names)) or "custom data", "type": "custom", "datasets": None}


# --------------------------------------------------------------------------------------------- causal LM: text


def data_fingerprint(data: DataSection | Mapping) -> dict:
    """The data a run reads, by content: each local file's size and SHA-256; the embedded text's hash (a resumed run
    compares it with its checkpoint's, hf_ot.checkpoints.check_resume_settings)."""
    import hashlib

    from ..run_folders import file_digest

    data = DataSection.of(data)
    out: dict = {}
    for key in sorted(("dataset", "train_file", "validation_file", *SOURCE_KEYS)):
        if isinstance(value := getattr(data, key), str):
            full = Path(resolve_path(value))
            if not (full.exists() or any(ch in value for ch in "*?[")):
                continue  # a Hub id
            files = [Path(f) for f in data_files(value, f"data.{key}")]
            digests = [{"path": str(p), "bytes": p.stat().st_size, "sha256": file_digest(p)} for p in files]
            out[f"data.{key}"] = digests[0] if len(digests) == 1 and full.is_file() else digests
    if data.kind() == "embedded":
        out["embedded text"] = {"sha256": hashlib.sha256(embedded_text().encode()).hexdigest()}
    return out


SOURCE_KEYS = ("train_source", "train_target", "validation_source", "validation_target", "test_source", "test_target")


def embedded_text() -> str:
    """The Python reference manual's topics, shipped with CPython as pydoc_data.topics (~465k characters)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


def _embedded_rows() -> Dataset:
    """embedded_text() as rows (one topic each) whose concatenation is exactly that text."""
    from pydoc_data.topics import topics

    keys = sorted(topics)
    return Dataset.from_dict({"text": [topics[k] + ("\n\n" if i < len(keys) - 1 else "") for i, k in enumerate(keys)]})


def _character_counts(ds: Dataset) -> np.ndarray:
    """Characters per row (Arrow compute, one record batch at a time)."""
    import pyarrow.compute as pc

    counts = [pc.utf8_length(b["text"]).to_numpy(zero_copy_only=False) for b in ds.with_format("arrow").iter(100_000)]
    return np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)


def _shared_cache(ds: Dataset, fn, kwargs: dict) -> dict:
    """kwargs for ds.map, plus a cache file named by datasets' fingerprint of the input and the map where several
    processes prepare the same in-memory data (the embedded text, a val_fraction split): datasets caches maps of
    file-backed data only, so without it every process of a torchrun / accelerate run would tokenize again. The main
    process writes the file first (main_process_first); the others load it."""
    if ds.cache_files or int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not is_caching_enabled():
        return kwargs
    import datasets
    from datasets.fingerprint import Hasher

    key = Hasher.hash((ds._fingerprint, fn, sorted((k, repr(v)) for k, v in kwargs.items() if k != "desc")))
    folder = Path(datasets.config.HF_DATASETS_CACHE) / "hf_ot_in_memory"
    folder.mkdir(parents=True, exist_ok=True)
    return {**kwargs, "cache_file_name": str(folder / f"{key}.arrow")}


def _split_by_characters(ds: Dataset, val_fraction: float) -> tuple[DatasetDict, int]:
    """(first (1 - val_fraction) of the characters -> train, the rest -> validation (nanoGPT's shakespeare_char
    split), characters): the row holding the cut is cut in two, the others stay in Arrow."""
    counts = _character_counts(ds)
    ends = np.cumsum(counts)
    total = int(ends[-1]) if len(ends) else 0
    cut = int(total * (1 - val_fraction))
    row = int(np.searchsorted(ends, cut, side="right"))  # the row holding character `cut`
    start = int(ends[row - 1]) if row > 0 else 0
    rows = lambda a, b: [ds.select(range(a, b))] if a < b else []  # noqa: E731 (contiguous: no index mapping)
    train_parts, val_parts = rows(0, row), []
    if row < len(ds):
        text = ds[row]["text"]
        head, tail = text[: cut - start], text[cut - start :]
        if head:
            train_parts.append(Dataset.from_dict({"text": [head]}, features=ds.features))
        val_parts.append(Dataset.from_dict({"text": [tail]}, features=ds.features))
        val_parts += rows(row + 1, len(ds))
    empty = Dataset.from_dict({"text": []}, features=ds.features)
    join = lambda parts: concatenate_datasets(parts) if len(parts) > 1 else (parts[0] if parts else empty)  # noqa
    return DatasetDict(train=join(train_parts), validation=join(val_parts)), total


def text_splits(data: DataSection | Mapping) -> DatasetDict | IterableDatasetDict:
    """'train' and 'validation' splits with one column, "text"; a split's text is the concatenation of its rows.

    data.source: 'embedded' (CPython's reference manual), 'file' (data.train_file, any size; data.validation_file
    optional) or 'hub' (data.dataset, data.dataset_config, data.split, data.text_column), each read by load_splits;
    data.streaming: true streams it. Without a validation file or split, the last data.val_fraction of the
    characters is the validation text (a stream: its first data.validation_rows rows).
    """
    data = DataSection.of(data)
    val_fraction = float(_given(data.val_fraction, 0.1))
    if not 0 < val_fraction < 1:
        raise ValueError(
            f"data.val_fraction must be between 0 and 1 (the share of text for validation), got {val_fraction}."
        )
    splits: dict
    if data.kind() == "embedded":
        splits = {"train": _embedded_rows()}
    else:
        read, where, formats = load_splits(data, "text", streaming=bool(data.streaming), hold_out=False)
        splits = {k: _as_text(v, data, where[k], formats.get(k)) for k, v in read.items() if k != "test"}
    ds, validation = splits["train"], splits.get("validation")
    if isinstance(ds, IterableDataset):  # streamed: without a validation file or split, its first rows
        if validation is None:
            rows = int(_given(data.validation_rows, 1000))
            validation, ds = ds.take(rows), ds.skip(rows)
        return IterableDatasetDict(train=ds, validation=validation)
    if validation is not None:
        out = DatasetDict(train=ds, validation=validation)
        characters = int(_character_counts(ds).sum() + _character_counts(validation).sum())
    else:
        out, characters = _split_by_characters(ds, val_fraction)
    if characters < MIN_TEXT_CHARACTERS:
        raise ValueError(
            f"The training text has only {characters} characters: too little to train a language "
            f"model (at least {MIN_TEXT_CHARACTERS}). Give a longer text."
        )
    return out


def _blank_file(path) -> bool:
    """Whether the file holds nothing but whitespace: read in 64 KiB chunks up to the first other character (a file
    whose first 64 KiB are blank lines and then text is not empty)."""
    with _open_data(path) as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return False
    return True


def _as_text(ds, data: DataSection, where: str, fmt: str | None):
    """A split as rows of one column "text" of at most ROW_CHARS characters: a text file's lines as they are; else
    the text column (data.text_column, default text), each row followed by a newline (documents joined)."""
    if fmt != "text":
        column = _column(_column_names(ds), data.text_column, ("text",), "text_column", where)
        ds = ds.select_columns([column])
        if column != "text":
            ds = ds.rename_column(column, "text")
        newline = lambda b: {"text": [(t or "") + "\n" for t in b["text"]]}  # noqa: E731
        if isinstance(ds, IterableDataset):
            ds = ds.map(newline, batched=True)
        else:
            ds = ds.map(newline, batched=True, batch_size=10_000, writer_batch_size=10_000)
            _check_has_text(ds, "data", where)
    if isinstance(ds, IterableDataset):
        return ds.map(_split_long_rows, batched=True, batch_size=100)
    return bounded_rows(ds)


def split_text(text: str, limit: int | None = None) -> list[str]:
    """`text` cut into pieces of at most `limit` characters whose concatenation is `text`; a cut goes just before a
    whitespace character in the last tenth of a piece where there is one (so word-level and byte-level BPE
    tokenizers see the same words), else at the limit."""
    limit = limit or ROW_CHARS
    if len(text) <= limit:
        return [text]
    pieces, start = [], 0
    while len(text) - start > limit:
        end = start + limit
        window = text[end - limit // 10 : end]
        cut = max(window.rfind(" "), window.rfind("\n"), window.rfind("\t"))
        if cut > 0:
            end = end - limit // 10 + cut
        pieces.append(text[start:end])
        start = end
    pieces.append(text[start:])
    return pieces


def _split_long_rows(batch, limit: int | None = None):
    return {"text": [piece for text in batch["text"] for piece in split_text(text, limit)]}


def bounded_rows(ds: Dataset, limit: int | None = None) -> Dataset:
    """Rows of at most `limit` characters (longer ones cut, their concatenation unchanged): what every later step
    holds in memory at once is bounded by bytes, whatever the line structure of the file."""
    import pyarrow.compute as pc

    limit = limit or ROW_CHARS
    if len(ds) == 0:
        return ds
    lengths = pc.binary_length(ds.data.column("text"))
    longest = pc.max(lengths).as_py() or 0
    if longest <= limit:  # bytes >= characters: nothing to cut
        return ds
    size = _text_bytes(ds)
    batch = max(1, min(1000, round(len(ds) * limit / max(size, 1))))
    return ds.map(
        _split_long_rows,
        batched=True,
        batch_size=batch,
        writer_batch_size=1000,
        fn_kwargs={"limit": limit},
        desc="Cutting long lines",
    )


def iter_texts(ds, columns=("text",), batch_size: int = 1000):
    """Batches of strings from the columns of a dataset (e.g. for a tokenizer's train_from_iterator), without
    holding the dataset in a Python list."""
    for batch in ds.select_columns(list(columns)).iter(batch_size=batch_size):
        for column in columns:
            yield batch[column]


def text_characters(splits) -> str:
    """The sorted distinct characters of every split's text (the vocabulary of a character-level tokenizer)."""
    chars: set[str] = set()
    for ds in splits.values():
        for texts in iter_texts(ds, ("text",), batch_size=10_000):
            for text in texts:
                chars.update(text)
    return "".join(sorted(chars))


# -------------------------------------------------------------------------------------- causal LM: blocks


def _group_ids(ids, block: int, stride: int) -> np.ndarray:
    """The concatenation of `ids` (lists or arrays), cut into windows of `block` tokens every `stride` (an
    incomplete tail dropped)."""
    total = sum(map(len, ids))
    # int64, the dtype token ids have in torch (a streamed row reaches the collator as this array; a Dataset stores
    # int32 on disk and reads back Python ints)
    flat = (
        np.concatenate([np.asarray(i, dtype=np.int64) for i in ids]) if ids and total else np.zeros(0, dtype=np.int64)
    )
    if total < block:
        return np.zeros((0, block), dtype=np.int64)
    return np.lib.stride_tricks.sliding_window_view(flat, block)[::stride].copy()


class _TokenizeAndGroup:
    """The map function (a class, so `datasets` can pickle it to worker processes and fingerprint it for caching)."""

    def __init__(self, tokenizer, block: int, stride: int):
        self.tokenizer, self.block, self.stride = tokenizer, block, stride

    def __call__(self, batch):
        # at most TOKENIZE_CHARS characters per tokenizer call (a long row is cut first), ids kept as int32 arrays:
        # memory follows the text's bytes, not its rows
        ids: list[np.ndarray] = []
        chunk: list[str] = []
        size = 0

        def flush():
            if chunk:
                encoded = self.tokenizer(chunk, add_special_tokens=False, return_attention_mask=False)["input_ids"]
                ids.extend(np.asarray(e, dtype=np.int32) for e in encoded)
                chunk.clear()

        for text in batch["text"]:
            for piece in split_text(text, TOKENIZE_CHARS):
                if size + len(piece) > TOKENIZE_CHARS:
                    flush()
                    size = 0
                chunk.append(piece)
                size += len(piece)
        flush()
        blocks = _group_ids(ids, self.block, self.stride)
        return {"input_ids": blocks, "labels": blocks}  # labels = input_ids: the model shifts them


def _text_bytes(texts: Dataset) -> int:
    """Bytes of text in the "text" column, from the Arrow offsets (the text itself is not read); a selection of rows
    (filter, shuffle, select) is measured through its indices."""
    import pyarrow.compute as pc

    lengths = pc.binary_length(texts.data.column("text"))  # computed from the offsets
    indices = getattr(texts, "_indices", None)
    if indices is not None:
        lengths = pc.take(lengths, indices.column(0))
    return int(pc.sum(lengths).as_py() or 0)


def _default_group_rows(texts) -> int:
    if isinstance(texts, IterableDataset):
        return GROUP_ROWS
    size = _text_bytes(texts)
    if size <= EXACT_BYTES:
        return max(len(texts), 1)
    return max(1, round(len(texts) * GROUP_BYTES / size))


def lm_blocks(
    texts,
    tokenizer,
    block_size: int,
    stride: int | None = None,
    *,
    num_proc: int | None = None,
    group_rows: int | None = None,
    limit: int | None = None,
    desc: str | None = None,
):
    """Blocks of `block_size` tokens (every `stride`; default block_size) with labels = input_ids, from a dataset with
    a "text" column: tokenized and grouped per `group_rows` rows in one `map`, as run_clm's tokenize + group_texts.
    Default group_rows: all rows for a text of at most EXACT_BYTES bytes (20 MB), else the rows of about GROUP_BYTES
    (1 MB) of text on average (GROUP_ROWS for a stream, whose size is not known).

    A Dataset gives a Dataset (num_proc workers, cached on disk with the source); an IterableDataset gives an
    IterableDataset (blocks made as they are read). `limit` keeps the first `limit` blocks.
    """
    block = int(block_size)
    stride = int(stride or block)
    if block < 1 or stride < 1:
        raise ValueError(f"data.block_size and data.stride must be >= 1, got {block} and {stride}.")
    features = Features({"input_ids": Sequence(Value("int32")), "labels": Sequence(Value("int32"))})
    fn = _TokenizeAndGroup(tokenizer, block, stride)
    if group_rows is None:
        group_rows = _default_group_rows(texts)
    if isinstance(texts, IterableDataset):
        out = texts.map(fn, batched=True, batch_size=group_rows, remove_columns=["text"], features=features)
        return out.take(int(limit)) if limit else out
    # datasets' own parallel map: num_proc contiguous shards, each grouped from its first row (as run_clm)
    kwargs = dict(batch_size=group_rows, remove_columns=texts.column_names, features=features)
    workers = num_proc if num_proc and num_proc > 1 and len(texts) >= num_proc else None
    desc = desc or f"Tokenizing into blocks of {block}"
    out = texts.map(fn, batched=True, num_proc=workers, desc=desc, **_shared_cache(texts, fn, kwargs))
    return out.select(range(min(int(limit), len(out)))) if limit else out


def _has_rows(ds) -> bool:
    if isinstance(ds, IterableDataset):
        return next(iter(ds), None) is not None
    return len(ds) > 0


def _token_count(texts, tokenizer, max_characters: int = 20_000_000) -> int | None:
    """Tokens of a split's text (None for a split over max_characters: not counted)."""
    if isinstance(texts, IterableDataset) or _character_counts(texts).sum() > max_characters:
        return None
    return sum(
        len(ids)
        for batch in texts.iter(batch_size=GROUP_ROWS)
        for ids in tokenizer(batch["text"], add_special_tokens=False)["input_ids"]
    )


def lm_datasets(data: DataSection | Mapping, tokenizer, splits=None) -> tuple:
    """(train, validation) causal-LM blocks for a recipe's `data` section: text_splits (unless `splits` is given),
    lm_blocks with data.block_size, data.stride, data.num_proc, data.max_train_blocks / data.max_eval_blocks; a split
    without one complete block is an error naming its size and the fix."""
    data = DataSection.of(data)
    splits = splits if splits is not None else text_splits(data)
    block = int(_given(data.block_size, 128))
    out = {}
    for name, limit_key in (("train", "max_train_blocks"), ("validation", "max_eval_blocks")):
        out[name] = lm_blocks(
            splits[name],
            tokenizer,
            block,
            data.stride,
            num_proc=data.num_proc,
            limit=getattr(data, limit_key),
            desc=f"Tokenizing the {name} text into blocks of {block}",
        )
        if not _has_rows(out[name]):
            texts = splits[name]
            chars = None if isinstance(texts, IterableDataset) else int(_character_counts(texts).sum())
            tokens = _token_count(texts, tokenizer)
            parts = (tokens is not None and f"{tokens} tokens", chars is not None and f"{chars} characters")
            size = ", ".join(p for p in parts if p)
            grouped = (
                f" (a text of over {EXACT_BYTES // 10**6} MB is tokenized in groups of about {GROUP_BYTES // 10**6} "
                f"MB of text, or {GROUP_ROWS} rows of a stream: a block never spans two groups)"
                if tokens is None or tokens >= block
                else ""
            )
            raise _no_block_error(name, data, f"text ({size})" if size else "text", grouped)
    return out["train"], out["validation"]


def _no_block_error(name: str, data: DataSection, what: str = "split", note: str = "") -> ValueError:
    """The one message for a split without a complete block of data.block_size tokens, with the fixes that apply."""
    by_fraction = name == "validation" and not (data.validation_file or data.validation_split or data.streaming)
    key = "max_train_blocks" if name == "train" else "max_eval_blocks"
    limit = f" (data.{key}={getattr(data, key)})" if getattr(data, key) is not None else ""
    return ValueError(
        f"The {name} {what} has no complete block of data.block_size={_given(data.block_size, 128)} tokens{note}. "
        f"Lower data.block_size,{' raise data.val_fraction,' if by_fraction else ''} or give more text{limit}."
    )


def check_datasets(train, validation, task: str = "causal-lm", data: DataSection | Mapping | None = None) -> None:
    """Before training: train and validation (after tokenization and blocking) each need at least one complete
    example (for causal LM, one block of data.block_size tokens). Raises ValueError naming the split and the fix.
    Works on Dataset and IterableDataset (looks at the first row only)."""
    data = DataSection.of(data or {})
    for name, ds in (("train", train), ("validation", validation)):
        if ds is None or _has_rows(ds):
            continue
        if task == "causal-lm":
            raise _no_block_error(name, data)
        key = "max_train_samples" if name == "train" else "max_eval_samples"
        raise ValueError(
            f"The {name} split has no examples after loading and tokenization. Give a {name} file with rows"
            + (f", or raise data.{key}={getattr(data, key)}" if getattr(data, key) is not None else "")
            + "."
        )


# ------------------------------------------------------------------------------------------ classification


def _label_names(splits: dict, column: str, where: dict, data: DataSection) -> tuple[list | None, int]:
    """(class names in id order or None, number of classes) of the label column over every split: a ClassLabel's
    names; string labels sorted (as transformers' run_glue), or in data.label_names order; integer labels
    0..N-1, named by data.label_names when given."""
    first = next(iter(splits.values())).features[column]
    if isinstance(first, ClassLabel):
        return list(first.names), first.num_classes
    names, values = data.label_names, set()
    for name, split in splits.items():
        feature = split.features[column]
        strings = isinstance(feature, Value) and feature.dtype in ("string", "large_string")
        integers = isinstance(feature, Value) and (feature.dtype.startswith("int") or feature.dtype.startswith("uint"))
        if not (strings or integers):
            sample = split.unique(column)[:5]
            raise ValueError(
                f"{name} split ({where[name]}): column {column!r} must hold integer class ids (or class names), but "
                f"has {feature.dtype if isinstance(feature, Value) else feature} values (e.g. {sample}); empty cells "
                "read as missing. Fill every label."
            )
        found = split.unique(column)
        if None in found:
            raise ValueError(
                f"{name} split ({where[name]}): column {column!r} has empty labels; empty cells read as missing. "
                "Fill every label (a class name or an integer class id 0..N-1)."
            )
        if strings:
            if names and (unknown := sorted(v for v in found if v not in names)):
                raise ValueError(
                    f"{name} split ({where[name]}): labels {unknown[:5]} are not in data.label_names={list(names)}: "
                    "add them."
                )
            values.update(found)
            continue
        bad = sorted(v for v in found if v < 0 or (data.num_labels is not None and v >= data.num_labels))
        if bad:
            hint = " (-1 marks unlabelled rows, as in GLUE's test split: use a labelled split)" if -1 in bad else ""
            top = f"0..{data.num_labels - 1} (data.num_labels={data.num_labels})" if data.num_labels else ">= 0"
            raise ValueError(
                f"{name} split ({where[name]}): labels {bad[:10]} are outside {top}{hint}. Set data.num_labels to the "
                f"number of classes ({max(found) + 1} for these labels) or fix the labels."
            )
        values.update(found)
    if all(isinstance(v, str) for v in values):  # class names: sorted unless data.label_names orders them
        names = list(names) if names else sorted(values)
        return names, len(names)
    count = data.num_labels or (len(names) if names else max(values, default=0) + 1)
    if names and len(names) != count:
        raise ValueError(f"data.label_names has {len(names)} names but there are {count} classes: name every class.")
    return (list(names) if names else None), count


def _lone_carriage_return(path: str) -> int | None:
    """The line (1-based, counted at \\n) of the first \\r that does not end a \\r\\n pair, or None."""
    line, previous_cr = 1, False
    with _open_data(path) as f:
        while chunk := f.read(1 << 20):
            if previous_cr and not chunk.startswith(b"\n"):
                return line
            at = chunk.find(b"\r")
            while at != -1:
                if at + 1 < len(chunk) and chunk[at + 1 : at + 2] != b"\n":
                    return line + chunk[:at].count(b"\n")
                at = chunk.find(b"\r", at + 1)
            previous_cr = chunk.endswith(b"\r")
            line += chunk.count(b"\n")
    return line if previous_cr else None


def _column(names: list[str], wanted: str | None, defaults: tuple[str, ...], key: str, where: str) -> str:
    """The column `wanted` (a data.*_column), else the first of `defaults` the data has; an error lists the data's."""
    for name in [wanted] if wanted else defaults:
        if name in names:
            return name
    raise ValueError(
        f"{where}: column(s) {[wanted] if wanted else list(defaults)} not found; the data has {names}. Name the "
        f"column in the recipe: --set data.{key}=NAME."
    )


def _named_columns(split, data: DataSection, picked: dict, where: str):
    """split with one column per key of `picked` (text, label, source, target): data.{key}_column, else the first of
    picked[key] the data has. `picked` is updated to the columns found."""
    for key, defaults in picked.items():
        picked[key] = _column(split.column_names, getattr(data, f"{key}_column"), defaults, f"{key}_column", where)
    return split.select_columns(list(picked.values())).rename_columns({v: k for k, v in picked.items() if k != v})


def load_classification(data: DataSection | Mapping) -> DatasetDict:
    """Sentence classification from any data (load_splits): columns text and label (data.text_column, default text
    or sentence; data.label_column, default label), labels a ClassLabel whose names are the classes (_label_names),
    checked: the same columns in every split, rows in each."""
    data = DataSection.of(data)
    splits, where, _ = load_splits(data, default_format="csv")
    columns = {name: set(split.column_names) for name, split in splits.items()}
    out = {}
    for name, split in splits.items():
        picked = {"text": ("text", "sentence"), "label": ("label",)}
        out[name] = _named_columns(split, data, picked, f"{name} split ({where[name]})")
        for other, has in columns.items():
            if missing := sorted(set(picked.values()) - has):
                raise ValueError(
                    f"Column(s) {missing} are in {where[name]} but not in {where[other]} (which has {sorted(has)}): "
                    "every split needs the same header (columns). Fix the header line of the second file."
                )
    names, count = _label_names(out, "label", where, data)
    feature = ClassLabel(names=names) if names else ClassLabel(num_classes=count)
    if not isinstance(out["train"].features["label"], ClassLabel):
        out = {k: v.cast_column("label", feature) for k, v in out.items()}
    return DatasetDict(out)


def label_names(ds) -> list[str] | None:
    """The class names of a classification split (None for integer labels without names): what the saved config's
    id2label holds."""
    feature = ds.features["label"]
    names = list(feature.names) if isinstance(feature, ClassLabel) else None
    return None if names == [str(i) for i in range(len(names or []))] else names


# --------------------------------------------------------------------------------------------- translation


def _file_lines(path: str, encoding: str, what: str, size: int, mtime_ns: int):
    """Rows {"text": line} of a file, split exactly as the file splits them: at "\n" (a "\r" just before it belongs
    to the line end); a lone "\r" or any other character str.splitlines (and so datasets' text builder) splits at
    stays inside its line. Read in chunks. size and mtime are arguments so that datasets' cache key follows the file."""

    def decode(raw: bytes, number: int) -> dict:
        try:
            text = raw.removesuffix(b"\r").decode(encoding)
        except UnicodeDecodeError:
            raise _not_decodable(what, path, encoding) from None
        return {"text": text[1:] if number == 1 and text.startswith("\ufeff") else text}

    number, rest = 0, b""
    with _open_data(path) as f:
        while chunk := f.read(1 << 20):
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for raw in lines:
                number += 1
                yield decode(raw, number)
    if rest:  # a last line without a line end
        yield decode(rest, number + 1)


def _read_lines(spec: str | None, what: str, data: DataSection) -> Dataset:
    """One text file (not a folder or glob) as one row per line, split exactly as the file is (_file_lines)."""
    files = data_files(spec, what) if spec is not None else []
    if len(files) != 1:
        raise FileNotFoundError(f"{what}: give one text file (one sentence a line), got {spec!r} ({files}).")
    path, stat = files[0], os.stat(files[0])
    if _blank_file(path):
        raise empty_file_error(what, path)
    encoding = _given(data.encoding, "utf-8")
    kwargs = {"path": path, "encoding": encoding, "what": what, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    try:
        return Dataset.from_generator(_file_lines, features=Features({"text": Value("string")}), gen_kwargs=kwargs)
    except Exception as err:  # datasets wraps the generator's error: the reader's own message is the one to give
        if cause := _cause(err, lambda e: isinstance(e, ValueError) and str(e).startswith(what)):
            raise cause from None
        raise


def load_translation(data: DataSection | Mapping) -> DatasetDict:
    """Sentence pairs, columns source and target: aligned line files (data.train_source / train_target, one sentence
    a line, Multi30k style), or any data load_splits reads (JSONL pairs, CSV, Parquet, a Hub dataset) with the
    columns data.source_column / data.target_column (default source / target; Hub: de / en)."""
    data = DataSection.of(data)
    if data.train_source is None:
        splits, where, _ = load_splits(data, default_format="json")
        defaults = ("de", "en") if data.kind() == "hub" else ("source", "target")  # a Hub dataset's: Multi30k's
        pairs = {
            name: _named_columns(s, data, {"source": defaults[:1], "target": defaults[1:]}, where[name])
            for name, s in splits.items()
        }
        return DatasetDict(pairs)
    out = {}
    for split in ("train", "validation", "test"):
        if getattr(data, f"{split}_source") is not None:
            src, tgt = getattr(data, f"{split}_source"), getattr(data, f"{split}_target")
            a, b = _read_lines(src, "data source file", data), _read_lines(tgt, "data target file", data)
            if len(a) != len(b):  # never a silent shift of the pairs
                raise ValueError(
                    f"{src} has {len(a)} lines but {tgt} has {len(b)}: parallel files must align line by line "
                    "(one sentence a line, the same count in both)."
                )
            columns = [a.rename_column("text", "source"), b.rename_column("text", "target")]
            out[split] = concatenate_datasets(columns, axis=1)
    if "train" not in out or "validation" not in out:
        raise ValueError(
            "data needs train_source/train_target and validation_source/validation_target files (one sentence a "
            "line), or data.train_file with source and target columns (e.g. JSONL pairs)."
        )
    return DatasetDict(out)
