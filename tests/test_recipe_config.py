"""hf_ot.recipes.config: a recipe's values (YAML files and --set) are read as text and converted once by the type
their key declares; each OT setting has one name (model.ot.ot_num_steps), earlier spellings warn and still work."""

import warnings

import pytest

from hf_ot.errors import UsageError
from hf_ot.recipes.config import load_config

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
    with pytest.raises(UsageError, match="model.ot.ot_num_steps must be an integer"):
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
    with pytest.warns(FutureWarning, match=f"model.ot.{new}"):
        cfg = load_config("quickstart", [f"{old}={str(value).lower()}"])
    assert cfg.model.ot[new] == value and old.rpartition(".")[2] not in cfg.model.ot
    path = tmp_path / "old.yaml"
    path.write_text(f"task: causal-lm\nmodel:\n  ot: {{{old.rpartition('.')[2]}: {str(value).lower()}}}\n")
    with pytest.warns(FutureWarning, match=f"model.ot.{new}"):
        assert load_config(str(path)).model.ot == {new: value}


def test_training_ot_lambda_moves_to_the_model_config_with_a_warning(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("task: causal-lm\ntraining: {ot_lambda: 0.5, max_steps: 2}\n")
    with pytest.warns(FutureWarning, match="model.ot.ot_lambda"):
        cfg = load_config(str(path))
    assert cfg.model.ot == {"ot_lambda": 0.5} and "ot_lambda" not in cfg.training
    with pytest.raises(UsageError, match="training.ot_lambda=0.5 and model.ot.ot_lambda=1.0 disagree"):
        load_config("quickstart", ["training.ot_lambda=0.5"])  # quickstart's model.ot.ot_lambda is 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name: no warning
        load_config("quickstart", ["model.ot.ot_lambda=0.5"])


def test_the_same_setting_under_both_names_with_different_values_is_refused(tmp_path):
    path = tmp_path / "both.yaml"
    path.write_text("task: causal-lm\nmodel:\n  ot: {num_steps: 3, ot_num_steps: 4}\n")
    with pytest.raises(UsageError, match="model.ot.num_steps=3 and model.ot.ot_num_steps=4 disagree"):
        load_config(str(path))


def test_the_packaged_recipes_use_the_one_names():
    from hf_ot.recipes.config import packaged_configs

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        for name in packaged_configs():
            cfg = load_config(name)
            assert cfg.model.ot is None or all(k.startswith("ot_") for k in cfg.model.ot), name
