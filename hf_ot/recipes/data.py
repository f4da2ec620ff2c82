"""The recipes' data, read by datasets' loaders: a causal LM's text blocks, a classifier's labels, sentence pairs."""

from __future__ import annotations

import codecs
import dataclasses
import errno
import functools
import glob
import hashlib
import importlib
import io
import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import datasets
import numpy as np
import pyarrow.compute as pc
from datasets import ClassLabel, Dataset, DatasetDict, IterableDataset, IterableDatasetDict, Value, load_dataset
from datasets.data_files import SPLIT_KEYWORDS, DataFilesDict, get_data_patterns
from datasets.fingerprint import Hasher

from ..checkpoints import read_json
from ..errors import UsageError
from ..redaction import hide_secrets
from ..run_folders import file_digest
from .config import DataSection, _given

# Rows grouped per map batch, as run_clm's group_texts (a group drops up to block_size - 1 tokens): GROUP_BYTES of
# text (1 MB drops ~0.2%), a stream GROUP_ROWS rows or GROUP_BYTES, which comes first; a text of at most EXACT_BYTES
# is one group (nanoGPT's way).
GROUP_BYTES = 1_000_000
GROUP_ROWS = 1000
EXACT_BYTES = 20_000_000
# Memory bounded by characters: rows cut at ROW_CHARS, at most TOKENIZE_CHARS per tokenizer call (1M characters of a
# character-level tokenizer took 640 MB).
ROW_CHARS = 1_000_000
TOKENIZE_CHARS = 200_000


def _no_space(err: BaseException | None) -> OSError | None:
    """The full disk (ENOSPC, or a quota: EDQUOT) behind `err` (datasets wraps it: DatasetGenerationError), or None."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return err
        err = err.__cause__ or err.__context__
    return None


def caching(function):
    """`function` (it reads data through datasets, which writes Arrow files into its cache) with a full disk named:
    the cache folder and the fix, not datasets' DatasetGenerationError."""

    @functools.wraps(function)
    def reading(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except Exception as err:
            if (full := _no_space(err)) is None:
                raise
            raise OSError(
                f"No space left on the device while datasets cached the data in {datasets.config.HF_DATASETS_CACHE} "
                f"({full.strerror or full}): free space there, or set HF_DATASETS_CACHE to a folder on a disk with "
                "room (the cache holds the data as Arrow files, about the data's size, and the tokenized splits)."
            ) from None

    return reading


def resolve_path(path: str) -> str:
    """A recipe's relative path, from the current folder; where nothing is there, from the checkout (../shared/data)."""
    p = Path(os.path.expanduser(path))  # (an absolute path is itself in both)
    here, checkout = Path.cwd() / p, Path(__file__).resolve().parents[2] / p
    return str(checkout if not here.exists() and checkout.exists() else here)


# The packaged recipes' offline copies (folders of ../shared/data in a checkout) and the Hub dataset each stands for:
# where a copy is absent, the recipe reads the Hub dataset (online), or a download of it in $HF_OT_DATA/<folder>.
DATA_ENV = "HF_OT_DATA"
OFFLINE_COPIES = {  # folder: (Hub id, keys that read the Hub dataset as the copy is read, hf download's extra flags)
    "multi30k": ("bentrevett/multi30k", {"source_column": "de", "target_column": "en"}, ""),
    "sst2": ("stanfordnlp/sst2", {"text_column": "sentence", "label_column": "label"}, ""),
    "tinyshakespeare": ("karpathy/tiny_shakespeare", {"text_column": "text"}, " --revision refs/convert/parquet"),
}
HUB_REVISIONS = {"karpathy/tiny_shakespeare": "refs/convert/parquet"}  # a loading script: its Parquet export
_COPY_PATH = re.compile(r"(?:^|/)shared/data/(" + "|".join(OFFLINE_COPIES) + r")(?:/(.*))?$")


def is_offline_copy(path: str) -> bool:
    """Whether `path` names a file of a packaged recipe's offline copy (../shared/data/<folder>/...)."""
    return bool(_COPY_PATH.search(path))


def _hub_off() -> bool:
    flags = (os.environ.get(k, "").strip().lower() for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    return any(f in ("1", "true", "yes", "on") for f in flags)


def _download_advice(folder: str) -> str:
    hub, _, flags = OFFLINE_COPIES[folder]
    return (
        f"`hf download {hub} --repo-type dataset{flags} --local-dir DIR/{folder}` where the Hub is reachable, then set "
        f"{DATA_ENV}=DIR"
    )


@functools.cache
def _say(message: str) -> None:  # once a process: every reader of a run resolves the same data
    logging.getLogger("hf_ot").warning(message)


def data_source(data: DataSection | Mapping) -> DataSection:
    """`data` with a packaged recipe's offline copy (../shared/data/<folder>/...) found: beside the checkout or the
    current folder, else in $HF_OT_DATA/<folder> (as in ../shared/data, or a download of its Hub dataset), else the Hub
    dataset itself (online). Which one is said on the console; offline without a copy, the error names the Hub
    dataset, HF_OT_DATA and the download command. Other data is returned as it is."""
    data = DataSection.of(data)
    keys_of_paths = ("train_file", "validation_file", "dataset", *LINE_KEYS)
    copies = {k: m for k in keys_of_paths if isinstance(v := getattr(data, k), str) and (m := _COPY_PATH.search(v))}
    if not copies:
        return data
    folder = next(iter(copies.values())).group(1)
    hub, keys, _ = OFFLINE_COPIES[folder]
    root = os.environ.get(DATA_ENV)
    found: dict[str, str] = {}
    for key, match in copies.items():
        given = getattr(data, key)
        if os.path.exists(resolve_path(given)):
            found[key] = given
        elif root and os.path.exists(in_root := os.path.join(os.path.expanduser(root), folder, match.group(2) or "")):
            found[key] = in_root
    if len(found) == len(copies):  # the copy as the recipe reads it
        where = {os.path.dirname(resolve_path(v)) if k != "dataset" else resolve_path(v) for k, v in found.items()}
        _say(f"data: the offline copy of {hub} in {', '.join(sorted(where))}")
        return dataclasses.replace(data, **cast(dict[str, Any], found))
    hub_keys: dict[str, Any] = {**dict.fromkeys(copies), **keys, "source": "hub", "dataset_config": None}
    download = os.path.join(os.path.expanduser(root), folder) if root else None
    if download and os.path.isdir(download):  # a download of the Hub dataset (hf download ... --local-dir)
        _say(f"data: {download} ({DATA_ENV}), a download of the Hub dataset {hub}")
        return dataclasses.replace(data, **{**hub_keys, "dataset": download})
    absent = next(os.path.dirname(v) if k != "dataset" else v for k, v in ((k, getattr(data, k)) for k in copies))
    cached = " from datasets' cache (the Hub is off)" if _hub_off() else ""  # (none cached: _load names the fix)
    _say(
        f"data: the Hub dataset {hub}{cached} (the recipe's offline copy {absent} is not here; {DATA_ENV}=DIR reads a "
        f"local one from DIR/{folder})"
    )
    return dataclasses.replace(data, **{**hub_keys, "dataset": hub})


def _open_data(path: str):
    """A data file's bytes, decompressed (gzip, bz2, xz by their first bytes): the text datasets reads."""
    with open(path, "rb") as f:
        head = f.read(6)
    for magic, module in ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "lzma")):
        if head.startswith(magic):
            return importlib.import_module(module).open(path, "rb")
    return open(path, "rb")


