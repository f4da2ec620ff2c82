"""Defects a probe of the commands on a user's own data found (credentials in pickled arguments, a recipe without
model.ot, data settings out of bounds, results that name their data, ...): each test fails before its fix."""

import pickle

import pytest
from conftest import make_base, set_flags, tiny_run

from hf_ot.cli import main
from hf_ot.errors import UsageError
from hf_ot.recipes.config import load_config


def test_a_baselines_pickled_training_arguments_hold_no_token(tmp_path):
    # Trainer pickles its arguments into training_args.bin in every checkpoint; push_to_hub uploads them
    from hf_ot.recipes.run import training_arguments

    cfg = load_config("quickstart", ["model.ot=null", "training.hub_token=hf_secretSecret123"])
    args = training_arguments(cfg, str(tmp_path), is_ot=False)
    assert args.hub_token == "hf_secretSecret123"  # kept for the upload itself
    assert b"hf_secretSecret123" not in pickle.dumps(args)


def test_a_short_stream_names_the_rows_held_out_for_validation(tmp_path, capsys):
    # a stream without a validation file holds out its first data.validation_rows (1000) rows: a 200-line file
    # leaves no training text, which the error blamed on the block size and the text's length alone
    notes = tmp_path / "notes.txt"
    notes.write_text("\n".join(f"Note {i}: the shared field moves every token a little further." for i in range(200)))
    flags = set_flags(tiny_run(f"data.train_file={notes}", "data.streaming=true"))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) == 1
    assert "data.validation_rows" in capsys.readouterr().err


def test_evaluations_missing_validation_file_is_named_by_its_key(tmp_path, monkeypatch):
    from hf_ot.recipes.evaluate import classification_eval_set

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,pos\na dull film,neg\n" * 5)
    cfg = load_config("sst2_minilm", ["data.train_file=reviews.csv", "data.validation_file=missing.csv"])
    with pytest.raises(Exception, match=r"^data\.validation_file: file 'missing\.csv' not found"):
        classification_eval_set(cfg, tokenizer=None, label_names=["neg", "pos"])


def test_a_resume_does_not_compare_credentials(tmp_path):
    # a token is no training setting (tokens are rotated; the record holds it as <redacted>): a resume without it
    # was refused, and one with the literal "<redacted>" a printed hint showed was accepted as the token
    from hf_ot.recipes.resume import check_resume_settings, write_run_record

    then = {"training": {"seed": 1, "hub_token": "<redacted>"}}
    write_run_record(tmp_path / "trainer", tmp_path / "run", then, {}, None)
    checkpoint = tmp_path / "trainer" / "checkpoint-2"
    for now in ({"seed": 1}, {"seed": 1, "hub_token": "hf_aNewTokenAfterRotation"}):
        check_resume_settings(checkpoint, {"training": now}, {})
    with pytest.raises(Exception, match="training.seed"):  # (the other settings are compared still)
        check_resume_settings(checkpoint, {"training": {"seed": 2}}, {})


def test_a_recipe_without_model_ot_is_not_silently_a_baseline(tmp_path):
    # a user's own YAML naming model.base but no model.ot trained a plain transformers model, with no card and
    # nothing printed to say it was no OT model; only an explicit `ot: null` is documented as a baseline
    recipe = tmp_path / "my.yaml"
    recipe.write_text("task: text-classification\nmodel:\n  base: minilm\ndata:\n  train_file: reviews.csv\n")
    try:
        cfg = load_config(str(recipe))
    except Exception as err:  # refused, naming the key: as good as OT's defaults
        assert "model.ot" in str(err)
    else:
        assert cfg.is_ot
    assert not load_config(str(recipe), ["model.ot=null"]).is_ot


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


def test_training_arguments_errors_name_the_recipe_key_not_a_flag(tmp_path, capsys):
    # TrainingArguments' own errors name its command-line flags (--logging_steps), which hf-ot train does not have
    flags = set_flags(["training.logging_steps=0"])
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) == 2
    err = capsys.readouterr().err
    assert "training.logging_steps" in err and "--logging_steps" not in err


def test_labels_minus_one_and_one_get_a_hint_that_fixes_them(tmp_path):
    # the hint was data.num_labels=2, which leaves the -1 outside 0..1
    from hf_ot.recipes import data

    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,1\na dull film,-1\n" * 5)
    with pytest.raises(ValueError) as caught:
        data.load_classification({"train_file": str(tmp_path / "reviews.csv")})
    message = str(caught.value)
    assert "0..N-1" in message and "class names" in message and "GLUE" in message
    assert "data.num_labels" not in message


# ------------------------------------------------------------------- probe 6: a new user's data, files and recipes

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


def test_a_token_of_the_wrong_type_is_refused_without_its_value():
    # `--set training.hub_token=[hf_...]` (or a YAML mapping): "must be str, got ['hf_...'] (list)" put the token
    # on stderr, which the README says no token ever reaches
    with pytest.raises(Exception, match="training.hub_token") as err:
        load_config("quickstart", ["training.hub_token=[hf_secretSecret123]"])
    assert "hf_secretSecret123" not in str(err.value)


@pytest.mark.parametrize("setting", ["model.scratch.n_layer=0", "model.scratch.n_head=0", "model.scratch.n_embd=0"])
def test_scratch_sizes_that_make_no_model_are_refused_before_the_data(tmp_path, capsys, monkeypatch, setting):
    # n_layer=0: "n_layer=0: ... give n_layer >= 1" (exit 1) once the text was tokenized; n_head=0 and n_embd=0: a
    # ZeroDivisionError traceback from transformers (n_embd=15 with n_head=2 is refused early, naming the key)
    from hf_ot.recipes import data

    monkeypatch.setattr(data, "_embedded_rows", lambda *a, **k: pytest.fail("data prepared"))
    flags = set_flags(tiny_run(setting))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) == 2
    assert setting.partition("=")[0] in capsys.readouterr().err


def test_a_scratch_vocabulary_smaller_than_the_tokenizers_is_named(tmp_path, capsys):
    # the char tokenizer of the quickstart text has ~70 ids; vocab_size=5 trained until the embedding's
    # "IndexError: index out of range in self" traceback, the key nowhere
    flags = set_flags(tiny_run("model.scratch.vocab_size=5", "training.save_strategy=no", max_steps=1))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) in (1, 2)
    err = capsys.readouterr().err
    assert "model.scratch.vocab_size" in err and "IndexError" not in err


def test_a_resume_past_max_steps_says_so(tmp_path, capsys, caplog):
    # interrupted at checkpoint-1800 of max_steps=3000, a resume given max_steps=3 (a copy of the run's first flags)
    # exited 0 with "result written": no step trained, train_loss 0.0 logged, the model saved as if finished
    out = str(tmp_path / "run")
    assert main(["train", "quickstart", "--output-dir", out, *set_flags(tiny_run(max_steps=4))]) == 0
    capsys.readouterr()
    main(["train", "quickstart", "--output-dir", out, "--resume", *set_flags(tiny_run(max_steps=2))])
    assert "training.max_steps" in capsys.readouterr().err + caplog.text  # refused, or at least a warning


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


@pytest.mark.parametrize(
    "settings",
    [
        {"label_names": ["neg", "pos"], "num_labels": 3},  # trained a 2-class head, data.num_labels unused
        {"label_names": ["neg", "pos", "neg"]},  # datasets' "Some label names are duplicated", no key named
        {"num_labels": 3},  # class names found: neg, pos; data.num_labels unused
    ],
    ids=["names-and-num_labels-disagree", "duplicate-names", "num_labels-and-the-labels-disagree"],
)
def test_contradictory_class_settings_are_refused_naming_the_key(tmp_path, settings):
    from hf_ot.recipes import data as data_lib

    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,pos\na dull film,neg\n" * 10)
    with pytest.raises(Exception, match=r"data\.(label_names|num_labels)"):
        data_lib.load_classification({"train_file": str(tmp_path / "reviews.csv"), **settings})


@pytest.mark.parametrize("config", ["sst2_minilm", "translation_t5"])
def test_evaluating_with_a_recipe_of_another_task_is_a_usage_error(tmp_path, capsys, monkeypatch, config):
    # a causal LM evaluated with --config sst2_minilm loaded as a GPT-2 classifier and ended in "IndexError: index
    # out of range in self"; with translation_t5: "Unrecognized configuration class ... for AutoModelForSeq2SeqLM"
    # and a list of ~100 config classes. The folder's config says its task: the error can name both
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,pos\na dull film,neg\n" * 10)
    (tmp_path / "pairs.jsonl").write_text('{"source": "ein Hund", "target": "a dog"}\n' * 20)
    flags = set_flags(tiny_run("training.save_strategy=no", max_steps=1))
    assert main(["train", "quickstart", "--output-dir", "run", *flags]) == 0
    capsys.readouterr()
    data = "reviews.csv" if config == "sst2_minilm" else "pairs.jsonl"
    assert main(["evaluate", "run/model", "--config", config, "--set", f"data.train_file={data}"]) == 2
    assert "causal-lm" in capsys.readouterr().err


def test_check_of_an_ot_folder_in_residual_mode_asks_for_its_base(tmp_path, capsys):
    # a paper-mode folder is refused ("Give the base checkpoint a model was converted from"); a residual one (what
    # `hf-ot train sst2_minilm` saves, M=2) was loaded as the base, converted again and compared at M'=1 with
    # itself at M=2: "m1_equals_base": false, exit 1, as if the conversion were broken
    from conftest import make_base

    import hf_ot

    make_base("bert", "BertModel").save_pretrained(tmp_path / "base")
    hf_ot.save_model(hf_ot.convert(str(tmp_path / "base"), num_steps=2), str(tmp_path / "ot"))
    assert main(["check", str(tmp_path / "ot")]) == 2
    assert "base" in capsys.readouterr().err


