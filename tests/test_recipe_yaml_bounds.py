"""Loading a recipe is bounded: aliases (a "billion laughs") are refused at once with a clear error (timed in CPU
time: wall time varies with the machine's load); a --set value of a text key is its text (a ' #' is no comment)."""

import time

import pytest
from helpers import raises_naming

from hf_ot.errors import UsageError
from hf_ot.recipes.config import load_config, parse_override, read_yaml

LAUGHS = "a: &a ['lol','lol','lol','lol','lol','lol','lol','lol','lol']\n" + "".join(
    f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n" for p, c in zip("abcdefgh", "bcdefghi")
)


def test_a_recipe_with_aliases_is_refused_fast(tmp_path):
    path = tmp_path / "laughs.yaml"
    path.write_text("data:\n  extra:\n" + "".join("    " + line + "\n" for line in LAUGHS.splitlines()))
    assert len(path.read_bytes()) < 1000
    start = time.process_time()
    with pytest.raises(UsageError, match="aliases"):
        read_yaml(path)
    assert time.process_time() - start < 1.0
    with pytest.raises(UsageError, match="aliases"):
        parse_override("evaluation.metrics", "[&x 1, *x]")


def test_a_set_value_keeps_its_hash():
    assert parse_override("output_dir", "runs/exp #3") == "runs/exp #3"
    assert parse_override("output_dir", "'quoted #kept'") == "quoted #kept"
    assert parse_override("training.learning_rate", "3e-4") == 3e-4
    assert parse_override("data.label_names", "[1, 2]") == [1, 2]
    assert load_config("quickstart", ["output_dir=runs/exp #3"]).output_dir == "runs/exp #3"


@pytest.mark.parametrize(
    "text,match",
    [
        ("card:\n  dataset_name: " + "[" * 5000 + "]" * 5000 + "\n", "nested more than"),
        ("card:\n  dataset_name: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n", "nested more than"),
        ("training:\n  learning_rate: 1e-3\n  max_steps: 5\n  learning_rate: 1e-4\n", "'learning_rate' is given twice"),
        ("training: {max_steps: 3}\ncard: {}\ntraining: {learning_rate: 1e-4}\n", "'training' is given twice"),
    ],
    ids=["deep-list", "deep-mapping", "duplicate-key", "duplicate-section"],
)
def test_deep_nesting_and_duplicate_keys_are_refused_naming_the_line(tmp_path, text, match):
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    start = time.process_time()
    with pytest.raises(UsageError, match=match) as caught:
        read_yaml(path)
    assert time.process_time() - start < 1.0 and "line" in str(caught.value)


def test_a_recipe_that_is_not_a_yaml_text_file_is_named(tmp_path):
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("card:\n  dataset_name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(UsageError, match="not UTF-8 text.*save it as UTF-8"):
        load_config(str(latin1))
    huge = tmp_path / "huge.yaml"
    with open(huge, "w") as f:
        f.write("card:\n  dataset_name: " + "x" * (2 << 20) + "\n")
    start = time.process_time()
    with pytest.raises(UsageError, match="larger than 1 MB"):
        load_config(str(huge))
    assert time.process_time() - start < 1.0
    with pytest.raises(UsageError, match="is a folder"):
        load_config(str(tmp_path))


def test_text_keys_keep_what_yaml_11_would_read_as_numbers_or_dates():
    # YAML 1.1 reads these as an octal 8, the sexagesimal 90 (1:30) and a date; a text key means the text
    for text in ("010", "1:30", "2024-01-01", "1:30.5", "no", "#1 data"):
        assert parse_override("card.dataset_name", text) == text
    for text, value in (("8", 8), ("-3", -3), ("1_000", 1000)):
        assert parse_override("training.max_steps", text) == value
    for text, value in (("3e-4", 3e-4), ("1.5", 1.5), (".5", 0.5), ("-inf", float("-inf")), ("2", 2.0)):
        assert parse_override("training.learning_rate", text) == value
    assert parse_override("card.dataset_name", "~") is None and parse_override("card.dataset_name", "null") is None


def test_a_yaml_tag_does_not_change_a_value_s_type(tmp_path):
    # scalars are text whatever their tag: the key's type reads them (a tag that does not fit is refused by it)
    (tmp_path / "r.yaml").write_text("task: causal-lm\ntraining: {max_steps: !!str 5}\ncard: {license: !!int 5}\n")
    cfg = load_config(str(tmp_path / "r.yaml"))
    assert cfg.training["max_steps"] == 5 and cfg.card.license == "5"
    with raises_naming(UsageError, "training.max_steps", "int", "'!!int abc'"):
        load_config("quickstart", ["training.max_steps=!!int abc"])


def test_an_unhashable_key_and_an_empty_recipe_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="Cannot parse"):
        parse_override("model.ot", "{[1, 2]: 3}")
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    with pytest.raises(UsageError, match="is empty"):
        load_config(str(tmp_path / "empty.yaml"))


def test_text_that_yaml_reads_as_a_mapping_is_refused_with_the_quoting_hint(tmp_path):
    # on the command line a text key takes the text as given; in a file YAML has read a mapping already
    assert load_config("quickstart", ["card.dataset_name=Note: x"]).card.dataset_name == "Note: x"
    assert load_config("quickstart", ['card.dataset_name="Note: x"']).card.dataset_name == "Note: x"
    (tmp_path / "r.yaml").write_text("task: causal-lm\ncard:\n  dataset_name:\n    Note: x\n")
    with raises_naming(UsageError, "card.dataset_name", "str", "{'Note': 'x'}", "quotes"):
        load_config(str(tmp_path / "r.yaml"))


def test_a_scratch_model_larger_than_memory_is_refused_when_read():
    """model.scratch.vocab_size=1e11 was accepted, to fail allocating 400 GB once the data was read."""
    with raises_naming(UsageError, "model.scratch", "GiB", "memory"):
        load_config("quickstart", ["model.scratch.vocab_size=100000000000"])
    load_config("quickstart", ["model.scratch.vocab_size=5000"])  # a small one is not