def _first_line(path: str, pattern: bytes, encoding: str = "") -> tuple[int, bytes] | None:
    """(line (1-based), byte) of the first match of `pattern` or byte `encoding` cannot decode, or None: in chunks."""
    line, held, decoder = 1, b"", codecs.getincrementaldecoder(encoding or "latin-1")()
    with _open_data(path) as f:
        while chunk := f.read(1 << 20):
            chunk, held = held + chunk, b""
            if chunk.endswith(b"\r"):  # its \n may start the next chunk
                chunk, held = chunk[:-1], b"\r"
            try:
                decoder.decode(chunk)
                at = found.start() if (found := re.search(pattern, chunk)) else -1
            except UnicodeError as bad:  # (UTF-16 without a byte order mark: a UnicodeError without a position)
                at = max(getattr(bad, "start", 0), 0)
            if at >= 0:
                return line + chunk[:at].count(b"\n"), chunk[at : at + 1]
            line += chunk.count(b"\n")
    return (line, held) if re.search(pattern, held) else None


def empty_file_error(what: str, path: str) -> ValueError:
    """A file without text: no bytes, or only whitespace."""
    return ValueError(f"{what}: {path} is empty (no text besides whitespace). Give a file with data.")


# byte order marks that name a file's encoding (UTF-32's first: its little-endian mark starts with UTF-16's)
_BOMS = [("utf-32", m) for m in (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)]
_BOMS += [("utf-16", m) for m in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)]


def _read_error(
    err: BaseException, what: str, files: list[str], builder: str, encoding: str, given=None, by_name=None
) -> BaseException:
    """A loader's error as one naming the file and the fix, else `err` (`given`: data.format; `by_name`: the names')."""
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, UnicodeError):
        cause = cause.__cause__ or cause.__context__
    looks = by_name or _sniffed(files[0]) if given else None
    if given and (_BUILDERS.get(looks, looks) != builder if looks else cause is None):
        # data.format, set and not the format the file's name (or content) says, is the suspect, not the encoding
        said = f" (its {'name' if by_name else 'content'} says {looks})" if looks else ""
        first = (str(err).strip().splitlines() or [""])[0]
        return ValueError(
            f"{what}: {files[0]} could not be read as data.format={given}{said}: {type(err).__name__}: {first}. Set "
            "data.format to the file's format (csv, tsv, json, jsonl, parquet, arrow or text), or unset it."
        )
    for path in files if cause is not None else []:  # the file and line of the first byte that does not decode
        with _open_data(path) as f:  # a UTF-16 / 32 byte order mark names the file's encoding (Excel's "Unicode")
            head = f.read(4)
        bom = next((name for name, mark in _BOMS if head.startswith(mark)), None)
        if bom and codecs.lookup(bom).name != codecs.lookup(encoding).name:
            return ValueError(
                f"{what}: {path} is {bom.upper()} text (it starts with a byte order mark of {bom.upper()}), not "
                f"{encoding}: set data.encoding={bom}, or re-save it as UTF-8 (e.g. `iconv -f {bom} -t utf-8`)."
            )
        if bad := _first_line(path, rb"(?!)", encoding):
            fix = "re-save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`), or set data.encoding (e.g. latin-1)."
            if codecs.lookup(encoding).name != "utf-8":
                fix = f"data.encoding={encoding} reads every data file: save them all so, or as UTF-8 and unset it."
            at = f"first bad byte at line {bad[0]} (0x{bad[1].hex()})"
            return ValueError(f"{what}: {path} is not valid {encoding} text ({at}): {fix}")
    if builder in ("parquet", "arrow"):
        return ValueError(f"{what}: {files[0]} is not a readable {builder} file ({err}).")
    parser: BaseException | None = err
    while parser is not None and type(parser).__name__ != "ParserError":  # pandas': the CSV reader's own error
        parser = parser.__cause__ or parser.__context__
    if parser is not None:
        fix = (  # an unclosed quote, else a row of more fields than the header
            'a field that starts with a quote (") must end with one (a quote inside it written twice: ""): close or '
            "remove it"
            if "inside string" in str(parser)
            else "every row needs the header's number of fields: put a field that holds the separator in quotes"
        )
        return ValueError(f"{what}: {', '.join(files)} could not be read as CSV / TSV ({str(parser).strip()}): {fix}.")
    if "corresponds to no data" in str(err):  # datasets' error for data without rows (blank files are named before)
        header = " (only a header line?)" if builder == "csv" else ""
        return ValueError(f"{what}: {', '.join(files)} has no rows{header}. Give a file with examples.")
    return err


def data_files(spec: str, what: str) -> list[str]:
    """The local files `spec` names: a file, a folder (its files, sorted; hidden ones left out) or a glob pattern."""
    full = resolve_path(spec)
    found = [full] if os.path.exists(full) else []
    pattern = glob.has_magic(spec) and not found  # a path that is there names that file or folder
    if pattern:
        found = sorted(p for p in glob.glob(full, recursive=True) if Path(p).is_file())
    elif Path(full).is_dir():
        found = sorted(str(p) for p in Path(full).rglob("*") if p.is_file() and not p.name.startswith("."))
    elif found and not Path(full).is_file():  # a device, FIFO or socket: reading could never end
        raise UsageError(f"{what}: {full} is not a regular file (a device, pipe or socket): give a data file.")
    if not found and re.match(r"[A-Za-z][\w+.-]+://", spec):  # (resolved, it would be a path that hides no secret)
        raise FileNotFoundError(
            hide_secrets(
                f"{what}: {spec!r} is a URL: hf_ot reads local files (a file, folder or glob) and Hub ids (data.dataset"
                "). Download the data first and give its path."
            )
        )
    if not found:
        raise FileNotFoundError(
            f"{what}: {'nothing matches' if pattern else 'file'} {spec!r} {'' if pattern else 'not found '}(looked at "
            f"{full}): fix the path (--set {what}=PATH: a file, folder or glob), or give a Hub id as data.dataset."
        )
    return found


# file extension -> format (a compression suffix looked through); the datasets builder of each format
_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl"}
_EXTENSIONS |= {".parquet": "parquet", ".arrow": "arrow", ".txt": "text", ".text": "text"}
_BUILDERS = {"tsv": "csv", "jsonl": "json"}
EMBEDDED_NAME = "pydoc_data.topics (CPython reference manual)"
LINE_KEYS = [f"{split}_{side}" for split in ("train", "validation", "test") for side in ("source", "target")]  # (pairs)


