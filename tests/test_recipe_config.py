"""hf_ot.recipes.config: a recipe's values (YAML files and --set) are read as text and converted once by the type
their key declares; each OT setting has one name (model.ot.ot_num_steps), earlier spellings warn and still work."""

import enum
import typing
import warnings

import pytest
import yaml
from conftest import REPO, set_flags, tiny_run
from helpers import assert_names, quick_cfg, raises_naming, train, warns_naming

from hf_ot import OTDeprecationWarning
from hf_ot.cli import main
from hf_ot.errors import UsageError
from hf_ot.recipes import run_recipe
from hf_ot.recipes.config import _type_ok, load_config

# text YAML 1.1 or 1.2 would read otherwise (a float kept as text, `no` as false, an alias, a comment)
TRICKY = {
    "training.learning_rate": ("3e-4", 3e-4),  # a float key: a number (PyYAML's YAML 1.1: the text '3e-4')
    "training.push_to_hub": ("no", False),  # a bool key: false
    "card.license": ("no", "no"),  # a text key: the text
    "data.train_file": ("*.csv", "*.csv"),  # a glob (YAML: an alias)
    "output_dir": ("runs/exp #3", "runs/exp #3"),  # (YAML: a comment after 'runs/exp')
}


def _value(cfg, dotted):
    section, _, key = dotted.rpartition(".")
    holder = cfg.to_dict()[section] if section else cfg.to_dict()
    return holder[key]


def test_set_values_are_read_by_the_type_of_their_key():
    cfg = load_config("quickstart", [f"{k}={text}" for k, (text, _) in TRICKY.items()])
    for key, (_, value) in TRICKY.items():
        got = _value(cfg, key)
        assert got == value and type(got) is type(value), key