def test_the_recipe_keys_help_shows_percent_signs_once():
    # TrainingArguments' help texts are written for argparse's %-formatting ("~20%% slower"); `hf-ot train CONFIG
    # --help` prints them as they are: "at the cost of ~20%% slower training", "by ~20%% and ... by ~60%%"
    from hf_ot.recipes.config import config_help

    text = config_help(load_config("quickstart"))
    assert "~20% slower" in text and "%%" not in text


def test_the_recipe_keys_help_gives_no_default_none_for_a_key_whose_reader_applies_one():
    # `hf-ot train sst2_minilm --help` listed "data.max_length (int, default None)" over "... (default 64)", and
    # "data.streaming (bool, default None)" over "(default false)": None is a key not set, whose reader applies the
    # default its help names
    from hf_ot.recipes.config import config_help

    lines = config_help(load_config("sst2_minilm")).splitlines()
    header = {line.split()[0]: line for line in lines if line.startswith("  ") and not line.startswith("      ")}
    assert "default None" not in "\n".join(header.values())
    at = lines.index(header["data.max_length"])
    assert lines[at].startswith("  data.max_length (int)") and "(default 64)" in lines[at + 1]
    assert "unset by default" in header["data.max_train_samples"]  # (no limit: all the examples)
    assert "default 0.2" in header["training.eval_steps"]  # a real default is shown as it is


def test_evaluations_label_names_cannot_reorder_the_models_classes(tmp_path, monkeypatch):
    # `hf-ot evaluate runs/reviews/model --set data.label_names=[pos,neg]` of a model whose id2label is {0: neg,
    # 1: pos}: the labels were numbered pos=0, neg=1 and compared with the model's ids (accuracy inverted), no word
    from transformers import AutoTokenizer

    from hf_ot.conversion_check import default_base
    from hf_ot.recipes.evaluate import classification_eval_set

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,pos\na dull film,neg\n" * 5)
    overrides = ["data.train_file=reviews.csv", "data.validation_file=reviews.csv", "data.label_names=[pos, neg]"]
    cfg = load_config("sst2_minilm", overrides)
    tokenizer = AutoTokenizer.from_pretrained(default_base())
    try:
        _, _, labels = classification_eval_set(cfg, tokenizer, label_names=["neg", "pos"])
    except Exception as err:  # refused, naming the disagreement: as good
        assert "data.label_names" in str(err)
    else:
        assert labels == [1, 0] * 5  # the model's ids: pos is its class 1


def test_a_sweep_over_a_token_key_writes_no_token(tmp_path, capsys):
    # `hf-ot sweep quickstart --param training.hub_token --values hf_...` named each run folder
    # hub_token=hf_..._seed1 and listed the values in sweep.json and on stdout; the folder name reached
    # every checkpoint's training_args.bin (its output_dir). Refusing the sweep is as good
    out = tmp_path / "sweep"
    flags = set_flags(tiny_run("training.save_strategy=no", max_steps=1))
    main(
        [
            "sweep",
            "quickstart",
            "--param",
            "training.hub_token",
            "--values",
            "hf_secretSecret123",
            "--out",
            str(out),
            *flags,
        ]
    )
    assert "hf_secretSecret123" not in capsys.readouterr().out
    written = list(out.rglob("*")) if out.exists() else []
    assert not [
        p
        for p in written
        if "hf_secretSecret123" in str(p) or (p.is_file() and b"hf_secretSecret123" in p.read_bytes())
    ]


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


@pytest.mark.parametrize(
    "recipe, setting",
    [
        ("sst2_minilm", "data.streaming=true"),  # a classifier read its CSV into Arrow as ever
        ("sst2_minilm", "data.block_size=32"),  # causal-lm only
        ("quickstart", "data.label_names=[neg, pos]"),  # classification only
        ("quickstart", "evaluation.num_beams=4"),  # translation only: a causal LM is scored teacher-forced
    ],
)
def test_a_key_of_another_task_is_refused_or_warned_about(recipe, setting, caplog, recwarn):
    # as model.ot.decoder_num_steps on a one-stack model is refused ("apply to encoder-decoder families only")
    key = setting.partition("=")[0]
    try:
        load_config(recipe, [setting])
    except Exception as err:
        assert key in str(err)
    else:
        assert key in caplog.text + " ".join(str(w.message) for w in recwarn)


# ------------------------------------------------------ probe 7: siblings (evaluation's data, recipe keys, models)


@pytest.mark.parametrize("label, wrong_fix", [("pos", "add them"), ("2", "data.num_labels")])
def test_evaluations_unknown_class_names_the_validation_file_and_the_models_classes(
    tmp_path, monkeypatch, label, wrong_fix
):
    # `hf-ot evaluate runs/reviews/model --config sst2_minilm --set data.validation_file=one.csv` of a model whose
    # classes are bad/good, one.csv labelled pos: "train split (one.csv): labels ['pos'] are not in
    # data.label_names=['bad', 'good'] (or the model's): add them." The file is the validation file, and adding
    # pos to data.label_names is then refused ("disagrees with the model's classes"): the model has no class pos.
    # Likewise a label 2: "Set data.num_labels to the number of classes (3 ...) and name each in data.label_names"
    from hf_ot.recipes.evaluate import classification_eval_set

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,good\na dull film,bad\n" * 5)
    (tmp_path / "one.csv").write_text(f"text,label\nonly one row,{label}\n")
    cfg = load_config("sst2_minilm", ["data.train_file=reviews.csv", "data.validation_file=one.csv"])
    with pytest.raises(Exception, match="one.csv") as err:
        classification_eval_set(cfg, tokenizer=None, label_names=["bad", "good"])
    message = str(err.value)
    assert "train split" not in message and wrong_fix not in message


@pytest.mark.parametrize(
    "key, meant",
    [
        ("training.batch_size", "per_device_train_batch_size"),  # was: evaluation.batch_size (no training effect)
        ("card.dataset", "datasets|dataset_name"),  # was: data.dataset (the data read, a Hub id)
    ],
)
def test_an_unknown_keys_hint_is_the_near_key_of_its_own_section(key, meant):
    # the same name in another section wins over a near miss in the section given: the hint sends the user to a key
    # that does something else
    with pytest.raises(UsageError, match=rf"Did you mean '(training\.|card\.)?({meant})'"):
        load_config("quickstart", [f"{key}=8"])


def test_a_recipe_with_both_a_base_and_a_scratch_model_says_which_it_builds(caplog, recwarn):
    # a recipe (or `--set model.scratch=...` on sst2_minilm) giving both trained the converted base, model.scratch
    # unused without a word ("model.base ... or model.scratch", recipes/README.md)
    try:
        load_config("sst2_minilm", ["model.scratch={family: gpt2, n_layer: 1}"])
    except Exception as err:
        assert "model.scratch" in str(err) and "model.base" in str(err)
    else:
        assert "model.scratch" in caplog.text + " ".join(str(w.message) for w in recwarn)


def test_an_adapter_on_a_base_calibrated_since_is_warned_about(tmp_path):
    # an adapter trained on a folder at M=2, then `hf-ot calibrate FOLDER --write` (ot_num_steps 1 stored in its
    # config): AutoPeftModelForCausalLM loads the base at M'=1 under the adapter, without the warning a replaced
    # base gets (calibrate keeps the manifest's save id, and the record compares the save id alone)
    from helpers import TABLE, fake, tiny_lm
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from hf_ot.adapters import load_adapter, save_adapter
    from hf_ot.calibration import calibrate, write_calibration

    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    save_adapter(get_peft_model(AutoModelForCausalLM.from_pretrained(folder), LoraConfig(r=2)), tmp_path / "lora")
    write_calibration(folder, calibrate(model, [{}], evaluate=fake(TABLE)))
    with pytest.warns(UserWarning) as caught:
        reloaded = load_adapter(str(tmp_path / "lora"))
    assert reloaded.get_base_model().config.ot_num_steps == 1  # (the calibrated setting is what runs)
    assert any(str(folder.resolve()) in str(w.message) for w in caught)


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


@pytest.mark.parametrize(
    "setting",
    [
        "training.adam_beta1=2",  # torch's "Invalid beta parameter at index 0: 2" (exit 1), once the data was read
        "training.weight_decay=.nan",  # trained: "Training diverged at step 2: the loss is nan" (the learning rate?)
    ],
)
def test_optimizer_settings_out_of_bounds_are_refused_before_the_data(tmp_path, capsys, monkeypatch, setting):
    # as training.learning_rate=-1 is (test_clear_errors_iii)
    from hf_ot.recipes import data

    monkeypatch.setattr(data, "_embedded_rows", lambda *a, **k: pytest.fail("data prepared"))
    flags = set_flags(tiny_run(setting, "training.save_strategy=no"))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) == 2
    assert setting.partition("=")[0] in capsys.readouterr().err


def test_a_bad_max_new_tokens_shows_the_value_given():
    # "Config key 'evaluation.max_new_tokens' must be int >= 1, got <hidden>.": credentials are hidden by the
    # "token" in the key's name, which a number of tokens also has
    with pytest.raises(UsageError, match="evaluation.max_new_tokens") as err:
        load_config("translation_t5", ["evaluation.max_new_tokens=-5"])
    assert "-5" in str(err.value)


def test_the_card_names_validation_line_files_as_it_names_a_validation_file():
    # translation_t5 with data.validation_source/target (the user's own validation pairs): the model-index's metrics
    # (split: validation) were said to be on 'train.de.gz, train.en.gz', the recipe's training files, and the files
    # they were computed on were named nowhere; data.validation_file is named (sst2_minilm: 'train.tsv, mine.tsv')
    from hf_ot.recipes.run import card_data

    cfg = load_config("translation_t5", ["data.validation_source=val.de", "data.validation_target=val.en"])
    name = card_data(cfg)["name"]
    assert "val.de" in name and "val.en" in name, name


