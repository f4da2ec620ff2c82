import json
import re
import subprocess
import sys
import warnings

import pytest
import torch
from conftest import REPO, make_base
from helpers import assert_names, raises_naming
from transformers import BertConfig, GPT2Config

import hf_ot
from hf_ot.cli import main
from hf_ot.hub import plan_push
from hf_ot.models import OTBartConfig, OTBertConfig, OTGPT2Config, OTT5Config

pytestmark = pytest.mark.core  # the model, cache and generation tests: CI runs them on the oldest transformers too

BAD_VALUES = [
    ("ot_num_steps", 0),
    ("ot_num_steps", -2),
    ("ot_num_steps", 1.5),
    ("ot_num_steps", "3"),
    ("ot_num_steps", True),
    ("ot_terminal_time", 0.0),
    ("ot_terminal_time", -1.0),
    ("ot_terminal_time", "1"),
    ("ot_lambda", -0.1),
    ("ot_lambda", None),
    ("ot_solver", "midpoint"),
    ("ot_mode", "unrolled"),
    ("ot_block_layer_norms", "no"),
]


@pytest.mark.parametrize("config_class", [OTGPT2Config, OTBertConfig, OTT5Config, OTBartConfig])
@pytest.mark.parametrize("field,value", BAD_VALUES)
def test_bad_value_raises_value_error_naming_field(config_class, field, value):
    with pytest.raises(ValueError, match=field):
        config_class(**{field: value})


def test_layer_norm_removal_needs_paper_mode():
    with pytest.raises(ValueError, match="ot_block_layer_norms"):
        OTGPT2Config(ot_block_layer_norms=False)
    assert OTGPT2Config(ot_mode="paper", ot_block_layer_norms=False).ot_block_layer_norms is False


@pytest.mark.parametrize("config_class", [OTT5Config, OTBartConfig])
def test_decoder_settings_on_encoder_decoder(config_class):
    cfg = config_class(ot_num_steps=4, ot_terminal_time=2.0, ot_decoder_num_steps=2)
    assert cfg.ot_steps_and_time("encoder") == (4, 2.0)
    assert cfg.ot_steps_and_time("decoder") == (2, 2.0)
    with pytest.raises(ValueError, match="ot_decoder_num_steps"):
        config_class(ot_decoder_num_steps=0)
    with pytest.raises(ValueError, match="ot_decoder_terminal_time"):
        config_class(ot_decoder_terminal_time=-1.0)


@pytest.mark.parametrize("config_class", [OTGPT2Config, OTBertConfig])
def test_decoder_settings_rejected_on_single_stack(config_class):
    with pytest.raises(ValueError, match="ot_decoder_num_steps"):
        config_class(ot_decoder_num_steps=2)


def test_base_config_of_another_family_rejected():
    with pytest.raises(ValueError, match="bert"):
        OTGPT2Config.from_base_config(BertConfig())
    with pytest.raises(ValueError, match="gpt2"):
        OTBertConfig.from_base_config(GPT2Config())


def test_unknown_family_rejected():
    from transformers import XLNetConfig, XLNetLMHeadModel

    with pytest.raises(ValueError, match="Unsupported base family 'xlnet'"):
        hf_ot.convert(XLNetLMHeadModel(XLNetConfig(n_layer=1, d_model=16, n_head=2, d_inner=16, vocab_size=10)))


@pytest.mark.parametrize(
    "keyword,message",
    [
        ("num_step", "unknown keyword 'num_step' \\(did you mean ot_num_steps=\\?\\)"),
        ("ot_nums_steps", "unknown keyword 'ot_nums_steps' \\(did you mean ot_num_steps=\\?\\)"),
        ("reg_lamda", "did you mean ot_lambda="),
        ("revision", "already loaded: these are from_pretrained arguments"),
    ],
)
def test_convert_names_misspelt_and_misplaced_keywords(tmp_path, keyword, message):
    from transformers import GPT2LMHeadModel

    base = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=20))
    if keyword != "revision":  # the same check for a folder, before anything loads
        base.save_pretrained(tmp_path)
        with pytest.raises(ValueError, match=message):
            hf_ot.convert(str(tmp_path), **{keyword: 2})
    with pytest.raises(ValueError, match=message):
        hf_ot.convert(base, **{keyword: 2})


def test_convert_of_a_loaded_model_honours_dtype_and_config_fields():
    from transformers import GPT2ForSequenceClassification

    base = GPT2ForSequenceClassification(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=20, pad_token_id=0))
    for keyword in ("dtype", "torch_dtype"):  # torch_dtype: transformers' older name, also a config attribute
        for dtype in (torch.bfloat16, "bfloat16"):
            model = hf_ot.convert(base, **{keyword: dtype})
            assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in hf_ot.convert(base).parameters()} == {torch.float32}
    assert hf_ot.convert(base, num_labels=2).config.num_labels == 2
    # OT config fields convert has no parameter for are set on the config (and checked)
    assert hf_ot.convert(base, ot_reg_in_loss=True, ot_output_reg=True).config.ot_reg_in_loss is True
    with pytest.raises(ValueError, match="ot_reg_in_loss must be True or False"):
        hf_ot.convert(base, ot_reg_in_loss="yes")