def test_yaml_file_values_are_read_by_the_type_of_their_key(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text(
        "task: causal-lm\n"
        "output_dir: 'runs/exp #3'\n"  # (in a file a ' #' starts a comment, and * an alias, unless quoted)
        "data: {train_file: '*.csv', val_fraction: 2e-1}\n"
        "card: {license: no}\n"
        "training: {learning_rate: 3e-4, push_to_hub: no, max_steps: 010}\n"
        "model:\n  scratch: {family: gpt2, n_layer: 2, resid_pdrop: 5e-1}\n"
        "  ot: {ot_num_steps: 4, ot_block_layer_norms: no, ot_mode: paper}\n"
    )
    cfg = load_config(str(path))
    for key, (_, value) in TRICKY.items():
        got = _value(cfg, key)
        assert got == value and type(got) is type(value), key
    assert cfg.data.val_fraction == 0.2 and cfg.training["max_steps"] == 10
    assert cfg.model.ot["ot_num_steps"] == 4 and cfg.model.ot["ot_block_layer_norms"] is False
    # model.scratch: read by the family's transformers config class (n_layer an int, resid_pdrop a float)
    assert cfg.model.scratch["n_layer"] == 2 and cfg.model.scratch["resid_pdrop"] == 0.5


def test_only_list_and_mapping_keys_read_yaml_structure():
    cfg = load_config("quickstart", ["evaluation.metrics=[bleu, rouge]", "card.dataset_name=[not a list]"])
    assert cfg.evaluation.metrics == ["bleu", "rouge"] and cfg.card.dataset_name == "[not a list]"
    cfg = load_config("quickstart", ["training.lr_scheduler_kwargs={num_cycles: 0.5, name: x}"])
    assert cfg.training["lr_scheduler_kwargs"] == {"num_cycles": 0.5, "name": "x"}  # untyped leaves: JSON scalars
    assert load_config("quickstart", ["data.validation_file=null"]).data.validation_file is None
    assert load_config("quickstart", ["model.ot=null"]).model.ot is None


@pytest.mark.parametrize(
    "override,key,fix",
    [
        ("training.learning_rate=fast", "training.learning_rate", "must be float"),
        ("training.push_to_hub=maybe", "training.push_to_hub", "must be bool"),
        ("model.ot.ot_num_steps=abc", "model.ot.ot_num_steps", "must be an integer from 1 to 1024"),
        ("model.ot.ot_num_steps=0", "model.ot.ot_num_steps", "must be an integer from 1 to 1024"),
        ("model.ot.ot_solver=rk5", "model.ot.ot_solver", "must be one of"),
        ("evaluation.metrics=bleu", "evaluation.metrics", "write a list in brackets"),
    ],
)
def test_a_bad_value_is_refused_naming_the_key_and_what_it_takes(override, key, fix):
    with pytest.raises(UsageError) as caught:
        load_config("quickstart", [override])
    assert key in str(caught.value) and fix in str(caught.value)


def test_an_ot_value_is_checked_once_by_the_settings_table(monkeypatch):
    from hf_ot.models import ot_config

    calls = []
    problem = ot_config.OTSetting.problem
    monkeypatch.setattr(ot_config.OTSetting, "problem", lambda s, v, n=None: calls.append(s.field) or problem(s, v, n))
    ot_config._check_values.cache_clear()
    with raises_naming(UsageError, "model.ot.ot_num_steps", "integer"):
        load_config("quickstart", ["model.ot.ot_num_steps=0"])
    assert calls.count("ot_num_steps") == 1


@pytest.mark.parametrize(
    "old,new,value",
    [
        ("model.ot.num_steps", "ot_num_steps", 3),
        ("model.ot.lambda", "ot_lambda", 0.5),
        ("model.ot.solver", "ot_solver", "rk4"),
        ("model.ot.reg_in_loss", "ot_reg_in_loss", True),
    ],
)
def test_earlier_spellings_of_ot_settings_warn_naming_the_new_one_and_still_work(old, new, value, tmp_path):
    with pytest.warns(OTDeprecationWarning, match=f"model.ot.{new}"):
        cfg = load_config("quickstart", [f"{old}={str(value).lower()}"])
    assert cfg.model.ot[new] == value and old.rpartition(".")[2] not in cfg.model.ot
    path = tmp_path / "old.yaml"
    path.write_text(f"task: causal-lm\nmodel:\n  ot: {{{old.rpartition('.')[2]}: {str(value).lower()}}}\n")
    with pytest.warns(OTDeprecationWarning, match=f"model.ot.{new}"):
        assert load_config(str(path)).model.ot == {new: value}


def test_training_ot_lambda_moves_to_the_model_config_with_a_warning(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("task: causal-lm\ntraining: {ot_lambda: 0.5, max_steps: 2}\n")
    with pytest.warns(OTDeprecationWarning, match="model.ot.ot_lambda"):
        cfg = load_config(str(path))
    assert cfg.model.ot == {"ot_lambda": 0.5} and "ot_lambda" not in cfg.training
    with pytest.warns(OTDeprecationWarning, match="model.ot.ot_lambda"):  # an override replaces the recipe's 1.0
        assert load_config("quickstart", ["training.ot_lambda=0.5"]).model.ot["ot_lambda"] == 0.5
    path.write_text("task: causal-lm\nmodel: {ot: {ot_lambda: 1.0}}\ntraining: {ot_lambda: 0.5}\n")
    with raises_naming(UsageError, "training.ot_lambda=0.5", "model.ot.ot_lambda=1.0"):
        load_config(str(path))  # both spellings in one recipe
    with warns_naming(UserWarning, "training.ot_lambda", "ignored", "baseline"):
        assert load_config("causal_lm_shakespeare_char_baseline", ["training.ot_lambda=0.5"]).model.ot is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name: no warning
        load_config("quickstart", ["model.ot.ot_lambda=0.5"])


def test_the_same_setting_under_both_names_with_different_values_is_refused(tmp_path):
    path = tmp_path / "both.yaml"
    path.write_text("task: causal-lm\nmodel:\n  ot: {num_steps: 3, ot_num_steps: 4}\n")
    with raises_naming(UsageError, "model.ot.num_steps=3", "model.ot.ot_num_steps=4"):
        load_config(str(path))
    with (
        pytest.warns(OTDeprecationWarning),
        pytest.raises(UsageError, match="model.ot.num_steps=3 and model.ot.ot_num_steps=4"),
    ):
        load_config("quickstart", ["model.ot.num_steps=3", "model.ot.ot_num_steps=4"])  # on the command line alike


def test_the_packaged_recipes_use_the_one_names():
    from hf_ot.recipes.config import packaged_configs

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        for name in packaged_configs():
            cfg = load_config(name)
            assert cfg.model.ot is None or all(k.startswith("ot_") for k in cfg.model.ot), name


class Color(enum.Enum):
    RED = "red"


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


@pytest.mark.usefixtures("in_repo")
def test_setting_the_other_model_key_to_null_keeps_the_recipes_model():
    # a model.base (or model.scratch) override replaces the recipe's other one; one set to null gives no model, so
    # `--set model.scratch=null` on a base recipe dropped its base too: no model at all, "model.scratch.family must
    # be one of ..." after the data was read, with a warning that the base is not used
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = load_config("recipes/configs/sst2_minilm.yaml", ["model.scratch=null"])
    assert cfg.model.base == "minilm" and cfg.model.scratch is None


def test_a_scratch_model_without_layers_names_n_layer(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "quickstart", "--output-dir", str(out), *set_flags(tiny_run("model.scratch.n_layer=0"))])
    err = capsys.readouterr().err
    assert code != 0 and "n_layer" in err and "please report" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    "override,facts",  # the key, the type it must have, the value given
    [
        ("training.learning_rate=abc", ("'training.learning_rate'", "float", "'abc'")),
        ("training.max_steps=abc", ("'training.max_steps'", "int", "'abc'")),
        ("training.weight_decay=[1,2]", ("'training.weight_decay'", "float", "'[1,2]'")),
        ("training.learning_rate=null", ("'training.learning_rate'", "float", "None")),
        # model.scratch: read by the family's config class's types; an alias (attribute_map) as its target field
        ("model.scratch.n_layer=abc", ("'model.scratch.n_layer'", "int", "'abc'")),
        ("model.scratch.hidden_size=1.5", ("'model.scratch.hidden_size'", "int", "'1.5'")),
    ],
)
def test_wrong_value_types_are_usage_errors_before_anything_runs(tmp_path, capsys, override, facts):
    with raises_naming(UsageError, *facts):
        load_config("quickstart", [override])
    assert train(tmp_path, override) == 2
    err = capsys.readouterr().err
    assert "hf-ot train: error:" in err and "Traceback" not in err
    assert_names(err, *facts)
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