# ------------------------------------------- probe 8: run folders, data and evaluation after the day's refactors
@pytest.mark.parametrize("name", ["sweep.json", "curves.png"])
def test_a_summary_file_that_is_a_dangling_link_is_refused(tmp_path, name):
    # `hf-ot sweep --out s1` with s1/sweep.json -> ../elsewhere/mine.json (not there yet): rc 0, and the sweep's
    # summary was written to elsewhere/mine.json through the user's link; a link to a file is refused
    from hf_ot.recipes.sweep import SWEEP_FILES
    from hf_ot.run_folders import check_outputs_replaceable

    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / name).symlink_to(tmp_path / "elsewhere" / "mine")
    with pytest.raises(UsageError, match=name):
        check_outputs_replaceable(tmp_path / "s1", SWEEP_FILES)


@pytest.mark.parametrize("name", ["results.json", "log_history.json"])
def test_a_run_folders_dangling_link_is_not_replaced(tmp_path, name):
    # `hf-ot train --output-dir t3` with t3/results.json -> ../elsewhere/res.json: rc 0, the user's link replaced by
    # the run's file; a dangling training_curves.png is refused ("holds files a recipe did not write")
    from hf_ot.run_folders import check_run_folder

    out = tmp_path / "t3"
    out.mkdir()
    (out / name).symlink_to(tmp_path / "elsewhere" / "mine")
    with pytest.raises(UsageError, match=name):
        check_run_folder(out, out / "trainer", overwrite=True, resume=None)


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


def test_a_glob_set_on_the_command_line_is_a_path():
    # README: "Give a recipe your files with --set data.train_file=...; ... a glob of them": `--set
    # data.train_file=*.csv` was "Cannot parse '*.csv' as a value: while scanning an alias ... expected alphabetic
    # or numeric character, but found '.'" (mine/*.csv is read)
    try:
        cfg = load_config("sst2_minilm", ["data.train_file=*.csv"])
    except UsageError as err:
        assert "quot" in str(err), str(err)  # the fix: --set 'data.train_file="*.csv"'
    else:
        assert cfg.data.train_file == "*.csv"


@pytest.mark.parametrize(
    "flags,hint",
    [
        (["--output_dir", "x"], "--output-dir"),  # TrainingArguments' flag, as run_clm.py and the Trainer docs spell it
        (["--max_steps", "3"], "--set training.max_steps=3"),  # a TrainingArguments field: a recipe key here
    ],
)
def test_transformers_spelling_of_a_flag_is_answered_with_hf_ots(capsys, flags, hint):
    # "hf-ot train: error: unrecognized arguments: --output_dir x" and no more, where `hf-ot sweep --output-dir`
    # is told "hf-ot sweep takes --out"
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "quickstart", *flags])
    error = capsys.readouterr().err.strip().splitlines()[-1]  # (the usage above it lists --output-dir)
    assert exit_info.value.code == 2 and hint in error, error


def test_a_source_line_file_without_its_target_is_a_usage_error(tmp_path, monkeypatch):
    # `--set data.train_source=a.de` alone: "data.train_target: give one text file (one sentence a line), got None
    # ([])", a missing-file error (exit 1) for a key not set, where line files without data.train_source are
    # refused as a usage error (exit 2) naming the keys
    from hf_ot.recipes import data as data_lib

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.de").write_text("".join(f"Hallo {i}\n" for i in range(10)))
    cfg = load_config("translation_t5", ["data.train_source=a.de"])
    with pytest.raises(UsageError, match="data.train_target"):
        data_lib.load_translation(cfg.data)


@pytest.mark.slow
def test_a_sweep_into_a_folder_another_run_holds_is_refused(tmp_path, capsys):
    # `hf-ot sweep ... --out r1` while another hf-ot process held r1's lock (`hf-ot train` refuses: "is in use by
    # another hf-ot run (pid ...)"): rc 0, its sweep.json, .hf_ot_outputs.json and run folder written beside the
    # other run's files (two sweeps into one --out write the same sweep.json)
    from conftest import held_by_another_process

    out = tmp_path / "r1"
    with held_by_another_process(out) as pid:
        flags = set_flags(tiny_run("training.save_strategy=no", max_steps=1))
        code = main(["sweep", "quickstart", "--param", "model.ot.lambda", "--values", "0", "--out", str(out), *flags])
        assert code == 2 and not (out / "sweep.json").exists()
        assert str(pid) in capsys.readouterr().err


def test_evaluations_file_without_labels_is_not_called_the_train_split(tmp_path, monkeypatch):
    # `hf-ot evaluate MODEL --config sst2_minilm --set data.validation_file=ev.csv`, ev.csv without a label column:
    # "train split (ev.csv): column(s) ['label'] not found" (probe 7 fixed the same words for an unknown class)
    from hf_ot.recipes.evaluate import classification_eval_set

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,good\na dull film,bad\n" * 5)
    (tmp_path / "ev.csv").write_text("text\nnice\nawful\n")
    cfg = load_config("sst2_minilm", ["data.train_file=reviews.csv", "data.validation_file=ev.csv"])
    with pytest.raises(Exception, match="ev.csv") as err:
        classification_eval_set(cfg, tokenizer=None, label_names=["bad", "good"])
    assert "train split" not in str(err.value), str(err.value)


def test_evaluations_validation_folder_of_test_files_is_read_or_named(tmp_path, monkeypatch):
    # `hf-ot evaluate ... --set data.validation_file=evd`, evd/test.csv: "evd has no split 'train' (it has
    # ['test']): set data.train_split." (data.train_split names the training data's split; with
    # data.validation_split=test as well: the same error); training: KeyError 'train' (the test above)
    from hf_ot.recipes.evaluate import classification_eval_set

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,good\na dull film,bad\n" * 5)
    (tmp_path / "evd").mkdir()
    (tmp_path / "evd" / "test.csv").write_text("text,label\nnice,good\nawful,bad\n")
    cfg = load_config("sst2_minilm", ["data.train_file=reviews.csv", "data.validation_file=evd"])
    tokenizer = lambda texts, **kw: {"input_ids": [[1]] * len(texts), "special_tokens_mask": [[0]] * len(texts)}  # noqa: E731
    try:
        *_, labels = classification_eval_set(cfg, tokenizer, label_names=["bad", "good"])
    except Exception as err:
        assert "evd" in str(err) and "data.train_split" not in str(err), str(err)
    else:
        assert labels == [1, 0]


# ------------------------------------------------------------------- probe 9: today's cuts, as a new user meets them


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


@pytest.mark.parametrize(
    "setting, text", [("card.dataset_name=&Co reviews", "&Co reviews"), ("data.train_file=&x", "&x")]
)
def test_an_anchor_in_a_set_value_is_kept_or_refused(setting, text):
    # `--set card.dataset_name=&Co reviews` named the data 'reviews' on the card; `--set data.train_file=&x` set the
    # key to null (the recipe's data) without a word: `&Co` is read as a YAML anchor. An alias (*x) is refused, with
    # the hint to quote a value that starts with * & @ `
    key = setting.partition("=")[0]
    try:
        cfg = load_config("quickstart", [setting])
    except UsageError as err:
        assert key in str(err) or "quot" in str(err), str(err)
    else:
        section, name = key.split(".")
        assert getattr(getattr(cfg, section), name) == text


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


def test_a_resume_accepts_a_setting_given_at_the_value_the_run_used(tmp_path, capsys):
    # `hf-ot train quickstart ... --resume --set training.seed=1337` (the default `hf-ot train quickstart --help`
    # shows, the seed the run trained with): "was trained with other settings or data than this run's:
    # training.seed: '<unset>' then, 1337 now" (exit 2); nothing had changed
    from hf_ot.recipes.config import TRAINING_DEFAULTS

    assert TRAINING_DEFAULTS["seed"] == 1337 and "seed" not in load_config("quickstart").training  # the run's seed
    out = str(tmp_path / "run")
    assert main(["train", "quickstart", "--output-dir", out, *set_flags(tiny_run(max_steps=2))]) == 0
    flags = set_flags(tiny_run("training.seed=1337", max_steps=3))
    assert main(["train", "quickstart", "--output-dir", out, "--resume", *flags]) == 0, (
        capsys.readouterr().err.splitlines()[-1:]
    )


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


def test_a_text_metric_asked_of_a_classifier_is_refused_or_warned_about(caplog, recwarn):
    # `hf-ot evaluate runs/reviews/model --config sst2_minilm --set evaluation.metrics=[bleu]` (and `hf-ot train`):
    # exit 0, no BLEU in the result and nothing said, where a misspelt name is refused and evaluation.num_beams on a
    # causal LM is (test_a_key_of_another_task_is_refused_or_warned_about)
    from hf_ot.recipes.evaluate import text_metric_names

    try:
        text_metric_names(load_config("sst2_minilm", ["evaluation.metrics=[bleu]"]))
    except Exception as err:
        assert "evaluation.metrics" in str(err), str(err)
    else:
        assert "evaluation.metrics" in caplog.text + " ".join(str(w.message) for w in recwarn)


def test_calibrating_a_model_whose_metric_is_nan_says_so():
    # `hf-ot calibrate MODEL --config quickstart` of a model whose weights hold NaN (a diverged or damaged save):
    # "hf-ot calibrate: error: min() arg is an empty sequence" (exit 1), where `hf-ot evaluate` of it reports its
    # loss as null; no setting is within a tolerance of NaN, and the error can say the metric is not a number
    from helpers import tiny_lm

    from hf_ot.calibration import calibrate

    model, _ = tiny_lm()
    with pytest.raises(Exception) as caught:
        calibrate(model, [{}], evaluate=lambda model, batches, metric: (float("nan"), 0.1))
    assert "nan" in str(caught.value).lower() and "empty sequence" not in str(caught.value), str(caught.value)


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