def _decoding(data: DataSection) -> tuple[str, str]:
    """(data.encoding, default utf-8; its codec: utf-8-sig for UTF-8, so a byte order mark is no text)."""
    encoding = _given(data.encoding, "utf-8")
    return encoding, "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding


def _sniffed(path: str) -> str | None:
    """A file's format where its name does not say it: Parquet by its first bytes, JSON by a first line of JSON."""
    with _open_data(path) as f:
        head = f.readline(1 << 20)
    try:
        return "parquet" if head.startswith(b"PAR1") else "json" if isinstance(json.loads(head), (dict, list)) else None
    except ValueError:
        return None


def _read_files(files: list[str], spec: str, what: str, data: DataSection, default_format: str, streaming: bool):
    """(rows, format) of `files` by datasets' builder of their format (data.format, extension, content, default)."""
    named = {f: _EXTENSIONS.get(Path(re.sub(r"\.(gz|bz2|xz|zst|lz4)$", "", f.lower())).suffix, "") for f in files}
    if len(known := set(named.values()) - {""}) > 1:
        raise ValueError(
            f"{what}: {spec} holds files of several formats ({', '.join(sorted(known))}): give the files of one "
            "(a glob), or name the splits' files train* and validation*."
        )
    files = [f for f in files if named[f] in known] or files
    by_name = next(iter(known), None)  # (README.md and other files beside the data are left out, as datasets does)
    fmt = data.format or by_name or _sniffed(files[0]) or default_format
    builder, (encoding, codec) = _BUILDERS.get(fmt, fmt), _decoding(data)
    of_builder: dict[str, dict] = {
        # only an empty cell is missing: a class or text "NA", "None", "null" or "n/a" is that text (pandas' default)
        "csv": dict(
            encoding=codec, delimiter="\t" if "tsv" in (fmt, by_name) else ",", keep_default_na=False, na_values=[""]
        ),
        "text": dict(encoding=codec, keep_linebreaks=True, chunksize=10 << 20),  # (the chunks: in its cache key)
        "json": dict(encoding=codec, field=data.field),
    }
    # large record batches (small ones map every page)
    kwargs = of_builder.get(builder, {}) | ({} if streaming else {"writer_batch_size": 1_000_000})
    for name in files:  # a workbook (.xlsx and .ods are ZIP archives, .xls an OLE2 file) is no data datasets reads
        with _open_data(name) as f:
            if f.read(4) in (b"PK\x03\x04", b"\xd0\xcf\x11\xe0"):
                raise ValueError(f"{what}: {name} is a ZIP archive or workbook: save it as CSV (UTF-8) or Parquet.")
    for name in files if builder == "csv" else []:
        if found := _first_line(name, rb"\r(?!\n)"):
            raise ValueError(
                f"{what}: {name} has a lone carriage return (\\r without \\n) in line {found[0]}, where the CSV reader "
                "would end the row: replace it (e.g. by a space), keeping \\n or \\r\\n line ends."
            )
    if all(_first_line(name, rb"\S") is None for name in files):  # (a stream is checked only here)
        raise empty_file_error(what, spec)
    try:  # (escaped: datasets globs data_files again, and a file's name may hold [ ] * ?)
        key = None if streaming else Hasher.hash([file_digest(Path(f)) for f in files])  # (datasets' own: mtimes)
        escaped = [glob.escape(f) for f in files]
        if builder == "text":  # read ROW_CHARS at a time (datasets' text builder holds a whole line: 200 MB of one)
            rows = dict(paths=tuple(files), codec=codec, limit=ROW_CHARS, sha256=key or "")  # (a list: shards)
            features = datasets.Features({"text": Value("string")})
            if streaming:
                ds = IterableDataset.from_generator(_text_rows, features=features, gen_kwargs=rows)
            else:  # record batches of about 10 MB, as datasets' text builder writes (small ones map every page)
                batch = _rows_per(10 << 20, files)
                ds = Dataset.from_generator(_text_rows, features=features, gen_kwargs=rows, writer_batch_size=batch)
        else:
            ds = load_dataset(builder, key, data_files=escaped, split="train", streaming=streaming, **kwargs)
    except Exception as err:
        raise _read_error(err, what, files, builder, encoding, data.format, by_name) from None
    if builder == "json" and not streaming and ds.num_rows == 1 and any(isinstance(v, list) for v in ds[0].values()):
        if any(not isinstance(v, list) or v and isinstance(v[0], dict) for v in ds[0].values()):
            raise ValueError(  # the rows under a key ({"data": [...]}): datasets' field reads them
                f"{what}: {files[0]} is one JSON object (keys {ds.column_names[:10]}), not rows: set data.field="
                f"{next(k for k, v in ds[0].items() if isinstance(v, list))} (the key of the rows) or write JSON Lines."
            )
        ds = Dataset.from_dict(ds[0])  # an object of columns, {"text": [...], "label": [...]}
    lists = builder == "json" and ds.column_names == ["text"] and not isinstance(ds.features["text"], Value | None)
    if lists and (_first_line(files[0], rb"[^\s\[]") or (0, b""))[1] != b"{":  # [["a", "b"], ...], not {"text": [..]}
        raise ValueError(
            f"{what}: {files[0]}'s rows are lists (e.g. {str(ds[0]['text'])[:60]}), not objects with keys, which "
            'datasets reads as one column "text" of lists. Write each row as an object, e.g. {"text": ..., "label": '
            "...} (JSON Lines: one a line), or save the data as CSV with a header line."
        )
    return ds, fmt


def _load(spec: str, what: str, data: DataSection, default_format: str, streaming: bool) -> tuple[dict, dict]:
    """({split: rows}, {split: format}) of a save_to_disk folder, files (a folder split as datasets does) or Hub id."""
    folder = Path(resolve_path(spec))
    if saved := [folder / name for name in ("dataset_dict.json", "state.json") if (folder / name).is_file()]:
        # written by save_to_disk: read by datasets' arrow builder into its cache (keyed by the splits' fingerprints,
        # not by datasets' own key, the files' mtimes, which a copy keeps), so no map writes beside the data
        fix = "Save the dataset again with save_to_disk, or give its data files."
        state = lambda split: read_json(folder / split / "state.json", fix)
        arrows = lambda split: [glob.escape(str(folder / split / f["filename"])) for f in state(split)["_data_files"]]
        parts = read_json(saved[0], fix).get("splits", [""])
        files, key = {s or "train": arrows(s) for s in parts}, Hasher.hash([state(s)["_fingerprint"] for s in parts])
        return dict(datasets.load_dataset("arrow", key, data_files=files)), {}
    if what != "data.dataset" or spec.startswith((".", "/", "~")) or folder.exists():  # (a Hub id never does)
        by_split = {"train": data_files(spec, what)}
        if folder.is_dir():  # split by file names, as datasets' load_dataset splits one
            base = glob.escape(str(folder))  # (datasets globs the folder's path too: [ ] * ? in it are names)
            found = DataFilesDict.from_patterns(get_data_patterns(base), base_path=base)
            by_split = {str(split): sorted(map(str, names)) for split, names in found.items()}
        read = {s: _read_files(f, spec, what, data, default_format, streaming) for s, f in by_split.items()}
        return {s: ds for s, (ds, _) in read.items()}, {s: fmt for s, (_, fmt) in read.items()}
    kwargs: dict[str, Any] = {"streaming": True} if streaming else {}
    if revision := HUB_REVISIONS.get(spec):
        kwargs["revision"] = revision
    try:  # a Hub id
        loaded = load_dataset(spec, data.dataset_config, **kwargs)
    except ConnectionError as err:  # offline and not cached, or the Hub out of reach: a local copy named
        copy = next((f for f, (hub, _, _) in OFFLINE_COPIES.items() if hub == spec), None)
        fix = f" Read a local copy: {_download_advice(copy)}." if copy else " Give local data (data.train_file)."
        raise ConnectionError(f"data.dataset={spec}: the Hub could not be reached ({err}).{fix}") from None
    return (dict(loaded) if isinstance(loaded, (DatasetDict, IterableDatasetDict)) else {"train": loaded}), {}