def test_type_check_of_annotations_isinstance_cannot_take():
    assert _type_ok(False, typing.Literal[False]) and not _type_ok(0, typing.Literal[False])
    assert not _type_ok("x", typing.Literal["a", "b"]) and _type_ok("a", typing.Literal["a", "b"])
    assert _type_ok([1], typing.Any) and _type_ok(None, typing.Any)
    assert _type_ok("red", Color | str) and _type_ok(Color.RED, Color) and not _type_ok(1, Color)
    assert _type_ok(1, typing.TypeVar("T"))  # isinstance raises TypeError: left to the class
    assert _type_ok(None, int | None) and not _type_ok(None, int)


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


@pytest.mark.usefixtures("in_repo")
def test_set_parses_numbers_as_numbers():
    cfg = load_config(
        "recipes/configs/quickstart.yaml",
        ["training.learning_rate=3e-4", "model.ot.ot_lambda=1e-2", "data.block_size=64", "training.warmup_steps=1E1"],
    )
    assert cfg.training["learning_rate"] == 3e-4 and isinstance(cfg.training["learning_rate"], float)
    assert cfg.model.ot["ot_lambda"] == 0.01
    assert cfg.data.block_size == 64 and cfg.training["warmup_steps"] == 10.0


@pytest.mark.usefixtures("in_repo")
def test_yaml_files_read_numbers_as_numbers(tmp_path):
    text = (REPO / "recipes" / "configs" / "quickstart.yaml").read_text().replace("1.0e-3", "1e-3")
    (tmp_path / "c.yaml").write_text(text)
    assert load_config(str(tmp_path / "c.yaml")).training["learning_rate"] == 1e-3


@pytest.mark.usefixtures("in_repo")
@pytest.mark.parametrize(
    "override,message",
    [
        ("data.blok_size=64", r"Unknown config key 'data.blok_size'. Did you mean 'block_size'\?.*block_size"),
        ("training.learnig_rate=0.1", r"Unknown config key 'training.learnig_rate'. Did you mean 'learning_rate'\?"),
        ("model.ot.lamda=0.1", r"Unknown config key 'model.ot.lamda'. Did you mean 'ot_lambda'\?"),
        ("model.scratch.n_layr=2", r"Unknown config key 'model.scratch.n_layr'. Did you mean 'n_layer'\?"),
        ("evaluaton.metrics=[]", r"Unknown config key 'evaluaton'. Did you mean 'evaluation'\?"),
        ("data.block_size=abc", r"'data.block_size' must be int, got 'abc'"),
        ("data.block_size.x=1", r"'data.block_size' is a value, not a section"),
    ],
)
def test_unknown_keys_and_wrong_types_are_errors(override, message):
    with pytest.raises(ValueError, match=message):
        load_config("recipes/configs/quickstart.yaml", [override])


@pytest.mark.usefixtures("in_repo")
def test_unknown_key_in_a_yaml_file_is_an_error(tmp_path):
    (tmp_path / "c.yaml").write_text("task: causal-lm\ndata: {source: embedded, blocksize: 64}\n")
    with pytest.raises(ValueError, match="Unknown config key 'data.blocksize'"):
        load_config(str(tmp_path / "c.yaml"))


@pytest.mark.usefixtures("in_repo")
def test_run_recipe_checks_a_dict_built_in_code(tmp_path):
    cfg = quick_cfg(tmp_path / "run").to_dict()
    cfg["data"]["blok_size"] = 64
    with pytest.raises(ValueError, match="Unknown config key 'data.blok_size'"):
        run_recipe(cfg)


@pytest.mark.usefixtures("in_repo")
def test_load_config_returns_the_typed_config():
    from hf_ot.recipes.config import RecipeConfig

    typed = load_config("recipes/configs/quickstart.yaml")
    assert isinstance(typed, RecipeConfig) and RecipeConfig.from_dict(typed.to_dict()) == typed
    assert (
        typed.data.block_size == 128
        and typed.model.ot["ot_num_steps"] == 5
        and typed.evaluation.metrics == ["bleu", "rouge"]
    )