def test_evaluations_saved_dataset_is_scored_by_the_models_class_names(tmp_path, monkeypatch):
    # `hf-ot evaluate runs/reviews/model --config sst2_minilm --set data.validation_file=saved` of a model whose
    # id2label is {0: neg, 1: pos}, `saved` a save_to_disk folder with label ClassLabel(names=[pos, neg]): its ids
    # (pos=0) were compared with the model's (0 is neg): every row scored against the other class, no word
    from datasets import ClassLabel, Dataset, Features, Value

    from hf_ot.recipes.evaluate import classification_eval_set

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews.csv").write_text("text,label\n" + "a good film,pos\na dull film,neg\n" * 5)
    features = Features(text=Value("string"), label=ClassLabel(names=["pos", "neg"]))
    rows = {"text": ["a good film", "a dull film"] * 3, "label": [0, 1] * 3}  # pos, neg, ...
    Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "saved"))
    cfg = load_config("sst2_minilm", ["data.train_file=reviews.csv", "data.validation_file=saved"])
    tokenizer = lambda texts, **kw: {"input_ids": [[1]] * len(texts), "special_tokens_mask": [[0]] * len(texts)}  # noqa: E731
    try:
        *_, labels = classification_eval_set(cfg, tokenizer, label_names=["neg", "pos"])
    except Exception as err:  # refused, naming the two orders: as good
        assert "saved" in str(err), str(err)
    else:
        assert labels == [1, 0] * 3  # the model's ids: pos is its class 1


# ------------------------------------------- probe 10a: own data, several processes, run folders (as a new user)


@pytest.mark.parametrize(
    "command",
    [
        ["train", "quickstart", "--output-dir", "{file}"],  # "[Errno 17] File exists: '.../notes.txt'" (exit 1)
        ["train", "quickstart", "--output-dir", "{file}/run"],  # "[Errno 20] Not a directory" (exit 1)
        ["train", "quickstart", "--set", "training.output_dir={file}"],
        ["robustness", "--models", "a=m", "--config", "quickstart", "--out", "{file}"],
        ["evaluate", "m", "--config", "quickstart", "--result-file", "{file}/result.json"],  # after the evaluation
        ["convert", "m", "{file}/ot"],
    ],
    ids=["train-out", "train-out-under-file", "trainer-dir", "robustness-out", "result-file-under-file", "convert"],
)
def test_an_output_path_on_a_file_is_a_usage_error_before_anything_runs(tmp_path, capsys, monkeypatch, command):
    # `hf-ot train quickstart --output-dir notes.txt` (a file): "error: [Errno 17] File exists", exit 1; `hf-ot
    # evaluate MODEL --result-file notes.txt/r.json` evaluated the model, then failed the same way
    from hf_ot.recipes import data, evaluate

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(data, "text_splits", lambda *a, **k: pytest.fail("data read"))
    monkeypatch.setattr(evaluate, "evaluate_folder", lambda *a, **k: pytest.fail("evaluated"))
    monkeypatch.setattr(evaluate, "robustness", lambda *a, **k: pytest.fail("evaluated"), raising=False)
    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")  # (a model folder stands in)
    assert main([c.format(file="notes.txt") for c in command]) == 2
    assert "notes.txt" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "my notes\n"


@pytest.mark.parametrize("command", ["evaluate", "calibrate", "robustness", "check", "convert", "train", "tokenizer"])
@pytest.mark.parametrize("name", ["notes.txt", "model/config.json"])
def test_a_file_given_as_the_model_folder_is_named_as_a_file(tmp_path, capsys, monkeypatch, command, name):
    # `hf-ot evaluate runs/x/model/config.json --config quickstart`: "Repo id must be in the form 'repo_name' or
    # 'namespace/repo_name'" (exit 1); `hf-ot evaluate notes.txt ...`: "It looks like the config file at 'notes.txt'
    # is not a valid JSON file" (exit 1); `hf-ot train sst2_minilm --set model.base=notes.txt` (or tokenizer=) alike
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    quick = ["--config", "quickstart"]
    argv = {
        "robustness": ["robustness", "--models", f"a={name}", *quick],
        "check": ["check", name],
        "convert": ["convert", name, "out"],
        "train": ["train", "sst2_minilm", "--set", f"model.base={name}", "--output-dir", "run"],
        "tokenizer": ["train", "sst2_minilm", "--set", f"tokenizer={name}", "--output-dir", "run"],
    }.get(command, [command, name, *quick])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert name in err and "folder" in err, err


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
    with pytest.raises(ValueError, match=r"a\.en is not valid utf-16 text .*data\.encoding=utf-16 reads every"):
        data_lib.load_translation(pairs)


@pytest.mark.parametrize("family, head", [("bert", "Bert"), ("llama", "Llama")])  # (Llama's: transformers' generic)
@pytest.mark.parametrize("ot", [True, False], ids=["ot", "plain-baseline"])
def test_a_classifiers_training_loss_is_the_mean_under_gradient_accumulation(tmp_path, ot, family, head):
    # `hf-ot train sst2_minilm --set training.gradient_accumulation_steps=2` logged a loss of 1.382 where one step of
    # the same batch logged 0.6885, and stepped with twice the gradient: BERT's classifier accepts **kwargs, so
    # Trainer takes its loss (a plain mean) as normalised by num_items_in_batch. Under torchrun with N processes it
    # likewise multiplied train and eval losses by N (eval_loss 1.385 on 2 processes, 0.69 on one)
    from datasets import Dataset
    from helpers import Logs, args

    from hf_ot import convert
    from hf_ot.training import GuardedTrainer, OTTrainer

    torch = pytest.importorskip("torch")
    model = make_base(family, f"{head}ForSequenceClassification")
    model = convert(model, num_steps=2, reg_lambda=0.0) if ot else model
    g = torch.Generator().manual_seed(0)
    rows = {"input_ids": torch.randint(4, 99, (8, 6), generator=g).tolist(), "labels": [0, 1, 1, 0, 1, 1, 0, 1]}
    with torch.no_grad():  # the reference: the mean cross-entropy of the 8 rows
        reference = model(input_ids=torch.tensor(rows["input_ids"]), labels=torch.tensor(rows["labels"])).loss.item()
    logs = Logs()
    settings = dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=1, learning_rate=0.0)
    trainer = (OTTrainer if ot else GuardedTrainer)(
        model=model, args=args(tmp_path, **settings), train_dataset=Dataset.from_dict(rows), callbacks=[logs]
    )
    trainer.train()
    step = next(log for log in logs.logs if "loss" in log and "train_runtime" not in log)
    assert step["loss"] == pytest.approx(reference, rel=1e-4)


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


@pytest.mark.parametrize(
    "setting, fix",
    [
        ("evaluation.metrics=bleu", "evaluation.metrics=[bleu]"),
        ("data.label_names=neg,pos", "data.label_names=[neg, pos]"),
    ],
)
def test_a_list_key_given_a_plain_value_shows_the_list_to_write(setting, fix):
    # `hf-ot train quickstart --set evaluation.metrics=bleu` (as transformers' --report_to wandb takes one name):
    # "Config key 'evaluation.metrics' must be list, got 'bleu' (str)." and no word of how a list is written
    with pytest.raises(UsageError) as caught:
        load_config("quickstart", [setting])
    assert fix in str(caught.value), str(caught.value)


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


_EVAL_SCRIPT = """
import json, os, sys, torch
sys.path.insert(0, {tests!r})
from conftest import make_base
from datasets import Dataset
from hf_ot import convert
from hf_ot.training import OTTrainer, OTTrainingArguments
model = convert(make_base("bert", "BertForSequenceClassification"), num_steps=2, reg_lambda=0.1)
with torch.no_grad():
    model.classifier.bias.copy_(torch.tensor([0.0, 5.0]))  # rows of class 0 cost much more than the others
ids = torch.randint(4, 99, (7, 6), generator=torch.Generator().manual_seed(0)).tolist()
rows = Dataset.from_dict({{"input_ids": ids, "labels": [0, 1, 1, 1, 1, 1, 1]}})
args = OTTrainingArguments(output_dir=sys.argv[1], report_to="none", use_cpu=True, per_device_eval_batch_size=4)
metrics = OTTrainer(model=model, args=args, eval_dataset=rows).evaluate()
if int(os.environ.get("RANK", "0")) == 0:
    open(os.path.join(sys.argv[1], "metrics.json"), "w").write(json.dumps(metrics))
"""


def test_eval_task_loss_on_two_processes_is_the_one_process_value(tmp_path):
    # `torchrun --nproc_per_node=2 -m hf_ot.cli train ...` with 7 validation rows: accelerate pads the last batch of
    # the second process with a copy of row 0 (even batches), and OTTrainer's eval_task_loss and eval_reg (and
    # eval_perplexity = exp(eval_task_loss)) weigh that copy as a row of the data: 8 rows, not 7
    import json
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "evaluate.py"
    script.write_text(_EVAL_SCRIPT.format(tests=str(Path(__file__).parent)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "RANK", "WORLD_SIZE", "LOCAL_"))}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1]), env.get("PYTHONPATH", "")])  # this hf_ot
    results = {}
    for n in (1, 2):
        (out := tmp_path / str(n)).mkdir()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torchrun = str(Path(sys.executable).parent / "torchrun")
        command = [torchrun, "--nproc_per_node", str(n), "--master_port", str(port), str(script), str(out)]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[n] = json.loads((out / "metrics.json").read_text())
    for key in ("eval_task_loss", "eval_reg"):
        assert results[2][key] == pytest.approx(results[1][key], rel=1e-4), key