def test_a_misspelt_ot_field_at_load_time_names_the_field(tmp_path):
    from transformers import AutoModelForCausalLM, GPT2LMHeadModel

    hf_ot.convert(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=20))).save_pretrained(tmp_path)
    with raises_naming(ValueError, "'ot_nums_steps'", "did you mean 'ot_num_steps'"):
        AutoModelForCausalLM.from_pretrained(tmp_path, ot_nums_steps=3)
    assert AutoModelForCausalLM.from_pretrained(tmp_path, ot_num_steps=3).config.ot_num_steps == 3
    # a config given: from_pretrained leaves keywords to the model
    config = hf_ot.OTGPT2Config.from_pretrained(tmp_path)
    with raises_naming(ValueError, "ot_num_steps", "on the config"):
        AutoModelForCausalLM.from_pretrained(tmp_path, config=config, ot_num_steps=3)


def test_model_rejects_base_config():
    with pytest.raises(ValueError, match="OTGPT2Config"):
        hf_ot.OTGPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2))


def test_roundtrip_and_base_fields_kept(tmp_path):
    base = GPT2Config(n_layer=3, n_embd=48, n_head=4)
    cfg = OTGPT2Config.from_base_config(base, ot_num_steps=5, ot_solver="rk4", ot_mode="paper", ot_lambda=1.0)
    assert (cfg.n_layer, cfg.n_embd, cfg.model_type) == (3, 48, "ot_gpt2")
    cfg.save_pretrained(tmp_path)
    again = OTGPT2Config.from_pretrained(tmp_path)
    for key in ("ot_num_steps", "ot_solver", "ot_mode", "ot_lambda", "n_layer", "n_embd"):
        assert getattr(again, key) == getattr(cfg, key)
    with pytest.raises(ValueError, match="ot_num_steps"):
        OTGPT2Config.from_base_config(base, ot_num_steps=0)
    with pytest.raises(ValueError, match="Unknown OT settings"):
        OTGPT2Config.from_base_config(base, num_steps=2)


def test_the_checks_come_from_the_settings_table():
    """Each row's type and bounds decide: the bounds themselves pass, just outside them and values of another type
    fail, naming the field; the solver choices are the solver table's; convert's parameters are the table's fields."""
    import inspect
    import sys
    import typing

    from hf_ot.models.ot_config import OT_SETTINGS, SETTING_OF_FIELD, check_ot_value
    from hf_ot.models.ot_solver import ADAPTIVE_SOLVERS, SOLVERS

    assert set(SETTING_OF_FIELD["ot_solver"].choices) == set(SOLVERS) | set(ADAPTIVE_SOLVERS)
    for s in OT_SETTINGS:
        assert s.base_type in (int, float, bool) or typing.get_origin(s.base_type) is typing.Literal, s.field
        good, bad = [s.default], [object()]
        if s.choices is not None:
            good, bad = list(s.choices), [*bad, s.choices[0].upper(), 1]
        elif s.base_type is bool:
            good, bad = [True, False], [*bad, 1, "yes"]
        else:
            step = 1 if s.base_type is int else s.high * 1e-6
            good = [s.high] + ([] if s.low_open else [s.low]) + ([s.low + step] if s.low_open else [])
            bad = [*bad, s.high + step, s.low if s.low_open else s.low - step, float("nan"), True, str(s.high)]
            if s.base_type is int:
                bad.append(s.low + 0.5)
        for value in good:
            check_ot_value(s.field, value)
        for value in bad:
            with pytest.raises(ValueError, match=f"^{s.field} must be {re.escape(s.bounds())}"):
                check_ot_value(s.field, value)
        if s.nullable:
            check_ot_value(s.field, None)
    # convert's OT parameters: one per row, named as its field, unset (None) by default: the config's default applies
    parameters = inspect.signature(sys.modules["hf_ot.convert"].convert).parameters
    assert [p for p in parameters if p.startswith("ot_")] == [s.field for s in OT_SETTINGS]
    assert all(parameters[s.field].default is None for s in OT_SETTINGS)


def test_convert_takes_the_one_names_and_warns_on_earlier_keywords():
    from transformers import GPT2Model

    base = GPT2Model(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=20))
    model = hf_ot.convert(base, ot_num_steps=3, ot_lambda=0.5, ot_solver="rk4", ot_reg_in_loss=True)
    assert (model.config.ot_num_steps, model.config.ot_lambda, model.config.ot_solver) == (3, 0.5, "rk4")
    assert model.config.ot_reg_in_loss is True
    for old, new, value in (
        ("num_steps", "ot_num_steps", 2),
        ("reg_lambda", "ot_lambda", 0.2),
        ("mode", "ot_mode", "paper"),
    ):  # noqa: E501
        with pytest.warns(hf_ot.OTDeprecationWarning, match=f"{old}= is deprecated, pass {new}="):
            assert getattr(hf_ot.convert(base, **{old: value}).config, new) == value
    with pytest.raises(ValueError, match="pass ot_num_steps= only"):
        hf_ot.convert(base, num_steps=2, ot_num_steps=3)
    with raises_naming(ValueError, "ot_num_steps", "1 to 1024"):  # the config's check
        hf_ot.convert(base, ot_num_steps=0)


