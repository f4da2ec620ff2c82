"""Config values and CLI arguments are checked before anything runs (exit 2, a message naming the key or option):
training.* and model.scratch.* value types, model.ot values, convert / push arguments, YAML 1.2 booleans in files and
--set, and a mistyped local model folder (not a Hub lookup)."""

import enum
import typing

import pytest
import yaml

import hf_ot
from hf_ot.cli import main
from hf_ot.errors import UsageError
from hf_ot.recipes.config import _type_ok, load_config, parse_override


def train(tmp_path, *overrides, config="quickstart"):
    return main(["train", config, "--output-dir", str(tmp_path / "run"), *sum((["--set", o] for o in overrides), [])])


# ------------------------------------------------------------------ training.* and model.scratch.* value types


@pytest.mark.parametrize(
    "override,message",
    [
        ("training.learning_rate=abc", "Config key 'training.learning_rate' must be float, got 'abc' (str)."),
        ("training.max_steps=abc", "Config key 'training.max_steps' must be int, got 'abc' (str)."),
        ("training.weight_decay=[1,2]", "Config key 'training.weight_decay' must be float, got '[1,2]' (str)."),
        ("training.learning_rate=null", "Config key 'training.learning_rate' must be float, got None (NoneType)."),
        # model.scratch: read by the family's config class's types; an alias (attribute_map) as its target field
        ("model.scratch.n_layer=abc", "Config key 'model.scratch.n_layer' must be int, got 'abc' (str)."),
        ("model.scratch.hidden_size=1.5", "Config key 'model.scratch.hidden_size' must be int, got '1.5' (str)."),
    ],
)
def test_wrong_value_types_are_usage_errors_before_anything_runs(tmp_path, capsys, override, message):
    with pytest.raises(UsageError) as err:
        load_config("quickstart", [override])
    assert str(err.value) == message
    assert train(tmp_path, override) == 2
    assert capsys.readouterr().err.strip().endswith(f"hf-ot train: error: {message}")
    assert not (tmp_path / "run").exists()  # no data tokenized, no trainer folder


def test_values_of_the_right_type_pass():
    cfg = load_config(
        "quickstart",
        [
            "training.lr_scheduler_type=cosine",
            "training.save_strategy=steps",
            "training.report_to=[none]",
            "training.num_train_epochs=2",
            "training.trackio_static_space_id=false",
            "model.scratch.num_hidden_layers=2",
            "model.scratch.resid_pdrop=0",
        ],
    )
    assert cfg.training["num_train_epochs"] == 2 and cfg.model.scratch["num_hidden_layers"] == 2
    assert cfg.training["trackio_static_space_id"] is False


class Color(enum.Enum):
    RED = "red"


def test_type_check_of_annotations_isinstance_cannot_take():
    assert _type_ok(False, typing.Literal[False]) and not _type_ok(0, typing.Literal[False])
    assert not _type_ok("x", typing.Literal["a", "b"]) and _type_ok("a", typing.Literal["a", "b"])
    assert _type_ok([1], typing.Any) and _type_ok(None, typing.Any)
    assert _type_ok("red", Color | str) and _type_ok(Color.RED, Color) and not _type_ok(1, Color)
    assert _type_ok(1, typing.TypeVar("T"))  # isinstance raises TypeError: left to the class
    assert _type_ok(None, int | None) and not _type_ok(None, int)


# ---------------------------------------------------------------------------- flags: read by the key's type


@pytest.mark.parametrize("text", ["no", "No", "NO", "yes", "on", "off", "y", "n", "tRue", "false"])
def test_a_text_key_keeps_what_yaml_11_reads_as_a_flag(text):
    assert parse_override("card.license", text) == text


@pytest.mark.parametrize(
    "text,value", [("true", True), ("True", True), ("yes", True), ("1", True), ("false", False), ("no", False)]
)
def test_a_flag_key_reads_true_and_false_as_hf_argument_parser_does(text, value):
    assert parse_override("training.push_to_hub", text) is value
    assert parse_override("data.streaming", text) is value


def test_save_strategy_no_in_set_and_in_files(tmp_path):
    from transformers.trainer_utils import SaveStrategy

    from hf_ot.recipes.run import training_arguments

    cfg = load_config("quickstart", ["training.save_strategy=no"])
    assert cfg.training["save_strategy"] == "no"
    assert training_arguments(cfg, str(tmp_path)).save_strategy == SaveStrategy.NO
    (tmp_path / "c.yaml").write_text(
        "task: causal-lm\ntraining: {save_strategy: no, eval_strategy: No, do_train: true}\n"
    )
    assert load_config(str(tmp_path / "c.yaml")).training == {
        "save_strategy": "no",
        "eval_strategy": "No",
        "do_train": True,
    }


def test_yaml_safe_load_elsewhere_keeps_yaml_11():
    assert yaml.safe_load("a: no\nb: on\nc: 3e-4") == {"a": False, "b": True, "c": "3e-4"}


# --------------------------------------------------------------------------------------- model.ot values: exit 2