# ------------------------------------------------------------ probe 11b: the documentation, claim by claim (a new user)
# README: "`--json`: only that JSON on stdout". `hf-ot train translation_t5 --json` (a BPE tokenizer trained on the
# data) printed three empty lines before the JSON: the Rust trainer writes its progress to the process's stdout,
# past the CLI's redirect of Python's stdout to stderr.
def test_training_a_bpe_tokenizer_under_json_writes_nothing_on_stdout(capfd):
    import contextlib
    import sys

    from hf_ot.recipes.tokenizer import build_subword_tokenizer

    with contextlib.redirect_stdout(sys.stderr):  # what --json does
        tok = build_subword_tokenizer(["a dog runs", "ein Hund läuft"] * 20, vocab_size=300)
    assert tok.convert_ids_to_tokens(0) == "<pad>"
    assert capfd.readouterr().out == ""


# docs/results/studies.md "`python -m experiments.studies report --from docs/studies.json --out runs/studies ...`"
# redraws the studies' tables and figures. It failed with "AttributeError: 'NoneType' object has no attribute 'name'"
# (the noise figures' paths were plot_xy's return value, None), after rewriting docs/studies.json with this machine's
# versions in place of those of the machine that measured the runs.
def test_studies_report_from_the_docs_json_redraws_and_keeps_the_measuring_machine(tmp_path):
    import json
    from pathlib import Path

    from experiments.studies.__main__ import main as studies

    source = Path(__file__).parents[1] / "docs" / "studies.json"
    (docs := tmp_path / "docs").mkdir()
    assert studies(["report", "--from", str(source), "--out", str(tmp_path / "out"), "--docs", str(docs)]) == 0
    assert json.loads((docs / "studies.json").read_text()) == json.loads(source.read_text())
    assert {"study_sst2_noise.png", "study_matched_noise.png"} <= {p.name for p in (docs / "figures").iterdir()}


# ---------------------------------------- probe 11a: evaluation, calibration and publishing commands (as a new user)


def _long_source_translation_folder(tmp_path):
    """A plain BART of 16 positions saved with the MiniLM tokenizer, and pairs whose sources are ~40 tokens."""
    import json

    from transformers import AutoTokenizer, BartConfig, BartForConditionalGeneration

    from hf_ot.conversion_check import default_base

    tokenizer = AutoTokenizer.from_pretrained(default_base())
    ids = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id)
    ids.update(eos_token_id=tokenizer.sep_token_id, decoder_start_token_id=tokenizer.cls_token_id)
    config = BartConfig(
        vocab_size=tokenizer.vocab_size, d_model=8, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=8,
        decoder_ffn_dim=8, encoder_attention_heads=2, decoder_attention_heads=2, max_position_embeddings=16,
        forced_eos_token_id=None, **ids,
    )  # fmt: skip
    BartForConditionalGeneration(config).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    rows = [{"source": "ein Hund " * 40 + str(i), "target": f"a dog {i}"} for i in range(6)]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "model", [
        f"data.validation_file={tmp_path / 'pairs.jsonl'}",
        f"data.train_file={tmp_path / 'pairs.jsonl'}",
        "data.max_length=8",
        "evaluation.generate_samples=2",
        "evaluation.max_new_tokens=2",
        "evaluation.metrics=[bleu]",
    ]


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
def test_a_saved_tokenizer_without_pad_token_is_named_before_evaluating(tmp_path, command):
    # hf-ot evaluate / calibrate of a translation folder whose tokenizer has no pad token: the data was read and the
    # generation started, then tokenizers' "Asking to pad but the tokenizer does not have a padding token" (naming
    # neither the folder nor the fix); training refuses such a tokenizer before it starts (check_tokenizer_pads)
    from transformers import AutoTokenizer

    from hf_ot.recipes import evaluate

    folder, overrides = _long_source_translation_folder(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.pad_token = None
    tokenizer.save_pretrained(folder)
    run = evaluate.evaluate_folder if command == "evaluate" else evaluate.calibrate_folder
    if command == "calibrate":  # (an OT model: calibrate refuses a plain one first)
        import hf_ot

        hf_ot.save_model(hf_ot.convert(str(folder)), tmp_path / "ot", tokenizer=tokenizer)
        folder = tmp_path / "ot"
    with pytest.raises(ValueError, match=f"tokenizer in {folder} has no pad token"):
        run(str(folder), "translation_bart", overrides)


def test_a_classifiers_tolerance_in_points_is_refused(tmp_path):
    # hf-ot calibrate runs/sst/model --config sst2_minilm --tolerance 1 (meaning 1 point; the help says a fraction):
    # every setting is then "within tolerance" of the trained accuracy (a fraction in [0, 1]), so M'=1 was chosen and
    # --write stored it, whatever the model's accuracy there. Refused before any model is loaded, naming the fraction.
    from hf_ot.recipes.evaluate import calibrate_folder

    with pytest.raises(UsageError, match=r"fraction.*0\.01"):
        calibrate_folder(str(tmp_path / "model"), "sst2_minilm", tolerance=1.0)
    from helpers import tiny_lm

    from hf_ot.calibration import calibrate  # the library function refuses it too

    with pytest.raises(UsageError, match="fraction"):
        calibrate(tiny_lm()[0], [{}], metric="accuracy", tolerance=2)


def test_convert_reports_the_settings_it_saved(tmp_path, capsys):
    # hf-ot convert llama llama_ot --num-steps 2 --json: "ot_settings": {"already_ot": false}, the settings the folder
    # was saved with (M, T, lambda, solver, mode) nowhere in the result; they are its config's
    import json

    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(tmp_path / "base")
    assert main(["convert", str(tmp_path / "base"), str(tmp_path / "ot"), "--ot-num-steps", "2", "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["ot_settings"]
    saved = json.loads((tmp_path / "ot" / "config.json").read_text())
    assert settings["already_ot"] is False
    for key in ("ot_num_steps", "ot_terminal_time", "ot_lambda", "ot_solver", "ot_mode"):
        assert settings[key] == saved[key], key
    assert settings["ot_num_steps"] == 2


LANGUAGES = {"translation_t5": ["de", "en"], "translation_bart": ["de", "en"], "sst2_minilm": "en"}
LANGUAGES.update(sst2_minilm_elastic="en", quickstart="en", causal_lm_shakespeare_char="en")


@pytest.mark.parametrize("recipe", sorted(LANGUAGES))
def test_packaged_recipes_cards_name_their_languages(recipe):
    # hf-ot train translation_t5, then hf-ot push RUN/model user/repo --dry-run: the card's metadata had no
    # `language` (the Hub's language filter and a translation model's de -> en); a user's own data drops the
    # recipe's languages with its dataset fields (card.language names the new data's)
    assert load_config(recipe).card.language == LANGUAGES[recipe]
    assert load_config(recipe, ["data.train_file=mine.csv"]).card.language is None
    assert load_config(recipe, ["data.train_file=mine.csv", "card.language=fr"]).card.language == "fr"


def test_a_sweeps_refusal_of_earlier_runs_names_its_own_flags(tmp_path):
    # hf-ot sweep quickstart --param model.ot.lambda --values 0 1 --out sw, run twice: "sw/lambda=0_seed1 already holds
    # a model (ot_gpt2). Choose another output_dir, pass --overwrite to replace it, or --resume to continue from its
    # last checkpoint." sweep (and paper) have --out and --overwrite, no --resume and no output_dir
    import json

    from hf_ot.recipes.sweep import sweep

    (tmp_path / "sw" / "ot_lambda=0_seed1").mkdir(parents=True)
    (tmp_path / "sw" / "ot_lambda=0_seed1" / "results.json").write_text(json.dumps({"hf_ot_result": 1}))
    with pytest.raises(UsageError, match="already holds") as err:
        sweep("quickstart", "model.ot.ot_lambda", [0], out_dir=str(tmp_path / "sw"), check_only=True)
    assert "--resume" not in str(err.value) and "--out" in str(err.value) and "--overwrite" in str(err.value)


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
            evaluate.evaluate_folder(str(tmp_path / "model"), "sst2_minilm", num_steps=2)
        else:
            evaluate.calibrate_folder(str(tmp_path / "model"), "sst2_minilm")


# ------------------------------------------------------- probe 12a: your own data, end to end (formats x tasks, labels)


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


@pytest.mark.parametrize("recipe", ["quickstart", "sst2_minilm"])
def test_evaluations_json_names_only_the_validation_file_it_read(tmp_path, recipe):
    # hf-ot evaluate runs/notes/model --config quickstart --set data.validation_file=other_notes.txt: "data":
    # "pydoc_data.topics (CPython reference manual), other_notes.txt"; sst2_minilm alike ("train.tsv, ...") though
    # only the validation file is evaluated (the recipe's training data is not read)
    from hf_ot.cli._common import check_data_of

    cfg = load_config(recipe, [f"data.validation_file={tmp_path / 'other.txt'}"])
    assert check_data_of(str(tmp_path / "model"), cfg, ["data.validation_file=other.txt"]) == "other.txt"


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
    with pytest.raises(ValueError, match=r"v\.csv, read as data\.format=tsv.*unset data\.format"):
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


# ------------------------------------------------ probe 12b: reliability, second pass (secrets, saves, locks, adapters)


def test_the_other_token_variable_and_a_token_in_a_url_are_hidden(tmp_path, capsys, monkeypatch):
    # HUGGING_FACE_HUB_TOKEN=hf_... hf-ot train quickstart --set card.dataset_name="docs hf_..." --set
    # training.hub_model_id=https://user:hf_...@huggingface.co/me/x: both tokens on the card, in results.json,
    # hf_ot_run.json and stdout (only HF_TOKEN's value was hidden); `hf-ot evaluate https://user:hf_...@huggingface.co/m`
    # printed the token in its error; the URL's token was pickled into every checkpoint's training_args.bin
    from hf_ot.recipes.run import training_arguments
    from hf_ot.run_folders import dumps

    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_hubEnvSecret999")
    url = "https://user:hf_urlSecret12345@huggingface.co/me/x"
    text = dumps({"data": "docs hf_hubEnvSecret999", "settings": {"hub_model_id": url}})
    assert "hf_hubEnvSecret999" not in text and "hf_urlSecret12345" not in text and "huggingface.co/me/x" in text
    assert main(["evaluate", url, "--config", "quickstart"]) == 2
    assert "hf_urlSecret12345" not in capsys.readouterr().err
    args = training_arguments(load_config("quickstart", [f"training.hub_model_id={url}"]), str(tmp_path), is_ot=True)
    assert b"hf_urlSecret12345" not in pickle.dumps(args)
    # a token as `hf auth login` stores it (hf_ + 34 characters), wherever it comes from
    assert "hf_" + "aB3" * 12 not in dumps({"note": "hf_" + "aB3" * 12})


def test_a_link_to_a_model_folder_is_named_a_link(tmp_path, capsys):
    # ln -s elsewhere/ot ot; hf-ot convert BASE ot --overwrite: "ot exists and is not a folder" (it is a link to one);
    # a run folder whose model/ is a link: "model (not a folder)". Both are refused (a save replaces the folder, not
    # what a link points to); the message says what it is
    from hf_ot.run_folders import check_replaceable_model_folder, run_folder_foreign

    (tmp_path / "real").mkdir()
    (tmp_path / "ot").symlink_to(tmp_path / "real")
    with pytest.raises(UsageError, match=r"ot exists and is a link \(to .*real\)"):
        check_replaceable_model_folder(tmp_path / "ot", overwrite=True)
    (tmp_path / "ot").rename(tmp_path / "model")
    assert run_folder_foreign(tmp_path) == ["real", "model (a link)"]


def test_an_unwritable_result_file_or_write_folder_is_refused_before_the_work(tmp_path, capsys, monkeypatch):
    # in a read-only folder (a read-only mount): `hf-ot evaluate runs/q/model --config quickstart --result-file r.json`
    # evaluated, then failed with exit 1 and "[Errno 30] Read-only file system: '.../.r.json.46ab51c23e00.tmp'";
    # `hf-ot calibrate MODEL --config quickstart --write` ran the whole grid before "cannot be written", and with a
    # Hub id failed only after it. (Root writes anywhere: os.access stands in for the mount here.)
    import os

    from hf_ot.recipes import evaluate

    unwritable = tmp_path / "ro"
    real_access = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda p, m, **k: False if str(p).startswith(str(unwritable)) and m == os.W_OK else real_access(p, m, **k),
    )
    unwritable.mkdir()
    (unwritable / "model").mkdir()
    (unwritable / "model" / "config.json").write_text('{"model_type": "ot_gpt2"}')
    result = str(unwritable / "r.json")
    assert main(["evaluate", str(unwritable / "model"), "--config", "quickstart", "--result-file", result]) == 2
    assert f"{unwritable} cannot be written" in capsys.readouterr().err
    with pytest.raises(UsageError, match=f"^--write into {unwritable}/model: {unwritable}.* cannot be written"):
        evaluate.calibrate_folder(str(unwritable / "model"), "quickstart", write=True)
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text("{}")
    assert main(["convert", str(tmp_path / "base"), str(unwritable / "ot")]) == 2  # (sibling: before loading)
    assert f"OUT {unwritable}/ot: {unwritable} cannot be written" in capsys.readouterr().err
    with pytest.raises(UsageError, match="--write stores the choice in a local model folder"):
        evaluate.calibrate_folder("openai-community/gpt2", "quickstart", write=True)


def test_a_full_disk_while_writing_a_checkpoint_is_a_message_not_a_traceback(tmp_path, capsys, monkeypatch):
    # (ulimit -f 45; hf-ot train quickstart --set training.max_steps=3 ...): torch.save of the checkpoint's optimizer
    # state failed with "RuntimeError: basic_ios::clear: iostream error" and a 40-line traceback (exit 1, as a bug);
    # a full disk says so, names the checkpoint folder and that the earlier checkpoints are kept
    import torch

    def full(obj, f, *a, **k):
        raise RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 0: file write failed")

    monkeypatch.setattr(torch, "save", full)
    flags = set_flags(tiny_run("training.save_strategy=steps", "training.save_steps=1", max_steps=1))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) == 1
    err = capsys.readouterr().err
    assert "writing checkpoint-1" in err and "file write failed" in err and "Traceback" not in err


def test_a_result_file_inside_a_model_folder_is_refused(tmp_path, capsys):
    # hf-ot evaluate runs/r/model --config quickstart --result-file runs/r/model/eval.json: written there; then
    # `hf-ot train quickstart --output-dir runs/r --overwrite` refused "model/eval.json (not written by hf_ot)" and a
    # push would upload it. --out of a model folder was refused already (lock_outputs); --result-file now too
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "ot_gpt2"}')
    result = str(tmp_path / "model" / "eval.json")
    assert main(["env", "--result-file", result]) == 2
    assert "is inside a model folder" in capsys.readouterr().err and not (tmp_path / "model" / "eval.json").exists()