@caching
def load_splits(data: DataSection, default_format: str = "csv", streaming: bool = False, hold_out: bool = True):
    """({split: rows}, {split: where it came from}, {split: file format}) of any data: every task's reader."""
    hub = data.kind() == "hub"
    name = data.dataset if hub else data.train_file
    if hub and not name:
        raise ValueError("data.source is hub but data.dataset is not set: name the Hub dataset id.")
    if name:
        loaded, formats = _load(name, "data.dataset" if hub else "data.train_file", data, default_format, streaming)
    elif default_format == "text":  # a causal LM's default: the embedded text
        name, loaded, formats = EMBEDDED_NAME, {"train": _embedded_rows()}, {"train": "text"}
    else:
        raise FileNotFoundError("data.train_file is not set: give the path of the training data in the recipe.")
    splits, where, fmts = {}, {}, {}
    for split in ("train", "validation", "test"):
        key = f"{split}_split"
        # unset: the split of a name datasets gives it in a folder (dev, valid and val are the validation split)
        asked = _given(getattr(data, key), next((s for s in SPLIT_KEYWORDS[split] if s in loaded), split))
        if asked in loaded:
            splits[split], fmts[split] = loaded[asked], formats.get(asked)
            where[split] = name if len(loaded) == 1 else f"{name} ({asked})"
        elif getattr(data, key) is not None:
            raise ValueError(f"data.{key}={asked!r} is not a split of {name}: it has {list(loaded)}.")
    if "train" not in splits:
        raise ValueError(f"{name} has no split 'train' (it has {list(loaded)}): set data.train_split.")
    if spec := data.validation_file:  # the user's validation data, whatever the training data is
        loaded, found = _load(spec, "data.validation_file", data, default_format, streaming)
        split = validation_split_of(loaded)
        splits["validation"], fmts["validation"], where["validation"] = loaded[split], found.get(split), spec
    if "validation" not in splits and hold_out:  # (a causal LM holds out its own way: text_splits)
        held_out(splits, where, data)
    return splits, where, fmts


def validation_split_of(splits) -> str:
    """The split of data.validation_file read for validation: its validation* (dev, ...), else train*, else test*."""
    return next((s for s in (*SPLIT_KEYWORDS["validation"], "train") if s in splits), next(iter(splits), "train"))


def held_out(splits: dict, where: dict, data: DataSection) -> None:
    """splits["validation"]: data.val_fraction (default 0.1) of splits["train"], held out (seeded)."""
    fraction = float(_given(data.val_fraction, 0.1))  # (checked with the recipe: between 0 and 1)
    if (rows := len(splits["train"])) < 2:
        raise ValueError(f"No validation data: give data.validation_file ({rows} training rows are too few to split).")
    splits["train"], splits["validation"] = splits["train"].train_test_split(test_size=fraction, seed=0).values()
    where["validation"] = f"{where['train']} (data.val_fraction={fraction} of it)"


def data_fingerprint(data: DataSection | Mapping) -> dict:
    """The data a run reads, by content (each local file's size and SHA-256), for a resumed run to compare."""
    data = data_source(data)
    out: dict = {}
    for key in sorted(("dataset", "train_file", "validation_file", *LINE_KEYS)):
        value = getattr(data, key)  # (a Hub id is not there and no glob)
        if isinstance(value, str) and (os.path.exists(full := resolve_path(value)) or glob.has_magic(value)):
            files = [Path(f) for f in data_files(value, f"data.{key}")]
            digests = [{"path": str(p), "bytes": p.stat().st_size, "sha256": file_digest(p)} for p in files]
            out[f"data.{key}"] = digests[0] if len(digests) == 1 and os.path.isfile(full) else digests
    if data.kind() == "embedded":
        out["embedded text"] = {"sha256": hashlib.sha256(embedded_text().encode()).hexdigest()}
    return out


def embedded_text() -> str:
    """The embedded default text: the Python reference manual's topics (CPython's pydoc_data.topics, ~465k chars)."""
    return "".join(_embedded_rows()["text"])


def _embedded_rows() -> Dataset:
    """embedded_text() as rows, one topic each (their concatenation is that text)."""
    from pydoc_data.topics import topics

    rows = [topics[key] for key in sorted(topics)]
    return Dataset.from_dict({"text": [row + "\n\n" for row in rows[:-1]] + rows[-1:]})


def _text_lengths(ds: Dataset, unit: str = "characters", column: str = "text") -> np.ndarray:
    """Characters (or bytes, from the Arrow offsets) per row of a text column, a selection's through its indices."""
    values = ds.data.column(column)
    lengths = pc.fill_null(pc.utf8_length(values) if unit == "characters" else pc.binary_length(values), 0)
    if (indices := getattr(ds, "_indices", None)) is not None:
        lengths = pc.take(lengths, indices.column(0))
    return np.asarray(lengths.to_numpy(), dtype=np.int64)


@caching
def text_splits(data: DataSection | Mapping) -> DatasetDict | IterableDatasetDict:
    """Splits train and validation of a "text" column; held out: the last val_fraction of the characters (nanoGPT)."""
    data = data_source(data)  # (data.val_fraction checked: between 0 and 1)
    read, where, formats = load_splits(data, "text", streaming=bool(data.streaming), hold_out=False)
    splits = {k: _as_text(v, data, where[k], formats.get(k)) for k, v in read.items() if k != "test"}
    train, validation, rows = splits["train"], splits.get("validation"), int(_given(data.validation_rows, 1000))
    if validation is None:  # (named in check_datasets' errors)
        held = f"first data.validation_rows={rows} rows" if data.streaming else "data.val_fraction"
        where["validation"] = f"{where['train']}, held out: its {held}"
    stream = isinstance(train, IterableDataset)
    if stream:  # held out: the stream's first data.validation_rows rows
        validation, train = (train.take(rows), train.skip(rows)) if validation is None else (validation, train)
    elif validation is None:  # the row holding the cut is cut in two; the others stay in Arrow (contiguous selections)
        ends = np.cumsum(_text_lengths(train))
        cut = int(int(ends[-1]) * (1 - float(_given(data.val_fraction, 0.1))))
        row = int(np.searchsorted(ends, cut, side="right"))
        text, start = train[row]["text"], int(ends[row - 1]) if row else 0
        one = lambda piece: Dataset.from_dict({"text": [piece]}, features=train.features)
        part = lambda a, b: [train.select(range(a, b))] if a < b else []  # (datasets refuses an empty range)
        validation = datasets.concatenate_datasets([one(text[cut - start :]), *part(row + 1, len(train))])
        train = datasets.concatenate_datasets([*part(0, row), one(text[: cut - start])])
    out = (IterableDatasetDict if stream else DatasetDict)(train=train, validation=validation)
    out.where = where  # (where each split came from)
    return out


