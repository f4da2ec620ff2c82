"""Loading a recipe is bounded: aliases (a "billion laughs") are refused at once with a clear error; a --set value
keeps a ' #' in it (not read as a YAML comment)."""

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
    start = time.perf_counter()
    with pytest.raises(UsageError, match="aliases"):
        read_yaml(path)
    assert time.perf_counter() - start < 1.0
    with pytest.raises(UsageError, match="aliases"):
        parse_value("[&x 1, *x]")


def test_a_set_value_keeps_its_hash():
    assert parse_value("runs/exp #3") == "runs/exp #3"
    assert parse_value("'quoted #kept'") == "quoted #kept"
    assert parse_value("3e-4") == 3e-4 and parse_value("[1, 2]") == [1, 2]
    assert load_config("quickstart", ["output_dir=runs/exp #3"]).output_dir == "runs/exp #3"
