"""Loading a recipe is bounded: aliases (a "billion laughs") are refused at once with a clear error (timed in CPU
time: wall time varies with the machine's load); a --set value keeps a ' #' in it (not read as a YAML comment)."""

import time

import pytest

from hf_ot.errors import UsageError
from hf_ot.recipes.config import load_config, parse_value, read_yaml

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
        parse_value("[&x 1, *x]")


def test_a_set_value_keeps_its_hash():
    assert parse_value("runs/exp #3") == "runs/exp #3"
    assert parse_value("'quoted #kept'") == "quoted #kept"
    assert parse_value("3e-4") == 3e-4 and parse_value("[1, 2]") == [1, 2]
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


def test_yaml_11_only_scalars_stay_text():
    # YAML 1.1 reads these as an octal 8, the sexagesimal 90 (1:30) and a date; a recipe means the text
    assert [parse_value(t) for t in ("010", "1:30", "2024-01-01", "1:30.5")] == ["010", "1:30", "2024-01-01", "1:30.5"]
    assert [parse_value(t) for t in ("8", "-3", "0x1F", "1_000", "3e-4", "1.5", ".5", "-.inf")] == [
        *(8, -3, 31, 1000, 3e-4, 1.5, 0.5, float("-inf")),
    ]
    assert parse_value("true") is True and parse_value("no") == "no" and parse_value("~") is None
    assert parse_value("#1 data") == "#1 data"  # a value starting with '#' is not a YAML comment either


@pytest.mark.parametrize("text", ["!!float abc", "!!int abc", "!!bool maybe", "!!timestamp 2024-13-45", "!!map [1]"])
def test_a_value_that_does_not_fit_its_tag_is_a_usage_error(text):
    with pytest.raises(UsageError, match="Cannot parse"):
        parse_value(text)


def test_an_unhashable_key_and_an_empty_recipe_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="Cannot parse"):
        parse_value("{[1, 2]: 3}")
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    with pytest.raises(UsageError, match="is empty"):
        load_config(str(tmp_path / "empty.yaml"))


def test_text_that_yaml_reads_as_a_mapping_is_refused_with_the_quoting_hint():
    from hf_ot.recipes.config import load_config

    with pytest.raises(UsageError, match=r"card.dataset_name.*must be str.*\{'Note': 'x'\}.*put text in quotes"):
        load_config("quickstart", ["card.dataset_name=Note: x"])
    assert load_config("quickstart", ['card.dataset_name="Note: x"']).card.dataset_name == "Note: x"


def test_a_scratch_model_larger_than_memory_is_refused_when_read():
    """model.scratch.vocab_size=1e11 was accepted, to fail allocating 400 GB once the data was read."""
    with pytest.raises(UsageError, match=r"model.scratch makes a model of \d+ GiB .* more than this machine's memory"):
        load_config("quickstart", ["model.scratch.vocab_size=100000000000"])
    load_config("quickstart", ["model.scratch.vocab_size=5000"])  # a small one is not