def _string_column(ds: Dataset, column: str, where: str) -> Dataset:
    """`column` as text: numbers are their digits (a column of them reads as numbers; beside text in JSON, as Json,
    which a cast would quote); lists and objects are refused, naming the data and the column."""
    feature = ds.features[column]
    if isinstance(feature, Value):  # (a cast of strings to strings changes nothing)
        return ds if feature == Value("string") else ds.cast_column(column, Value("string"))

    def as_text(batch):
        if bad := next((v for v in batch[column] if isinstance(v, (list, dict))), None):
            raise ValueError(
                f"{where}: column {column!r} holds {type(bad).__name__}s (e.g. {str(bad)[:60]}), not text: give one "
                "string per row (e.g. join the parts), or choose another column (data.text_column, source_column, ...)."
            )
        return {column: [v if v is None or isinstance(v, str) else str(v) for v in batch[column]]}

    features = datasets.Features({**ds.features, column: Value("string")})
    return ds.map(as_text, batched=True, features=features, desc=f"Reading column {column!r} as text")


def _as_text(ds, data: DataSection, where: str, fmt: str | None):
    """Rows "text" of at most ROW_CHARS characters: a text file's lines, else data.text_column's rows + newline."""
    names = ["text"] if fmt == "text" else list(ds.column_names or next(iter(ds), {}))  # a stream: its first row's
    column = "text" if fmt == "text" else _column(names, data.text_column, ("text",), "text_column", where)
    if fmt != "text" and not isinstance(ds, IterableDataset):
        ds = _string_column(ds, column, where)
    end = "" if fmt == "text" else "\n"
    rows = lambda batch, limit: {
        "text": [p for t in batch[column] for p in split_text(("" if t is None else str(t)) + end, limit)]
    }
    kwargs = dict(batched=True, remove_columns=names, fn_kwargs={"limit": ROW_CHARS})
    if isinstance(ds, IterableDataset):  # (a text file's rows are cut as they are read: _text_rows)
        return ds if fmt == "text" else ds.map(rows, batch_size=100, **kwargs)
    lengths = _text_lengths(ds, "bytes", column)  # (bytes >= characters)
    if fmt == "text" and (len(ds) == 0 or lengths.max() <= ROW_CHARS):
        return ds
    batch = max(1, min(1000, round(len(ds) * ROW_CHARS / max(int(lengths.sum()), 1))))
    ds = ds.map(rows, batch_size=batch, writer_batch_size=1000, desc="Cutting long lines", **kwargs)
    batches = ds.with_format("arrow").iter(10**5)  # a text of nothing but whitespace is an empty file (any size)
    if fmt != "text" and not any(pc.any(pc.match_substring_regex(b["text"], r"\S")).as_py() for b in batches):
        raise empty_file_error("data", where)
    return ds


