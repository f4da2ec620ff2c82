"""Data for the recipes: local files (through `datasets`), hub datasets when online, and the embedded default text.

Every loader checks its input before any training starts and names the problem and the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

from datasets import Dataset, DatasetDict, load_dataset

def resolve_path(path: str) -> str:
    """Paths in recipe configs are relative to the repository root (where ../shared/data lives)."""
    p = Path(os.path.expanduser(path))
    if not p.is_absolute():
        p = Path(__file__).resolve().parents[1] / p
    return str(p)


def _require_file(path: str, what: str) -> str:
    full = resolve_path(path)
    if not Path(full).is_file():
        raise FileNotFoundError(
            f"{what}: file {path!r} not found (looked at {full}). Fix the path in the recipe config, or pass a hub "
            "dataset name when online."
        )
    return full


def _require_columns(ds: Dataset, columns: list[str], where: str) -> None:
    missing = [c for c in columns if c not in ds.column_names]
    if missing:
        raise ValueError(
            f"{where}: column(s) {missing} not found; the data has {ds.column_names}. Set the column names in the "
            "recipe config (data.text_column / data.label_column / data.source_column / data.target_column)."
        )


def embedded_text() -> str:
    """The Python reference manual's topics, shipped with CPython as pydoc_data.topics (~465k characters)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


def load_text(data: dict) -> tuple[str, str]:
    """(train text, validation text) for causal LM. Sources: 'embedded', a local text file, or a hub dataset."""
    source = data.get("source", "embedded")
    val_fraction = float(data.get("val_fraction", 0.1))
    if source == "embedded":
        text = embedded_text()
    elif source == "file":
        full = _require_file(data["train_file"], "data.train_file")
        text = load_dataset("text", data_files=full, sample_by="document")["train"][0]["text"]
    elif source == "hub":
        ds = load_dataset(data["dataset"], data.get("dataset_config"), split=data.get("split", "train"))
        column = data.get("text_column", "text")
        _require_columns(ds, [column], f"hub dataset {data['dataset']}")
        text = "\n".join(ds[column])
    else:
        raise ValueError(f"data.source must be 'embedded', 'file' or 'hub', got {source!r}.")
    if len(text) < 1000:
        raise ValueError(f"The training text has only {len(text)} characters: too little to train a language model.")
    cut = int(len(text) * (1 - val_fraction))  # nanoGPT's shakespeare_char split: first 90% train, last 10% val
    return text[:cut], text[cut:]


def load_classification(data: dict) -> DatasetDict:
    """Sentence classification (SST-2 style) from local TSV/CSV files or a hub dataset."""
    text_col, label_col = data.get("text_column", "sentence"), data.get("label_column", "label")
    if data.get("source", "file") == "hub":
        ds = load_dataset(data["dataset"], data.get("dataset_config"))
        splits = {"train": ds[data.get("train_split", "train")], "validation": ds[data.get("validation_split",
                                                                                            "validation")]}
    else:
        files = {"train": _require_file(data["train_file"], "data.train_file"),
                 "validation": _require_file(data["validation_file"], "data.validation_file")}
        delimiter = "\t" if files["train"].endswith(".tsv") else ","
        ds = load_dataset("csv", data_files=files, delimiter=delimiter)
        splits = {"train": ds["train"], "validation": ds["validation"]}
    for name, split in splits.items():
        _require_columns(split, [text_col, label_col], f"{name} split")
    renames = {old: new for old, new in ((text_col, "text"), (label_col, "label")) if old != new}
    out = DatasetDict(splits)
    return out.rename_columns(renames) if renames else out


def _read_parallel(src: str, tgt: str) -> Dataset:
    src_path = _require_file(src, "data source file")
    tgt_path = _require_file(tgt, "data target file")
    a = load_dataset("text", data_files=src_path, split="train")["text"]
    b = load_dataset("text", data_files=tgt_path, split="train")["text"]
    if len(a) != len(b):
        raise ValueError(f"{src} has {len(a)} lines but {tgt} has {len(b)}: parallel files must align line by line.")
    return Dataset.from_dict({"source": a, "target": b})


def load_translation(data: dict) -> DatasetDict:
    """Parallel text (Multi30k style: one sentence a line, aligned) from local files or a hub dataset."""
    if data.get("source", "file") == "hub":
        ds = load_dataset(data["dataset"], data.get("dataset_config"))
        src_col, tgt_col = data.get("source_column", "de"), data.get("target_column", "en")
        out = {}
        for split in ("train", "validation", "test"):
            name = data.get(f"{split}_split", split)
            if name in ds:
                _require_columns(ds[name], [src_col, tgt_col], f"hub dataset {data['dataset']}[{name}]")
                out[split] = ds[name].select_columns([src_col, tgt_col]).rename_columns(
                    {src_col: "source", tgt_col: "target"})
        return DatasetDict(out)
    out = {}
    for split in ("train", "validation", "test"):
        if f"{split}_source" in data:
            out[split] = _read_parallel(data[f"{split}_source"], data[f"{split}_target"])
    if "train" not in out or "validation" not in out:
        raise ValueError("data needs train_source/train_target and validation_source/validation_target files.")
    return DatasetDict(out)
