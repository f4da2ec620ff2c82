"""Any data a datasets user has, for every task: the formats x tasks matrix read against the rows written here; labels
inferred and saved as id2label; cards that name the data actually used; one home for lambda; `--help` listing every
recipe key; and README's "Train on your own data" commands run as written, at toy size."""

import bz2
import csv
import gzip
import json
import re
import shlex
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, set_flags
from datasets import ClassLabel, Dataset, DatasetDict

from hf_ot.cli import main
from hf_ot.errors import UsageError
from hf_ot.recipes import data as data_lib
from hf_ot.recipes.config import DataSection, load_config
from hf_ot.recipes.run import card_data

REVIEWS = [(f"review number {i} {'loved it' if i % 3 else 'hated it'}", "pos" if i % 3 else "neg") for i in range(30)]
PAIRS = [(f"ein Satz {i}", f"a sentence {i}") for i in range(30)]
DOCS = [f"Document {i}: the quick brown fox jumps over the lazy dog, again and again." for i in range(40)]


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


TABLE_FORMATS = ["csv", "tsv", "json", "jsonl", "jsonl.gz", "parquet", "folder", "glob", "saved", "format-key"]


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
    with pytest.raises(ValueError, match=r"\['text', 'sentence'\] not found; the data has \['review', 'label'\]"):
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


# ------------------------------------------------------------------------------------------------ config side


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


def test_lambda_has_one_home():
    moved = load_config("quickstart", ["training.ot_lambda=0.5", "model.ot.ot_lambda=0.5"])
    assert moved.model.ot["ot_lambda"] == 0.5 and "ot_lambda" not in moved.training
    only = load_config("sst2_minilm", ["model.ot={ot_num_steps: 2}", "training.ot_lambda=0.3"])
    assert only.model.ot == {"ot_num_steps": 2, "ot_lambda": 0.3} and "ot_lambda" not in only.training
    with pytest.raises(UsageError, match=r"training.ot_lambda=0.5 and model.ot.ot_lambda=1.0 disagree"):
        load_config("quickstart", ["training.ot_lambda=0.5"])
    # checked once, where it lives: the model config's ot_lambda
    with pytest.raises(UsageError, match=r"model.ot.ot_lambda must be a finite number from 0 to 1e\+06"):
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


# --------------------------------------------------------------------------------------------------- README


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Train on your own data\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in re.findall(r"```bash\n(.*?)```", section, re.S) for line in line.splitlines()]


TOY = {  # short settings per task; the README's commands are run as written, these appended
    "sst2_minilm": ["data.max_length=16", "training.per_device_eval_batch_size=4", "evaluation.elasticity=false"],
    "quickstart": [
        "data.block_size=16",
        "data.max_eval_blocks=4",
        "model.scratch.n_embd=16",
        "model.scratch.n_layer=1",
        "model.scratch.n_positions=16",
        "model.ot.num_steps=1",
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
    with pytest.raises(ValueError, match=r"is one JSON object \(keys \['version', 'data'\]\).*data.field=data"):
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
    with pytest.raises(FileNotFoundError, match=r"data.dataset: file './typo' not found.*--set data.dataset=PATH"):
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


FORMATS_OF_LABELS = ["csv", "jsonl", "parquet", "saved"]  # one label check, whatever reads the rows


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
    with pytest.raises(ValueError, match=r"labels mix integer class ids \['0', '1'\] and class names \['neg', 'pos'\]"):
        data_lib.load_classification({"train_file": str(path)})


def test_csv_classes_named_none_na_null_are_kept_and_rows_without_text_are_numbered(tmp_path):
    classes = ["None", "NA", "null", "n/a", "NaN"]
    rows = [{"text": f"review {i}", "label": classes[i % 5]} for i in range(15)] + [{"text": "NA", "label": "None"}]
    ds = data_lib.load_classification({"train_file": str(write_rows(tmp_path / "r.csv", "csv", rows))})
    assert sorted(data_lib.label_names(ds["train"])) == sorted(classes)
    assert len(ds["train"]) + len(ds["validation"]) == 16  # the text "NA" is a review too
    rows = [{"text": "" if i in (3, 7) else f"r {i}", "label": i % 2} for i in range(10)]
    empty = write_rows(tmp_path / "e.csv", "csv", rows)
    with pytest.raises(ValueError, match=r"2 rows without text \(empty cells\), rows \[4, 8\]"):
        data_lib.load_classification({"train_file": str(empty)})


def test_translation_run_states_its_direction_before_training_and_on_the_card(tmp_path, monkeypatch, caplog):
    """A JSON Lines file of {"en", "de"} pairs without data.source_column trains de -> en: the run says so before
    training, results.json and the model card state it."""
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "pairs.jsonl", "jsonl", [{"en": t, "de": s} for s, t in PAIRS])
    flags = set_flags(["training.max_steps=1", "training.per_device_train_batch_size=4", *TOY["translation_t5"]])
    assert main(["train", "translation_t5", "--set", "data.train_file=pairs.jsonl", "--output-dir", "run", *flags]) == 0
    assert any("translating de -> en (data.source_column=de" in r.getMessage() for r in caplog.records)
    assert json.loads((tmp_path / "run" / "results.json").read_text())["translation"] == "de -> en"
    assert "It translates **de -> en**" in (tmp_path / "run" / "model" / "README.md").read_text()
