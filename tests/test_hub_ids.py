"""Model and dataset names: local folders against Hub ids, offline and online."""

import pytest

from hf_ot.cli import main


def commands(model):
    return {
        "evaluate": ["evaluate", model, "--config", "quickstart"],
        "convert": ["convert", model, "out"],
        "check": ["check", model],
        "robustness": ["robustness", "--models", f"a={model}", "--config", "quickstart"],
    }


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    """cwd with a runs/ folder; the loading functions record their model argument instead of loading."""
    import hf_ot.recipes.evaluate

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    seen = []

    def record(first, *args, **kwargs):
        seen.append(first)
        raise OSError("reached the loader")

    monkeypatch.setattr(hf_ot.recipes.evaluate, "evaluate_folder", record)
    monkeypatch.setattr(hf_ot.recipes.evaluate, "robustness", lambda models, *a, **k: record(models))
    monkeypatch.setattr(hf_ot, "convert", record)
    return seen


def test_hub_ids_stay_hub_ids(tmp_path, monkeypatch):
    from hf_ot.run_folders import local_or_hub

    monkeypatch.chdir(tmp_path)
    for name in ("gpt2", "bert-base-uncased", "t5-small", "openai-community/gpt2", "org/name"):
        assert local_or_hub(name, "MODEL") == name


@pytest.mark.parametrize("command", ["evaluate", "convert", "check", "robustness"])
@pytest.mark.parametrize(
    "model", ["/nonexistent", "./nope", "../nope", "~/hf-ot-no-such-folder", "a/b/c", "bad name!!"]
)
def test_a_missing_local_path_says_no_local_folder(fakes, capsys, command, model):
    assert main(commands(model)[command]) == 2
    err = capsys.readouterr().err
    assert f"hf-ot {command}: error: no local folder {model!r} (" in err
    assert "Hub repo id such as 'gpt2'" in err and "huggingface.co" not in err
    assert fakes == []  # nothing loaded


@pytest.mark.parametrize("command", ["evaluate", "convert", "robustness"])
@pytest.mark.parametrize("model", ["gpt2", "org/name"])
def test_a_hub_id_still_goes_to_the_hub(fakes, capsys, command, model):
    assert main(commands(model)[command]) == 1
    assert "reached the loader" in capsys.readouterr().err
    assert fakes == [{"a": model} if command == "robustness" else model]


@pytest.mark.parametrize("command", ["evaluate", "convert", "robustness"])
def test_an_org_name_id_beside_a_local_folder_of_that_name_goes_to_the_hub_with_a_note(fakes, capsys, command):
    """runs/nonexist (a mistyped run) and Qwen/Qwen2.5-0.5B beside a local Qwen/ folder (huggingface-cli download
    --local-dir Qwen/...) look alike: the Hub is tried, and the missing local folder is named."""
    assert main(commands("runs/nonexist")[command]) == 1
    err = capsys.readouterr().err
    assert "no local folder 'runs/nonexist'" in err and "trying it as a Hub repo id" in err
    assert fakes == [{"a": "runs/nonexist"} if command == "robustness" else "runs/nonexist"]


def test_an_existing_local_folder_is_used_as_is(fakes, tmp_path):
    (tmp_path / "runs" / "model").mkdir()
    (tmp_path / "runs" / "model" / "config.json").write_text("{}")  # (a model folder stands in)
    assert main(commands("runs/model")["evaluate"]) == 1
    assert main(commands(str(tmp_path / "runs" / "model"))["convert"]) == 1
    assert fakes == ["runs/model", str(tmp_path / "runs" / "model")]