def test_a_usage_error_of_the_arguments_shows_no_token(capsys, monkeypatch):
    # hf-ot train quickstart --hub_token hf_... (transformers' flag): "unrecognized arguments: --hub_token hf_... (a
    # recipe key here: --set training.hub_token=hf_...)", the token twice on stderr; HF_TOKEN's value in a bad
    # argument (--steps) was printed too: argparse's errors came before anything hid secrets
    monkeypatch.setenv("HF_TOKEN", "hf_envEnvEnv77")
    with pytest.raises(SystemExit):
        main(["train", "quickstart", "--hub_token", "hf_shortSecret1"])
    err = capsys.readouterr().err
    assert "hf_shortSecret1" not in err and "--set training.hub_token=<redacted>" in err
    with pytest.raises(SystemExit):
        main(["evaluate", "m", "--config", "quickstart", "--steps", "hf_envEnvEnv77"])
    assert "hf_envEnvEnv77" not in capsys.readouterr().err


def test_an_adapter_on_a_plain_model_where_its_ot_base_was_warns(converted, tmp_path):
    # an adapter trained on an OT model saved in base/; base/ then holds a plain GPT-2 (its folder reused):
    # AutoPeftModelForCausalLM.from_pretrained(ADAPTER) loaded the adapter onto the plain model without a word (the
    # check of the base's save ran for OT models only), a model with other outputs
    import shutil

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from hf_ot.adapters import load_adapter, save_adapter
    from hf_ot.hub import save_model

    plain, model = converted("gpt2", "GPT2LMHeadModel")
    save_model(model, tmp_path / "base")
    save_adapter(
        get_peft_model(AutoModelForCausalLM.from_pretrained(tmp_path / "base"), LoraConfig(r=2)), tmp_path / "lora"
    )
    shutil.rmtree(tmp_path / "base")
    plain.save_pretrained(tmp_path / "base")
    with pytest.warns(UserWarning, match=r"trained on the OT model saved in .*base.*is not an OT model \(gpt2"):
        load_adapter(str(tmp_path / "lora"))


def test_calibrate_write_into_a_live_runs_model_is_refused_before_the_grid(tmp_path):
    # hf-ot train ... --output-dir runs/lt running; hf-ot calibrate runs/lt/model --config quickstart --write: the model
    # loaded and the whole grid ran (32 s here), then "inside ... the output folder of a live run"
    from helpers import hold_lock

    from hf_ot.recipes import evaluate

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "ot_gpt2"}')
    holder = hold_lock(tmp_path)
    try:
        with pytest.raises(UsageError, match="the output folder of a live run"):
            evaluate.calibrate_folder(str(tmp_path / "model"), "quickstart", write=True)
    finally:
        holder.kill()
        holder.wait()


def test_a_recipes_yaml_error_hides_a_token_on_its_line_and_names_a_tab(tmp_path):
    # hf-ot train mine.yaml, where mine.yaml has `hub_token: "hf_secretSecret123` (unclosed) or `hub_token: hf_...: x`:
    # PyYAML's message quotes the line, token and all. A tab indent was told "Put a value that starts with * & @ `
    # (a glob *.csv) in quotes."
    recipe = tmp_path / "mine.yaml"
    for line in ('  hub_token: "hf_secretSecret123', "  hub_token: hf_secretSecret123: x"):
        recipe.write_text(f"task: causal-lm\ntraining:\n{line}\n  max_steps: 3\n")
        with pytest.raises(UsageError) as err:
            load_config(str(recipe))
        assert "not valid YAML" in str(err.value) and "hf_secretSecret123" not in str(err.value)
    recipe.write_text("task: causal-lm\ntraining:\n\tmax_steps: 3\n")
    with pytest.raises(UsageError, match="tab") as err:
        load_config(str(recipe))
    assert "a glob" not in str(err.value)


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "{folder}", "--config", "quickstart"],  # "Unrecognized model in emptyd. Should have a
        ["convert", "{folder}", "{folder}-ot"],  # `model_type` key in its config.json." (exit 1; there is none)
        ["check", "{folder}"],  # "You need to have sentencepiece or tiktoken installed to convert a slow tokenizer"
    ],
)
def test_a_folder_without_config_json_is_named_not_a_model_folder(tmp_path, capsys, command):
    folder = tmp_path / "emptyd"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a model\n")
    assert main([arg.format(folder=folder) for arg in command]) == 2
    assert f"{folder} holds no config.json" in capsys.readouterr().err


