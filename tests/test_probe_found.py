"""Defects a probe of the commands on a user's own data found (credentials in pickled arguments, a recipe without
model.ot, data settings out of bounds, results that name their data, ...): each test fails before its fix."""

import pickle

import pytest
from conftest import set_flags, tiny_run

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
    from hf_ot.run_folders import check_resume_settings, write_run_record

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