@pytest.mark.parametrize(
    "override,message",
    [
        (
            "model.ot.ot_solver=rk5",
            "model.ot.ot_solver must be one of ['euler', 'heun', 'rk4', 'bosh3', 'dopri5', 'heun_euler'], got 'rk5'.",
        ),
        (
            "model.ot.ot_num_steps=0",
            "model.ot.ot_num_steps must be an integer from 1 to 1024 (the number of solver steps M), got 0.",
        ),
        (
            "model.ot.ot_terminal_time=-1",
            "model.ot.ot_terminal_time must be a finite number > 0 and <= 1000 (the terminal time T), got -1.0.",
        ),
        (
            "model.ot.ot_lambda=-1",
            "model.ot.ot_lambda must be a finite number from 0 to 1e+06 (the weight of reg in the loss), got -1.0.",
        ),
        ("model.ot.ot_mode=plain", "model.ot.ot_mode must be one of ['residual', 'paper'], got 'plain'."),
        ("model.ot.ot_reg_in_loss=maybe", "model.ot.ot_reg_in_loss must be True or False, got 'maybe'."),
        (
            "model.ot.ot_decoder_num_steps=2",
            "model.ot.ot_decoder_num_steps / model.ot.ot_decoder_terminal_time apply to "
            "encoder-decoder families only; OTGPT2Config has one stack: "
            "use model.ot.ot_num_steps / model.ot.ot_terminal_time.",
        ),
    ],
)
def test_bad_ot_values_are_usage_errors_before_anything_runs(tmp_path, capsys, override, message):
    assert train(tmp_path, override) == 2
    assert capsys.readouterr().err.strip().endswith(f"hf-ot train: error: {message}")
    assert not (tmp_path / "run").exists()


def test_ot_values_of_a_base_checkpoint_are_checked_before_it_is_loaded():
    with pytest.raises(UsageError, match=r"^model.ot.ot_decoder_terminal_time must be a finite number > 0"):
        load_config("translation_t5", ["model.ot.ot_decoder_terminal_time=0"])
    cfg = {"task": "causal-lm", "model": {"base": "no/such-model", "ot": {"ot_solver": "rk5"}}}
    with pytest.raises(UsageError, match=r"^model.ot.ot_solver must be one of"):
        hf_ot.recipes.config.check_config(cfg)
    cfg["model"]["ot"] = {"ot_solver": "rk4", "ot_decoder_num_steps": 2}  # the base decides when it is converted
    hf_ot.recipes.config.check_config(cfg)


# ------------------------------------------------------------------------------- convert / push arguments: exit 2


# the config's own messages (OT_SETTINGS), as the CLI gives them
_T = "ot_terminal_time must be a finite number > 0 and <= 1000 (the terminal time T)"
_LAMBDA = "ot_lambda must be a finite number from 0 to 1e+06 (the weight of reg in the loss)"


@pytest.mark.parametrize(
    "option,value,message",
    [
        (
            "--ot-terminal-time",
            "-1",
            f"argument --ot-terminal-time: {_T}, got -1.0.",
        ),
        (
            "--ot-terminal-time",
            "0",
            f"argument --ot-terminal-time: {_T}, got 0.0.",
        ),
        (
            "--ot-terminal-time",
            "nan",
            f"argument --ot-terminal-time: {_T}, got nan.",
        ),
        (
            "--ot-lambda",
            "-1",
            f"argument --ot-lambda: {_LAMBDA}, got -1.0.",
        ),
        (
            "--ot-lambda",
            "inf",
            f"argument --ot-lambda: {_LAMBDA}, got inf.",
        ),
        (
            "--ot-num-steps",
            "5000",
            "argument --ot-num-steps: ot_num_steps must be an integer from 1 to 1024 (the number of "
            "solver steps M), got 5000.",
        ),
    ],
)
def test_convert_bad_ot_arguments_are_usage_errors(tmp_path, capsys, monkeypatch, option, value, message):
    monkeypatch.setattr(hf_ot, "convert", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "gpt2", str(tmp_path / "out"), option, value])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().endswith(f"hf-ot convert: error: {message}")


def test_push_bad_repo_id_and_missing_folder_are_usage_errors(tmp_path, capsys):
    assert main(["push", str(tmp_path), "bad repo id!!"]) == 2
    err = capsys.readouterr().err
    assert "hf-ot push: error: Invalid Hub repo id 'bad repo id!!'" in err and "'namespace/name'" in err
    assert main(["push", str(tmp_path / "missing"), "me/ot", "--dry-run"]) == 2
    assert (
        f"hf-ot push: error: no local folder '{tmp_path / 'missing'}' (FOLDER): give an existing model "
        "folder." in capsys.readouterr().err
    )


# ------------------------------------------------------------------------ a mistyped local folder is not a Hub id


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


def commands(model):
    return {
        "evaluate": ["evaluate", model, "--config", "quickstart"],
        "convert": ["convert", model, "out"],
        "check": ["check", model],
        "robustness": ["robustness", "--models", f"a={model}", "--config", "quickstart"],
    }


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


# ------------------------------------------------------------------ data.source and block_size: at config load


def test_a_bad_data_source_is_a_usage_error_at_config_load(tmp_path, capsys):
    message = "Config key 'data.source' must be 'embedded' or 'file' or 'hub', got 'bogus' (str)."
    with pytest.raises(UsageError, match="data.source"):
        load_config("quickstart", ["data.source=bogus"])
    assert train(tmp_path, "data.source=bogus") == 2
    err = capsys.readouterr().err
    assert err.strip().endswith(f"hf-ot train: error: {message}") and "training on" not in err
    assert not (tmp_path / "run").exists()


def test_a_block_longer_than_the_models_positions_is_refused_before_the_data_is_read(tmp_path, capsys, monkeypatch):
    import hf_ot.recipes.splits as splits_module  # where the recipe prepares its data (prepare_task)

    def no_data(*args, **kwargs):
        raise AssertionError("the data must not be prepared for a config that cannot run")

    monkeypatch.setattr(splits_module, "causal_lm_datasets", no_data)
    assert train(tmp_path, "data.block_size=64", "model.scratch.n_positions=16", "training.max_steps=1") == 2
    err = capsys.readouterr().err
    assert "data.block_size=64 exceeds the model's max_position_embeddings=16" in err and "Traceback" not in err