def test_a_tolerance_that_is_no_number_is_named(capsys):
    # hf-ot calibrate MODEL --config quickstart --tolerance abc: "argument --tolerance: invalid _tolerance value: 'abc'"
    with pytest.raises(SystemExit):
        main(["calibrate", "m", "--config", "quickstart", "--tolerance", "abc"])
    assert "the tolerance must be a finite number >= 0, got 'abc'" in capsys.readouterr().err


def test_a_summary_write_cut_short_does_not_block_the_next_run(tmp_path, monkeypatch):
    # Ctrl-C (or SIGTERM, or an error) while `hf-ot robustness --out rob` drew robustness.png, after robustness.json was
    # written: the next `hf-ot robustness --out rob` refused "rob holds robustness.json, which hf-ot did not write (or
    # you changed)"; sweep.json and paper.json alike (the record of hf-ot's outputs was written last)
    from helpers import tiny_lm

    from hf_ot.recipes import evaluate

    tiny_lm(tmp_path)
    models, flags = {"a": str(tmp_path / "model")}, ["data.max_eval_blocks=1", "data.block_size=16"]

    def interrupted(*a, **k):
        raise RuntimeError("matplotlib failed")

    monkeypatch.setattr(evaluate, "plot_xy", interrupted)
    with pytest.raises(RuntimeError, match="matplotlib"):
        evaluate.robustness(models, "quickstart", [0.1], overrides=flags, out_dir=str(tmp_path / "rob"))
    assert (tmp_path / "rob" / "robustness.json").is_file()
    monkeypatch.undo()
    evaluate.robustness(models, "quickstart", [0.1], overrides=flags, out_dir=str(tmp_path / "rob"))
    assert (tmp_path / "rob" / "robustness.png").is_file()


def test_pushing_an_adapter_folder_names_peft_push(tmp_path):
    # docs/training.md: "... then `lora.push_to_hub("you/ot-quickstart-lora")` or `hf-ot push`"; `hf-ot push
    # quickstart-lora you/ot-quickstart-lora --dry-run`: "quickstart-lora has no config.json: save the model first"
    from hf_ot.errors import PushError
    from hf_ot.hub import plan_push

    (tmp_path / "lora").mkdir()
    (tmp_path / "lora" / "adapter_config.json").write_text('{"base_model_name_or_path": "you/ot-quickstart"}')
    with pytest.raises(PushError, match=r"a PEFT adapter.*push_to_hub"):
        plan_push(tmp_path / "lora", "you/ot-quickstart-lora")


def test_outputs_of_other_commands_in_a_run_folder_are_refused(tmp_path, capsys):
    # hf-ot robustness --models a=runs/r2/model --config quickstart --out runs/r2: written; then `hf-ot train quickstart
    # --output-dir runs/r2 --overwrite` refused "holds files a recipe did not write (.hf_ot_outputs.json,
    # robustness.json, robustness.png ...)"; `hf-ot evaluate ... --result-file runs/r2/results.json` replaced the run's
    # own results.json (the record of its model) with evaluate's
    from hf_ot.run_folders import lock_outputs

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "ot_gpt2"}')
    with pytest.raises(UsageError, match="is a run folder"):
        lock_outputs(tmp_path, "hf-ot robustness")
    assert main(["env", "--result-file", str(tmp_path / "results.json")]) == 2
    assert "is inside a run folder" in capsys.readouterr().err and not (tmp_path / "results.json").exists()


# -------------------------------------------------- probe 13a: your own data, third pass (formats x tasks, messages)


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
    with pytest.raises(
        ValueError, match=r"data\.block_size=128 tokens \(in .*(validation\.txt|d \(validation\))\)"
    ) as err:
        causal_lm_datasets(load_config("quickstart", keys))
    assert "val_fraction" not in str(err.value)


@pytest.mark.parametrize("task", ["classification", "translation lines", "saved dataset"])
def test_a_data_file_rewritten_with_the_same_size_and_mtime_is_read_anew(tmp_path, monkeypatch, task):
    # a file rewritten with the same size and modification time (cp -p, rsync -t, tar, a coarse clock) was read from
    # datasets' cache: its old rows, both by datasets' own CSV builder (keyed by mtime) and by the line reader
    import os

    from hf_ot import run_folders
    from hf_ot.recipes.data import load_classification, load_translation

    def write(path, text, like=None):
        path.write_text(text)
        if like is not None:  # (and a new process: hf_ot's digests of files in this one forgotten)
            os.utime(path, ns=(like.st_atime_ns, like.st_mtime_ns))
            run_folders._digest.cache_clear()
            assert path.stat().st_size == like.st_size
        return path.stat()

    if task == "classification":
        old = write(tmp_path / "r.csv", "text,label\n" + "good,pos\npoor,neg\n" * 5)
        load = lambda: load_classification({"train_file": str(tmp_path / "r.csv"), "val_fraction": 0.5})
        assert sorted(set(load()["train"]["text"])) == ["good", "poor"]
        write(tmp_path / "r.csv", "text,label\n" + "fine,pos\nugly,neg\n" * 5, old)
        assert sorted(set(load()["train"]["text"])) == ["fine", "ugly"]
    elif task == "saved dataset":  # (save_to_disk over a folder of the same size, its mtime kept: cp -rp)
        from datasets import Dataset

        arrow = tmp_path / "saved" / "data-00000-of-00001.arrow"
        Dataset.from_dict({"text": ["good", "poor"], "label": ["a", "b"]}).save_to_disk(str(tmp_path / "saved"))
        old, load = arrow.stat(), lambda: load_classification({"train_file": str(tmp_path / "saved")})
        assert sorted(t for d in load().values() for t in d["text"]) == ["good", "poor"]
        Dataset.from_dict({"text": ["fine", "ugly"], "label": ["a", "b"]}).save_to_disk(str(tmp_path / "saved"))
        os.utime(arrow, ns=(old.st_atime_ns, old.st_mtime_ns))
        assert arrow.stat().st_size == old.st_size
        assert sorted(t for d in load().values() for t in d["text"]) == ["fine", "ugly"]
    else:
        old, _ = write(tmp_path / "s.de", "eins\nzwei\n"), write(tmp_path / "s.en", "one\ntwo\n")
        spec = {"train_source": str(tmp_path / "s.de"), "train_target": str(tmp_path / "s.en"), "val_fraction": 0.5}
        assert sorted(s for d in load_translation(spec).values() for s in d["source"]) == ["eins", "zwei"]
        write(tmp_path / "s.de", "drei\nvier\n", old)
        assert sorted(s for d in load_translation(spec).values() for s in d["source"]) == ["drei", "vier"]


def test_the_card_names_line_files_before_their_validation_file(tmp_path):
    # hf-ot train translation_t5 --set data.train_source=tr.de --set data.train_target=tr.en --set
    # data.validation_file=trval.jsonl: the card and results.json named "trval.jsonl, tr.de, tr.en"
    from hf_ot.recipes.run import card_data

    keys = [f"data.train_source={tmp_path / 'tr.de'}", f"data.train_target={tmp_path / 'tr.en'}"]
    cfg = load_config("translation_t5", [*keys, f"data.validation_file={tmp_path / 'trval.jsonl'}"])
    assert card_data(cfg)["name"] == "tr.de, tr.en, trval.jsonl"


def test_evaluating_on_validation_line_files_reads_no_test_files(tmp_path):
    # hf-ot evaluate runs/lines/model --config translation_t5 --set data.validation_source=tr.de --set
    # data.validation_target=tr.en (installed, outside a checkout): "data.test_source: file '../shared/data/multi30k/
    # test_2016_flickr.de.gz' not found": the recipe's test files (kept: no training key was given) were read too
    from hf_ot.recipes.data import load_translation
    from hf_ot.recipes.evaluate import evaluation_split

    (tmp_path / "tr.de").write_text("".join(f"ein Hund {i}\n" for i in range(4)))
    (tmp_path / "tr.en").write_text("".join(f"a dog {i}\n" for i in range(4)))
    keys = [f"data.validation_source={tmp_path / 'tr.de'}", f"data.validation_target={tmp_path / 'tr.en'}"]
    missing = [f"data.test_source={tmp_path / 'gone.de'}", f"data.test_target={tmp_path / 'gone.en'}"]  # (not shipped)
    split = evaluation_split(load_translation, load_config("translation_t5", keys + missing).data)
    assert split["source"] == [f"ein Hund {i}" for i in range(4)] and split["target"][3] == "a dog 3"


def test_evaluating_on_a_short_validation_text_names_the_file(tmp_path):
    # hf-ot evaluate runs/notes/model --config quickstart --set data.validation_file=small.txt: "The validation split
    # has no complete block of data.block_size=128 tokens" named no file (and the block size is the model's)
    from hf_ot.recipes.evaluate import lm_eval_dataset
    from hf_ot.recipes.tokenizer import build_char_tokenizer

    (tmp_path / "small.txt").write_text("tiny note\n")
    cfg = load_config("quickstart", [f"data.validation_file={tmp_path / 'small.txt'}"])
    with pytest.raises(ValueError, match=r"block_size=64 tokens \(in .*small\.txt\)"):
        lm_eval_dataset(cfg, build_char_tokenizer("tiny ote\n"), block_size=64)


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
    with pytest.raises(ValueError, match=r"reviews\.xlsx.*(ZIP|workbook).*save it as CSV"):
        read.get(recipe, data_lib.load_translation)(cfg.data)


def test_a_semicolon_separated_csv_is_named_with_its_separator(tmp_path):
    # hf-ot train sst2_minilm --set data.train_file=semi.csv (Excel's CSV in many locales: text;label): "column(s)
    # ['text', 'sentence'] not found; the data has ['text;label']. Name the column ... data.text_column=NAME"
    from hf_ot.recipes.data import load_classification

    (tmp_path / "semi.csv").write_text("text;label\n" + "".join(f"film {i};{'ab'[i % 2]}\n" for i in range(10)))
    with pytest.raises(ValueError, match=r"semi\.csv.*';'.*comma") as err:
        load_classification({"train_file": str(tmp_path / "semi.csv")})
    assert "data.text_column" not in str(err.value)