@pytest.fixture(scope="module")
def saved_gpt2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2") / "model"
    hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "setting, value, message",
    [
        ("ot_num_steps", 0, "ot_num_steps must be an integer from 1 to 1024"),
        ("ot_solver", "bad", "ot_solver"),
        ("ot_lambda", -1.0, "ot_lambda"),
        ("ot_rtol", 5.0, "ot_rtol"),
        ("ot_decoder_num_steps", 2, "encoder-decoder families only"),  # (how the settings combine)
    ],
)
def test_from_pretrained_refuses_an_ot_setting_out_of_bounds_at_the_config(saved_gpt2, setting, value, message):
    # AutoConfig.from_pretrained(folder, ot_num_steps=0) was accepted (transformers sets keyword arguments after the
    # config's checks); the error came only when a model was built from it
    from transformers import AutoConfig

    with pytest.raises(ValueError, match=message):
        AutoConfig.from_pretrained(saved_gpt2, **{setting: value})
    with pytest.raises(ValueError, match=message):
        hf_ot.OTGPT2Config.from_pretrained(saved_gpt2, **{setting: value})
    assert AutoConfig.from_pretrained(saved_gpt2, ot_num_steps=3).ot_num_steps == 3
    config = AutoConfig.from_pretrained(saved_gpt2)
    with pytest.raises(ValueError, match=message):
        config.update({setting: value})
    assert config.ot_num_steps == 2 and config.ot_decoder_num_steps is None


def test_the_config_refuses_it_on_a_machine_without_hf_ot(saved_gpt2):
    # the config class that travels with the checkpoint (trust_remote_code) checks the keyword arguments too
    code = (
        "import sys; sys.modules['hf_ot'] = None\n"  # no hf_ot: the folder's own code is used
        "from transformers import AutoConfig\n"
        f"folder = {str(saved_gpt2)!r}\n"
        "assert type(AutoConfig.from_pretrained(folder, trust_remote_code=True)).__module__.startswith("
        "'transformers_modules')\n"
        "try:\n"
        "    AutoConfig.from_pretrained(folder, trust_remote_code=True, ot_num_steps=0)\n"
        "except ValueError as err:\n"
        "    print('refused:', err)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("refused:")
    assert_names(done.stdout, "ot_num_steps", "1 to 1024")


def test_an_unknown_ot_field_in_a_saved_config_is_named(converted, tmp_path):
    _, model = converted("gpt2", "GPT2LMHeadModel")
    model.save_pretrained(tmp_path / "ot")
    values = json.loads((tmp_path / "ot" / "config.json").read_text())
    (tmp_path / "ot" / "config.json").write_text(json.dumps({**values, "ot_future_knob": 2}))
    with pytest.warns(UserWarning, match="ot_future_knob"):
        hf_ot.OTGPT2LMHeadModel.from_pretrained(tmp_path / "ot")


def test_a_config_with_known_fields_loads_without_a_warning(converted, tmp_path):
    _, model = converted("gpt2", "GPT2LMHeadModel")
    model.save_pretrained(tmp_path / "ot")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*unknown OT field")
        hf_ot.OTGPT2LMHeadModel.from_pretrained(tmp_path / "ot")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("ot_num_steps", 1000000000, r"ot_num_steps must be an integer from 1 to 1024"),
        ("ot_terminal_time", 1e300, r"ot_terminal_time must be a finite number > 0 and <= 1000"),
    ],
    ids=["num-steps-1e9", "terminal-time-1e300"],
)
def test_out_of_bounds_ot_values_in_a_saved_config_name_the_file_and_field(ot_folder, capsys, field, value, message):
    import re
    import time

    config = json.loads((ot_folder / "config.json").read_text())
    config[field] = value
    (ot_folder / "config.json").write_text(json.dumps(config))
    named = rf"{re.escape(str(ot_folder / 'config.json'))}: {message}"
    start = time.monotonic()
    with pytest.raises(ValueError, match=named):
        hf_ot.convert(str(ot_folder))
    with pytest.raises(Exception, match=named):  # PushError
        plan_push(ot_folder, "me/ot")
    capsys.readouterr()
    assert main(["push", str(ot_folder), "me/ot", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert re.search(named, err) and "Traceback" not in err
    config_yaml = str(REPO / "recipes/configs/quickstart.yaml")
    assert main(["evaluate", str(ot_folder), "--config", config_yaml, "--trust-remote-code"]) == 2
    err = capsys.readouterr().err
    assert re.search(named, err) and "Traceback" not in err
    assert time.monotonic() - start < 60  # refused at once, not after a forward
    from transformers import AutoModelForCausalLM

    with pytest.raises(ValueError, match=message):  # transformers' own load refuses before any forward
        AutoModelForCausalLM.from_pretrained(ot_folder)