def split_text(text: str, limit: int) -> list[str]:
    """`text` in pieces of at most `limit` characters, cut before a whitespace in a piece's last tenth if any."""
    pieces, start = [], 0
    while len(text) - start > limit:
        cut = max(text.rfind(space, start + limit - limit // 10 + 1, start + limit) for space in " \n\t")
        end = cut if cut > 0 else start + limit
        pieces.append(text[start:end])
        start = end
    return [*pieces, text[start:]]


def iter_texts(ds, columns=("text",), batch_size: int = 1000):
    """Batches of strings from the columns of a dataset (for a tokenizer's trainer), no Python list held."""
    for batch in ds.select_columns(list(columns)).iter(batch_size=batch_size):
        yield from (batch[column] for column in columns)


def text_characters(splits) -> str:
    """The sorted distinct characters of every split's text (the vocabulary of a character-level tokenizer)."""
    chars: set[str] = set()
    for texts in (b for ds in splits.values() for b in iter_texts(ds, batch_size=10_000)):
        chars.update(*texts)
    return "".join(sorted(chars))


class _TokenizeAndGroup:
    """The map function (a class, so `datasets` can pickle it to worker processes and fingerprint it for caching)."""

    def __init__(self, tokenizer, block: int, stride: int):
        self.tokenizer, self.block, self.stride = tokenizer, block, stride

    def __call__(self, batch):
        # at most TOKENIZE_CHARS characters per tokenizer call, ids as int32 arrays: memory follows bytes, not rows
        chunks: list[list[str]] = []
        size = TOKENIZE_CHARS + 1
        for piece in (p for text in batch["text"] for p in split_text(text, TOKENIZE_CHARS)):
            if (size := size + len(piece)) > TOKENIZE_CHARS:
                chunks.append([])
                size = len(piece)
            chunks[-1].append(piece)
        encode = lambda chunk: self.tokenizer(chunk, add_special_tokens=False, return_attention_mask=False)["input_ids"]
        ids = [np.asarray(e, dtype=np.int32) for chunk in chunks for e in encode(chunk)]
        flat = np.concatenate([np.zeros(0, dtype=np.int64), *ids])  # joined, as int64: torch's dtype of token ids
        windows = np.lib.stride_tricks.sliding_window_view(flat, min(self.block, len(flat)))  # (a view: no copy)
        blocks = windows[:: self.stride].copy() if len(flat) >= self.block else np.zeros((0, self.block), np.int64)
        return {"input_ids": blocks, "labels": blocks}  # labels = input_ids: the model shifts them


@caching
def _stream_blocks(texts, fn, rows: int, chars: int):
    """The blocks of a stream of "text" rows, grouped (as run_clm's group_texts) by `rows` rows or, first, `chars`
    characters: a stream of long rows (a file of one line) holds one group in memory, not `rows` of them."""
    batch: list[str] = []
    size = 0
    for row in texts:
        batch.append(row["text"] or "")
        size += len(batch[-1])
        if len(batch) >= rows or size >= chars:
            out = fn({"text": batch})
            yield from ({"input_ids": b, "labels": b} for b in out["input_ids"])
            batch, size = [], 0
    if batch:
        out = fn({"text": batch})
        yield from ({"input_ids": b, "labels": b} for b in out["input_ids"])


def lm_blocks(
    texts, tokenizer, block_size: int, stride: int | None = None, *, num_proc=None, group_rows=None, limit=None, desc=""
):
    """Blocks of `block_size` tokens every `stride` of a "text" column, in one map as run_clm's group_texts."""
    block, stride = int(block_size), int(stride or block_size)
    if block < 1 or stride < 1:
        raise ValueError(f"data.block_size and data.stride must be >= 1, got {block} and {stride}.")
    ids, fn = datasets.Sequence(Value("int32")), _TokenizeAndGroup(tokenizer, block, stride)
    kwargs: dict = dict(batched=True, remove_columns=["text"], features=datasets.Features(input_ids=ids, labels=ids))
    if isinstance(texts, IterableDataset):  # groups of GROUP_ROWS rows or GROUP_BYTES characters, read as needed
        groups = dict(texts=texts, fn=fn, rows=group_rows or GROUP_ROWS, chars=GROUP_BYTES)
        out = IterableDataset.from_generator(_stream_blocks, features=kwargs["features"], gen_kwargs=groups)
        return out.take(int(limit)) if limit else out
    if not group_rows:  # a text of at most EXACT_BYTES is one group; a larger one in groups of ~GROUP_BYTES
        size = int(_text_lengths(texts, "bytes").sum())
        group_rows = max(len(texts), 1) if size <= EXACT_BYTES else max(1, round(len(texts) * GROUP_BYTES / size))
    # datasets' own parallel map: num_proc contiguous shards, each grouped from its first row (as run_clm)
    kwargs |= dict(batch_size=group_rows, remove_columns=texts.column_names)
    if not texts.cache_files and int(os.environ.get("WORLD_SIZE", "1")) > 1 and datasets.is_caching_enabled():
        # several processes map in-memory data (datasets caches file-backed maps only): one file named by fingerprint
        key = Hasher.hash((texts._fingerprint, fn, sorted((k, repr(v)) for k, v in kwargs.items())))
        folder = Path(datasets.config.HF_DATASETS_CACHE) / "hf_ot_in_memory"
        folder.mkdir(parents=True, exist_ok=True)
        kwargs["cache_file_name"] = str(folder / f"{key}.arrow")
    workers = num_proc if num_proc and num_proc > 1 and len(texts) >= num_proc else None
    split, desc = desc or "the", f"Tokenizing {desc or 'the'} text into blocks of {block}"
    # (num_proc shards: grouped by the whole text's size; one group: the first rows' blocks are the text's first)
    rows = len(texts) if workers or not limit else 1 if group_rows >= len(texts) else group_rows
    cache = kwargs.pop("cache_file_name", None)
    while True:  # `limit` blocks: only the first groups of rows that make them are tokenized (doubled until enough)
        part = texts if rows >= len(texts) else texts.select(range(rows))
        if cache:
            kwargs["cache_file_name"] = cache if part is texts else cache.replace(".arrow", f"-{rows}.arrow")
        out = part.map(fn, num_proc=workers, desc=desc, **kwargs)
        if part is texts or len(out) >= int(limit):
            if limit and (part is not texts or int(limit) < len(out)):  # a cut leaving blocks out: said
                key = "data.max_train_blocks" if split == "train" else "data.max_eval_blocks"
                of = f"of its {len(out)} blocks" if part is texts else f"blocks (read from its first {rows} rows)"
                logging.getLogger("hf_ot").warning(f"{split} text: using {limit} {of} ({key}={limit})")
            return out.select(range(min(int(limit), len(out)))) if limit else out
        rows *= 2


@caching
def lm_datasets(data: DataSection | Mapping, tokenizer, splits=None) -> tuple:
    """(train, validation) causal-LM blocks of `data`, checked; a stream's validation read into memory."""
    data = DataSection.of(data)
    splits = splits if splits is not None else text_splits(data)
    block = int(_given(data.block_size, 128))
    out = {
        name: lm_blocks(splits[name], tokenizer, block, data.stride, num_proc=data.num_proc, limit=limit, desc=name)
        for name, limit in (("train", data.max_train_blocks), ("validation", data.max_eval_blocks))
    }
    check_datasets(out["train"], out["validation"], data=data, texts=splits, tokenizer=tokenizer)
    streamed = isinstance(out["validation"], IterableDataset)
    return out["train"], Dataset.from_list(list(out["validation"])) if streamed else out["validation"]


def check_datasets(train, validation, task="causal-lm", data=None, texts=None, tokenizer=None) -> None:
    """A ValueError naming the split and the fix where train or validation has no example (no block of tokens)."""
    data = DataSection.of(data or {})
    for name, ds in (("train", train), ("validation", validation)):
        if ds is None or (next(iter(ds), None) is not None if isinstance(ds, IterableDataset) else len(ds) > 0):
            continue
        if task != "causal-lm":
            key = "max_train_samples" if name == "train" else "max_eval_samples"
            limit = f", or raise data.{key}={getattr(data, key)}" if getattr(data, key) is not None else ""
            raise ValueError(f"The {name} split has no examples after tokenization: give its data rows{limit}.")
        where = getattr(texts, "where", {})  # (the evaluation split: as trained, the held-out key unnamed)
        held = "held out" in where.get("validation", "held out") and not (data.validation_file or data.validation_split)
        key = "data.validation_rows" if data.streaming else "data.val_fraction" * (name == "validation")
        fix = f" {'lower' if name == 'train' else 'raise'} {key}," if held and key else ""
        what = "split" if texts is None else "text"
        if texts is not None and not isinstance(text := texts[name], IterableDataset):  # its size (tokens if quick)
            chars = int(_text_lengths(text).sum())
            ids = (i for b in iter_texts(text) for i in tokenizer(b, add_special_tokens=False).input_ids)
            what += f" ({f'{sum(map(len, ids))} tokens, ' if chars <= EXACT_BYTES else ''}{chars} characters)"
        raise ValueError(
            f"The {name} {what} has no complete block of data.block_size={_given(data.block_size, 128)} tokens"
            f"{f' (in {where[name]})' if name in where else ''}. Lower data.block_size,{fix} or give more text."
        )


class UnknownLabels(ValueError):
    """Labels that are no class of data.label_names or of the ids (evaluate answers with the model's classes)."""

    def __init__(self, message: str, file: str, labels: list):
        super().__init__(message)
        self.file, self.labels = file, labels


def _column(names: list[str], wanted: str | None, defaults: tuple[str, ...], key: str, where: str) -> str:
    """The column `wanted` (a data.*_column), else the first of `defaults` the data has; an error lists the data's."""
    if found := next((name for name in ([wanted] if wanted else defaults) if name in names), None):
        return found
    fix = f"Name the column in the recipe: --set data.{key}=NAME."
    if len(names) == 1 and (sep := next((c for c in ";|" if c in names[0]), None)):  # (Excel's CSV in many locales)
        fix = f"Its fields look separated by {sep!r}: save it with commas (CSV) or tabs (TSV)."
    raise ValueError(
        f"{where}: column(s) {[wanted] if wanted else list(defaults)} not found; the data has {names}. {fix}"
    )


def _named_columns(splits: dict, where: dict, data: DataSection, defaults: dict) -> DatasetDict:
    """The splits with a column per key of `defaults` (data.{key}_column, else the first there), text in every row."""
    read_as = f", read as data.format={data.format}" if data.format else ""  # (every file: a .csv one too)
    first = next(iter(splits))  # train, or a validation file read alone
    at = f"{first} split ({where[first]}{read_as})"
    columns = splits[first].column_names
    picked = {k: _column(columns, getattr(data, f"{k}_column"), v, f"{k}_column", at) for k, v in defaults.items()}
    for name, split in splits.items():
        if missing := sorted(set(picked.values()) - set(split.column_names)):
            raise ValueError(
                f"Column(s) {missing} are in {where[first]} but not in {where[name]}{read_as} (which has "
                f"{sorted(split.column_names)}): every split needs the same header (columns). Fix its header line"
                f"{', or unset data.format (it reads every data file)' if read_as else ''}."
            )
        for key, column in picked.items():  # missing text: the tokenizer's error would name neither file nor column
            if key != "label" and (missing := split.data.column(column).null_count):  # (a held-out split: whole table)
                rows = np.flatnonzero(pc.is_null(split.data.column(column)).to_numpy(zero_copy_only=False)) + 1
                raise ValueError(
                    f"{where[name]} ({name} split): column {column!r}{f' (data.{key}_column)' * (key != column)} has "
                    f"{missing} rows without text (empty cells), rows {rows[:10].tolist()} (counted from 1 after any "
                    "header line): give each its text, or drop them."
                )
    rename = {v: k for k, v in picked.items() if k != v}
    out = DatasetDict({k: s.select_columns(list(picked.values())).rename_columns(rename) for k, s in splits.items()})
    for key in (k for k in picked if k != "label"):
        out = DatasetDict({name: _string_column(split, key, where[name]) for name, split in out.items()})
    return out


@caching
def load_classification(data: DataSection | Mapping) -> DatasetDict:
    """Sentence classification from any data: columns text and label, the labels a ClassLabel of the classes."""
    data = data_source(data)
    splits, where, _ = load_splits(data, default_format="csv")
    out = _named_columns(splits, where, data, {"text": ("text", "sentence"), "label": ("label",)})
    names, values, first = data.label_names, set(), out["train"].features["label"]
    if isinstance(first, ClassLabel):  # the data names its classes: data.label_names may order them (or add some)
        if missing := sorted(set(first.names) - set(map(str, names or first.names))):
            message = f"{where['train']}: classes {missing} of its labels are not in data.label_names={names}."
            raise UnknownLabels(
                f"{message} Name every class of the data there, or drop data.label_names.", where["train"], missing
            )
        names = list(map(str, names)) if names else list(first.names)
    top = data.num_labels or (len(names) if names else None)  # integer class ids are below it
    trained: set = set()
    for name, split in [(k, v) for k, v in out.items() if not isinstance(v.features["label"], ClassLabel)]:
        feature, at = split.features["label"], f"{name} split ({where[name]})"
        dtype = getattr(feature, "dtype", type(feature).__name__)
        strings, ints = dtype in ("string", "large_string"), dtype.startswith(("int", "uint"))
        found = split.unique("label") if strings or ints else split[:5]["label"]  # (mixed JSON values: no unique)
        if None in found or not (strings or ints):
            raise ValueError(
                f"{at}: column 'label' must hold integer class ids 0..N-1 or class names in every row, but has {dtype} "
                f"values (e.g. {found[:5]}; empty cells read as missing; floats and booleans are not classes): fix it."
            )
        ids = [v for v in found if re.fullmatch(r"[+-]?\d+", v)] if strings else []  # (a CSV column of 0, 1, pos)
        if ids and len(ids) < len(found):
            words = sorted(v for v in found if v not in ids)
            raise ValueError(
                f"{at}: labels mix integer class ids {sorted(ids)[:5]} and class names {words[:5]}: write every label "
                "alike, as ids 0..N-1 or as names."
            )
        # a validation file's label the training data lacks: a class without examples (a typo?); held out: one file;
        # integer ids: unless data.num_labels says how many classes there are
        alone = name != "train" and not where[name].startswith(where["train"])  # (ids beside names: named below)
        alone = alone and {isinstance(v, str) for v in trained} <= {strings}
        known = (names or trained) if strings else None if names or data.num_labels else trained
        known = known if alone or strings and names else None
        if known and (unknown := sorted(v for v in found if v not in known)):
            fix, of = "fix them, or name every class in data.label_names", f"the classes of {where['train']}"
            if data.label_names and strings:
                fix, of = "add them", f"data.label_names={list(data.label_names)}"
            elif not strings:
                fix = f"fix them, or set data.num_labels (the number of classes) if {where['train']} lacks examples"
            raise UnknownLabels(f"{at}: labels {unknown[:5]} are not in {of}: {fix}.", where[name], unknown)
        trained = trained or set(found)  # (the train split comes first)
        if bad := [] if strings else sorted(v for v in found if v < 0 or top is not None and v >= top):
            by = f"data.num_labels={top}" if data.num_labels else f"data.label_names names {top} classes"
            by = by if data.num_labels or data.label_names else f"{where['train']} has {top} classes"
            fix = f"Set data.num_labels to the number of classes ({max(found) + 1} for these labels)"
            fix += f"{' and name each in data.label_names' if names else ''} or fix the labels."
            if bad[0] < 0:  # a negative id is no class, whatever the number of classes: the labels must change
                fix = "Rewrite them as 0..N-1 or as class names (-1 marks unlabelled rows, as in GLUE's test split)."
            message = f"{at}: labels {bad[:10]} are outside {f'0..{top - 1} ({by})' if top else '>= 0'}. {fix}"
            raise UnknownLabels(message, where[name], bad)
        values.update(found)
    if len(kinds := {isinstance(v, str) for v in values}) > 1:
        seen = ", ".join(f"{k}: {v}" for k, v in where.items())
        raise ValueError(f"Labels are class names in one split and integer ids in another ({seen}): write them alike.")
    # the classes: the data's ClassLabel, else data.label_names, else the names found sorted (as run_glue), else ids
    names = names or (sorted(values) if True in kinds else None)
    for name, split in out.items():  # a ClassLabel split numbered as the classes are, by name
        if isinstance(feature := split.features["label"], ClassLabel) and names and list(feature.names) != names:
            if missing := sorted(set(feature.names) - set(names)):
                message = f"{name} split ({where[name]}): classes {missing} are not among the classes {names}."
                raise UnknownLabels(message, where[name], missing)
            ids = [names.index(n) for n in feature.names]
            relabel = lambda batch, ids: {"label": [ids[y] if y >= 0 else y for y in batch["label"]]}  # (-1: none)
            features = datasets.Features({**split.features, "label": ClassLabel(names=names)})
            out[name] = split.map(relabel, batched=True, features=features, fn_kwargs={"ids": ids})
    count = len(names) if names else top or max(values, default=0) + 1
    if data.num_labels is not None and data.num_labels != count:  # set where it need not be, it must agree
        raise ValueError(f"data.num_labels={data.num_labels} but there are {count} classes: drop it (or set it so).")
    classes = ClassLabel(names=names) if names else ClassLabel(num_classes=count)
    return DatasetDict(
        {
            k: v if isinstance(v.features["label"], ClassLabel) else v.cast_column("label", classes)
            for k, v in out.items()
        }
    )


def label_names(ds) -> list[str] | None:
    """The class names of a classification split (None: integer labels without names), for id2label."""
    names = getattr(ds.features["label"], "names", None)  # a ClassLabel's
    return None if names is None or names == [str(i) for i in range(len(names))] else list(names)


def _rows_per(size: int, paths: list[str]) -> int:
    """Rows of _text_rows in `size` bytes of the files' text, at their average row size (a pass over the bytes)."""
    total = lines = 0
    for path in paths:
        with _open_data(path) as f:
            while chunk := f.read(1 << 20):
                total, lines = total + len(chunk), lines + chunk.count(b"\n")
    return max(1, round(size * (lines + 1 + total // ROW_CHARS) / max(total, 1)))


def _text_rows(paths: tuple[str, ...], codec: str, limit: int, sha256: str):
    """Rows "text" of text files as datasets' text builder reads them (universal newlines, each line with its \n),
    a line longer than `limit` characters cut as split_text cuts it, read `limit` characters at a time: memory
    follows `limit`, not the longest line (sha256: the files' digests, part of the cache key)."""
    for path in paths:
        with io.TextIOWrapper(_open_data(path), encoding=codec) as f:  # (newline=None: \r\n and \r read as \n)
            held = ""
            while chunk := f.read(limit):
                *lines, held = (held + chunk).split("\n")
                for line in lines:
                    yield from ({"text": piece} for piece in split_text(line + "\n", limit))
                if len(held) > limit:  # a long line: its pieces as they come (each depends on its own window only)
                    *pieces, held = split_text(held, limit)
                    yield from ({"text": piece} for piece in pieces)
            if held:
                yield from ({"text": piece} for piece in split_text(held, limit))


def _file_lines(path: str, codec: str, column: str, sha256: str):
    """Rows {column: line} split only at \\n, unlike datasets' text builder (sha256: part of its cache key)."""
    with io.TextIOWrapper(_open_data(path), encoding=codec, newline="\n") as f:
        for line in f:
            yield {column: line.removesuffix("\n").removesuffix("\r")}


def _read_lines(key: str, data: DataSection) -> Dataset:
    """data.{key}'s one text file (not a folder or glob) as one row per line, in column source or target."""
    what = f"data.{key}"
    if len(files := data_files(getattr(data, key), what)) != 1:
        raise FileNotFoundError(f"{what}: give one text file (one sentence a line), got {files}.")
    if _first_line(path := files[0], rb"\S") is None:
        raise empty_file_error(what, path)
    encoding, codec = _decoding(data)
    kwargs = {"path": path, "codec": codec, "column": key[-6:], "sha256": file_digest(Path(path))}
    try:  # (the column source or target, of strings)
        return Dataset.from_generator(_file_lines, gen_kwargs=kwargs)
    except Exception as err:
        raise _read_error(err, what, files, "text", encoding) from None


@caching
def load_translation(data: DataSection | Mapping) -> DatasetDict:
    """Sentence pairs, columns source and target: of aligned line files, or of any data load_splits reads."""
    data = data_source(data)
    given = [k for k in LINE_KEYS if getattr(data, k) is not None]
    columns = [k for k in ("train_file", "dataset") if getattr(data, k) is not None]
    columns += ["validation_file"] * (data.validation_file is not None and data.validation_source is not None)
    if given and (columns or data.train_source is None):  # one of the two would never be read (no silent hold-out)
        raise UsageError(
            f"data.{', data.'.join(given + columns)}: give the pairs one way, as aligned line files (data.train_source,"
            " train_target, validation_source, ...) or as files of source and target columns (data.train_file, ...)."
        )
    for key in given:  # one side of a pair alone
        if getattr(data, other := key[:-6] + ("target" if key.endswith("source") else "source")) is None:
            raise UsageError(f"data.{key} is set without data.{other}: give both files of the pairs, line by line.")
    splits: dict = {}
    if data.train_source is None:  # (held out already, if need be)
        splits, where, _ = load_splits(data, default_format="json")
    elif spec := data.validation_file:  # pairs of columns beside line files
        loaded, _ = _load(spec, "data.validation_file", data, "json", False)
        splits, where = {"validation": loaded[validation_split_of(loaded)]}, {"validation": spec}
    for name, split in splits.items():  # the Hub's sets (wmt16, opus_books) nest a pair: {"translation": {..}}
        if isinstance(split.features.get("translation"), (dict, datasets.Translation)):
            flat = split.flatten()
            splits[name] = flat.rename_columns({c: c[12:] for c in flat.column_names if c[:12] == "translation."})
    pairs = {"source": ("source", "de"), "target": ("target", "en")}  # de / en: Multi30k's columns
    out = dict(_named_columns(splits, where, data, pairs)) if splits else {}
    if splits:  # the columns read as source and target: said, never silent (de -> en by default; en -> de is asked for)
        names = splits[next(iter(splits))].column_names
        picked = [_column(names, getattr(data, f"{k}_column"), v, f"{k}_column", "") for k, v in pairs.items()]
        both = data.source_column is not None and data.target_column is not None
        how = "" if both else "; the other way: set data.source_column and data.target_column"
        said = f"{picked[0]} -> {picked[1]}", f"data.source_column={picked[0]}, data.target_column={picked[1]}{how}"
    for split in ("train", "validation", "test"):
        if (src := getattr(data, f"{split}_source")) is not None:
            a, b = _read_lines(f"{split}_source", data), _read_lines(f"{split}_target", data)
            if len(a) != len(b):  # never a silent shift of the pairs
                raise ValueError(
                    f"{src} has {len(a)} lines but {getattr(data, f'{split}_target')} has {len(b)}: parallel files "
                    "must align line by line (one sentence a line, the same count in both)."
                )
            out[split] = datasets.concatenate_datasets([a, b], axis=1)
    if "validation" not in out:  # as for any other data: data.val_fraction of the training pairs
        held_out(out, {"train": data.train_source}, data)
    if data.train_source is not None:  # line files: the language of each from its name (train.de.gz: de)
        sides = [_language(data.train_source), _language(str(data.train_target))]
        said = " -> ".join(sides), f"data.train_source={data.train_source}, data.train_target={data.train_target}"
    pairs_of = DatasetDict(out)
    pairs_of.direction = said[0]  # (the model card states it)
    logging.getLogger("hf_ot").warning(f"translating {said[0]} ({said[1]})")
    return pairs_of


def _language(path: str) -> str:
    """A line file's language where its name ends with one (train.de.gz: de; a .txt is none), else its name."""
    name = Path(path).name
    found = re.search(r"\.([A-Za-z]{2,3}(?:[-_][A-Za-z]{2,4})?)(?:\.(?:gz|bz2|xz|zst|lz4))?$", name)
    return found.group(1) if found and found.group(1).lower() not in ("txt", "tsv", "csv") else name