def test_evaluations_json_names_only_the_validation_line_files_it_read(tmp_path):
    # hf-ot evaluate runs/lines/model --config translation_t5 --set data.validation_source=tr.de --set
    # data.validation_target=tr.en: "data": "train.de.gz, train.en.gz, tr.de, tr.en, test_2016_flickr.de.gz, ..."
    from hf_ot.cli._common import check_data_of

    keys = [f"data.validation_source={tmp_path / 'tr.de'}", f"data.validation_target={tmp_path / 'tr.en'}"]
    assert check_data_of(str(tmp_path / "model"), load_config("translation_t5", keys), keys) == "tr.de, tr.en"


# probe 13b


def test_ctrl_c_while_a_save_deletes_the_earlier_folder_leaves_nothing_beside_it(tmp_path, monkeypatch):
    # hf-ot calibrate MODEL --write, Ctrl-C just after the swap: exit 130, the calibrated model in place, and beside it
    # .MODEL.hf_ot-save.json and .MODEL.tmp-* (the earlier folder, half deleted) until the next command that writes
    import os
    import shutil
    import signal

    import hf_ot
    from hf_ot.hub import save_model
    from hf_ot.run_folders import read_manifest

    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2)
    first = read_manifest(save_model(model, tmp_path / "ot"))["save_id"]
    real_rmtree = shutil.rmtree

    def rmtree(path, *a, **k):  # Ctrl-C arrives while the earlier folder is deleted
        if ".tmp-" in str(path) and os.path.isdir(path):
            signal.raise_signal(signal.SIGINT)
        return real_rmtree(path, *a, **k)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # (a background process ignores SIGINT)
    try:
        with pytest.raises(KeyboardInterrupt):
            save_model(model, tmp_path / "ot", overwrite=True)
    finally:
        signal.signal(signal.SIGINT, handler)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["ot"]
    assert read_manifest(tmp_path / "ot")["save_id"] != first  # the new model: the swap had committed


def test_a_push_uploads_the_files_of_one_save_also_when_a_save_replaces_the_folder_meanwhile(tmp_path):
    # hf-ot push runs/r/model you/x while hf-ot calibrate runs/r/model --write (or train --overwrite) swaps the folder
    # in: the commit held some files of the earlier save and some of the new one
    import hashlib
    from pathlib import Path

    import hf_ot
    from hf_ot.hub import push_to_hub, save_model
    from hf_ot.run_folders import read_manifest

    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2)
    folder = save_model(model, tmp_path / "ot")
    saves = [read_manifest(folder)["files"]]

    def read(i, name, data):
        if i == 3:  # a save replaces the folder half way through the upload
            model.config.ot_num_steps = 3
            next(model.parameters()).data += 1
            saves.append(read_manifest(save_model(model, folder, overwrite=True))["files"])
        got[name] = hashlib.sha256(data() if callable(data) else data).hexdigest()

    class Api:
        def create_repo(self, *a, **k):
            pass

        def upload_folder(self, folder_path, allow_patterns, **k):
            for i, name in enumerate(sorted(allow_patterns)):
                read(i, name, lambda name=name: Path(folder_path, name).read_bytes())

        def create_commit(self, repo_id, operations, **k):
            for i, op in enumerate(operations):
                read(i, op.path_in_repo, lambda op=op: op.path_or_fileobj.read())

    got: dict = {}
    push_to_hub(folder, "you/x", token="hf_fake", api=Api())
    assert len(saves) == 2 and len(got) > 3
    assert any(got == {n: save[n]["sha256"] for n in got} for save in saves)


def test_calibrate_write_refuses_a_model_folder_replaced_while_its_grid_ran(tmp_path, monkeypatch):
    # hf-ot calibrate runs/r/model --write (minutes of grid) while hf-ot train ... --overwrite replaced runs/r/model:
    # the earlier model's chosen M and solver went into the new model's config.json and card
    from conftest import snapshot
    from helpers import fake, tiny_lm

    import hf_ot.calibration
    from hf_ot.hub import save_model
    from hf_ot.recipes import evaluate

    model, tok = tiny_lm(tmp_path)
    real, replaced = hf_ot.calibration.calibrate, {}

    def grid(m, batches, **k):  # another save replaces the folder while the grid runs
        replaced.update(snapshot(save_model(model, tmp_path / "model", tokenizer=tok, overwrite=True)))
        return real(m, [{}], evaluate=fake({("euler", 2): 2.0, ("euler", 1): 2.005}))

    monkeypatch.setattr(hf_ot.calibration, "calibrate", grid)
    with pytest.raises(UsageError, match="replaced"):
        evaluate.calibrate_folder(str(tmp_path / "model"), "quickstart", ["data.block_size=32"], write=True)
    assert snapshot(tmp_path / "model") == replaced


# fix 13c


def test_calibrate_write_into_a_folder_hf_ot_may_not_rewrite_is_refused_before_the_grid(tmp_path, monkeypatch):
    # hf-ot calibrate FOLDER --config quickstart --write on a folder without hf_ot_manifest.json (save_pretrained) or
    # with a config.json edited since hf_ot wrote it: the model loaded and the whole grid ran, then the refusal
    from conftest import snapshot
    from helpers import tiny_lm

    import hf_ot.calibration
    from hf_ot.hub import save_model
    from hf_ot.recipes import evaluate

    model, tok = tiny_lm(tmp_path)
    save_model(model, tmp_path / "edited", tokenizer=tok)
    config = tmp_path / "edited" / "config.json"
    config.write_text(config.read_text().replace("{", '{"edited": 1,', 1))
    model.save_pretrained(tmp_path / "plain")
    tok.save_pretrained(tmp_path / "plain")
    monkeypatch.setattr(hf_ot.calibration, "calibrate", lambda *a, **k: pytest.fail("the grid ran"))
    for folder in (tmp_path / "edited", tmp_path / "plain"):
        before = snapshot(folder)
        with pytest.raises(UsageError, match="calibrate --write never replaces a file of yours"):
            evaluate.calibrate_folder(str(folder), "quickstart", ["data.block_size=32"], write=True)
        assert snapshot(folder) == before


def test_a_base_whose_tokenizer_outgrows_its_vocabulary_is_named_with_both_sizes(tmp_path, capsys):
    # a GPT-2 of vocab_size 8 saved with a 29-token tokenizer: hf-ot check printed the embedding's IndexError
    # traceback ("index out of range in self"); evaluate / calibrate load such a folder the same way
    from transformers import GPT2Config, GPT2Model

    from hf_ot.recipes.evaluate import load_for_eval
    from hf_ot.recipes.tokenizer import build_char_tokenizer

    base, tok = tmp_path / "base", build_char_tokenizer("abcdefghijklmnopqrstuvwxyz ")
    GPT2Model(GPT2Config(vocab_size=8, n_layer=1, n_embd=16, n_head=2, n_positions=64)).save_pretrained(base)
    tok.save_pretrained(base)
    assert main(["check", str(base)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(base) in err and "resize_token_embeddings" in err
    assert f"{len(tok)} tokens" in err and "vocab_size=8" in err
    with pytest.raises(UsageError, match="vocab_size=8.*resize_token_embeddings"):
        load_for_eval(str(base))
    assert main(["convert", str(base), str(tmp_path / "ot")]) == 2  # (saved, the pair failed in evaluate)
    assert "vocab_size=8" in capsys.readouterr().err and not (tmp_path / "ot").exists()


def test_a_tokenizer_past_the_vocabulary_by_added_tokens_alone_loads_with_a_warning(tmp_path, caplog):
    # a fine-tune's tokenizer with a [PAD] added and the embedding not grown (Llama-2: 32,001 tokens, vocab 32,000):
    # text without that token works, so the folder loads, with the warning naming the token and the fix
    from hf_ot.recipes.tokenizer import build_char_tokenizer
    from hf_ot.tokenizers import load_tokenizer

    tok = build_char_tokenizer("abcdef ")
    size = len(tok)
    tok.add_special_tokens({"additional_special_tokens": ["[EXTRA]"]})
    tok.save_pretrained(tmp_path)
    with caplog.at_level("WARNING", logger="hf_ot"):
        loaded = load_tokenizer(tmp_path, vocab_size=size)
    assert len(loaded) == size + 1 and loaded("abc").input_ids == tok("abc").input_ids
    assert "[EXTRA]" in caplog.text and f"vocab_size={size}" in caplog.text and "resize_token_embeddings" in caplog.text


def test_evaluating_a_character_lm_on_characters_it_never_saw_warns_with_their_count(tmp_path, recwarn):
    # hf-ot evaluate of a char-level model on text with characters its tokenizer lacks: each became <unk> and the
    # perplexity (of <unk> predictions) looked fine
    from hf_ot.recipes.evaluate import lm_eval_dataset
    from hf_ot.recipes.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer("abc de\n")
    known, unseen = tmp_path / "known.txt", tmp_path / "unseen.txt"
    known.write_text("abc de\n" * 20)
    unseen.write_text("abc d\u00e9\n" * 10 + "xbc de\n" * 10)  # 10 times \u00e9 and 10 times x: 20 characters
    for text in (known, unseen):
        cfg = load_config("quickstart", [f"data.train_file={text}", f"data.validation_file={text}"])
        lm_eval_dataset(cfg, tok, block_size=8)
        messages = [str(w.message) for w in recwarn if "<unk>" in str(w.message)]
        assert len(messages) == (text == unseen)
    assert "20 characters" in messages[0] and "'x'" in messages[0] and "'\u00e9'" in messages[0]


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
