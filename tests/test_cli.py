"""`hf-ot` as a script sees it: --version, env, exit codes 0/1/2, the result JSON in a file and
alone on stdout with --json, progress bars on the main process only; evaluate at another M / solver."""

import argparse
import json
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

import pytest
from conftest import REPO, set_flags
from helpers import assert_names, cli_train, tiny_lm

import hf_ot
from hf_ot import metrics as ev
from hf_ot.cli import main
from hf_ot.errors import UsageError
from hf_ot.recipes.config import load_config, parse_override

TINY = [
    "training.max_steps=2",
    "training.logging_steps=1",
    "training.per_device_train_batch_size=4",
    "data.block_size=32",
    "data.max_eval_blocks=4",
    "model.scratch.n_embd=32",
    "model.scratch.n_layer=1",
    "model.scratch.n_positions=32",
    "model.ot.ot_num_steps=2",
    "evaluation.metrics=[]",
]


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"hf-ot {version('hf-ot')}"


def test_env_reports_the_installed_versions(capsys):
    assert main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    for name in ("torch", "transformers", "accelerate", "peft", "datasets"):
        assert info[name] == version(name)
    assert info["device"] in ("cpu", "mps") or info["device"].startswith("cuda")
    assert isinstance(info["torch_threads"], int) and info["python"].count(".") == 2
    assert main(["env"]) == 0
    assert f"- transformers: {version('transformers')}" in capsys.readouterr().out


def test_train_json_alone_on_stdout_and_in_the_result_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # any folder: the packaged quickstart config
    out = tmp_path / "run"
    assert main(["train", "--output-dir", str(out), *set_flags(TINY), "--json"]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)  # nothing but the JSON: Trainer's log dicts went to stderr
    assert printed == json.loads((out / "results.json").read_text())
    assert "'loss'" in captured.err and f"result written to {out / 'results.json'}" in captured.err


def test_exit_codes_usage_2_failure_1(tmp_path, capsys):
    # usage: an unknown config key, nothing done
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "a"), "--set", "data.blok_size=3"]) == 2
    # failure while working: a data file that is not there
    assert (
        main(
            [
                "train",
                "quickstart",
                "--output-dir",
                str(tmp_path / "b"),
                "--set",
                "data.source=file",
                "--set",
                f"data.train_file={tmp_path / 'missing.txt'}",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "Unknown config key" in err and "missing.txt" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exit_info:  # argparse's own usage errors
        main(["train", "--no-such-flag"])
    assert exit_info.value.code == 2


@pytest.mark.parametrize(
    "argv,hint",
    [
        (["sweep", "quickstart", "--values", "1", "--output-dir", "x"], "hf-ot sweep takes --out, not --output-dir"),
        (["convert", "b", "o", "--steps", "2"], "hf-ot convert takes --ot-num-steps, not --steps"),
        (
            ["evaluate", "m", "--config", "q", "--num-steps", "2"],
            "hf-ot evaluate takes --ot-num-steps, not --num-steps",
        ),
        (["evaluate", "m", "--config", "q", "--overwrite"], "--overwrite is an option of hf-ot convert, train, sweep"),
    ],
)
def test_a_sibling_commands_flag_is_answered_with_this_commands_own(argv, hint, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"hf-ot {argv[0]}: error: unrecognized arguments:" in err and hint in err


def test_result_file_of_a_command_without_output_folder(tmp_path, capsys):
    folder = tmp_path / "ot"
    base = tmp_path / "base"
    from conftest import make_base

    make_base("bert", "BertModel").save_pretrained(base)
    hf_ot.recipes.build_char_tokenizer("abcdefghij klm").save_pretrained(base)
    result = tmp_path / "convert.json"
    assert main(["convert", str(base), str(folder), "--result-file", str(result)]) == 0
    assert json.loads(result.read_text())["class"] == "OTBertModel"
    assert f"result written to {result}" in capsys.readouterr().err


@pytest.mark.parametrize("rank,shown", [("0", True), ("1", False)])
def test_generation_progress_bar_on_the_main_process_only(rank, shown, capsys, monkeypatch):
    model, tok = tiny_lm()
    monkeypatch.setenv("RANK", rank)
    ev.generate_texts(
        model, tok, ["The", "A"], batch_size=1, max_new_tokens=2, do_sample=False, pad_token_id=tok.pad_token_id
    )
    assert ("generating" in capsys.readouterr().err) == shown


def test_evaluate_at_another_num_steps_and_solver(tmp_path, capsys, monkeypatch):
    """hf-ot evaluate --ot-num-steps/--ot-solver equals evaluating the loaded model with those settings set by hand."""
    from hf_ot.recipes import load_config
    from hf_ot.recipes.evaluate import lm_eval_dataset, load_for_eval

    monkeypatch.chdir(tmp_path)
    tiny_lm(tmp_path)  # an OT GPT-2 (M=2, euler) saved with its char tokenizer
    overrides = ["data.block_size=32", "data.max_eval_blocks=4", "evaluation.metrics=[]"]
    assert (
        main(
            [
                "evaluate",
                str(tmp_path / "model"),
                "--config",
                "quickstart",
                *set_flags(overrides),
                "--ot-num-steps",
                "4",
                "--ot-solver",
                "heun",
                "--json",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert (result["num_steps"], result["solver"]) == (4, "heun")
    model, tok = load_for_eval(str(tmp_path / "model"))
    model.config.ot_num_steps, model.config.ot_solver = 4, "heun"
    reference = ev.teacher_forced_lm(
        model, lm_eval_dataset(load_config("quickstart", overrides), tok), tok, batch_size=16
    )
    assert result["runs"][0]["loss"] == pytest.approx(reference.loss, rel=1e-6)
    model.config.ot_num_steps, model.config.ot_solver = 2, "euler"  # the saved settings give another loss
    saved = ev.teacher_forced_lm(model, lm_eval_dataset(load_config("quickstart", overrides), tok), tok, batch_size=16)
    assert saved.loss != pytest.approx(reference.loss, rel=1e-6)


def test_the_wheel_ships_the_configs_and_the_card_template(wheel):
    """A regular (non-editable) install has what `hf-ot train` needs from any folder."""
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    for config in (REPO / "recipes" / "configs").glob("*.yaml"):
        assert f"hf_ot/recipe_configs/{config.name}" in names
    assert "hf_ot/model_cards/ot_model_card.md" in names
    # every module of the package (a subpackage missing from pyproject's packages would be left out), py.typed, and
    # no research code
    for path in (REPO / "hf_ot").rglob("*.py"):
        assert path.relative_to(REPO).as_posix() in names
    assert "hf_ot/py.typed" in names and not any(name.startswith(("experiments/", "benchmarks/")) for name in names)


def test_check_with_another_solver_checks_one_euler_step_against_the_base(capsys):
    """One Heun step is not the base model (it evaluates the field twice), so the M = 1 conversion check uses Euler
    whatever --solver; the table shows the chosen solver."""
    from hf_ot.cli import main

    assert main(["check", "--ot-solver", "heun", "--ot-num-steps", "1", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["solver"] == "heun" and report["m1_equals_base"] is True
    assert report["m1_euler_max_abs_diff_vs_base"] <= 1e-5
    assert report["steps"]["1"]["max_abs_diff_vs_base"] > 1e-3  # Heun at M = 1 really differs from the base


# -- OT settings on the command line: the config's table (OT_SETTINGS) decides, with its message


CLI_VALUES = {
    "--ot-num-steps": ("ot_num_steps", ["1", "1024", "0", "5000", "1.5", "x"]),
    "--ot-terminal-time": ("ot_terminal_time", ["1.0", "1000", "0", "1001", "-1", "inf", "nan", "x"]),
    "--ot-lambda": ("ot_lambda", ["0", "1e6", "2e6", "-0.1", "nan"]),
    "--ot-solver": ("ot_solver", ["euler", "rk4", "heun_euler", "bosh3", "dopri5", "rk5", "RK4"]),
    "--ot-mode": ("ot_mode", ["residual", "paper", "plain"]),
}


@pytest.mark.parametrize("flag", sorted(CLI_VALUES))
def test_convert_options_refuse_exactly_what_the_config_refuses(flag, capsys):
    from hf_ot.cli import build_parser
    from hf_ot.models.ot_config import SETTING_OF_FIELD, check_ot_value

    field, texts = CLI_VALUES[flag]
    kind = SETTING_OF_FIELD[field].base_type
    for text in texts:
        try:
            value = kind(text) if kind in (int, float) else text
        except ValueError:
            value = text  # not a number: the config refuses the text
        try:
            check_ot_value(field, value)
            message = None
        except ValueError as err:
            message = str(err)
        if message is None:
            args = build_parser().parse_args(["convert", "base", "out", flag, text])
            assert getattr(args, field) == value  # (the flag is the field's name: --ot-num-steps, ot_num_steps)
        else:
            with pytest.raises(SystemExit) as exit_info:
                build_parser().parse_args(["convert", "base", "out", flag, text])
            assert exit_info.value.code == 2
            assert message.split(", got")[0] in capsys.readouterr().err  # the config's own message


def test_the_steps_and_solver_of_check_and_evaluate_take_the_config_bounds(capsys):
    from hf_ot.cli import build_parser

    args = build_parser().parse_args(["check", "--ot-solver", "dopri5", "--ot-num-steps", "1", "1024"])
    assert args.ot_num_steps == [1, 1024]
    for argv in (["check", "--ot-num-steps", "5000"], ["evaluate", "m", "--config", "c", "--ot-num-steps", "5000"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
        assert_names(capsys.readouterr().err, "ot_num_steps", "1 to 1024")


def test_convert_help_says_what_to_set_for_a_pretrained_checkpoint():
    from hf_ot.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["convert"]
    text = " ".join(sub.format_help().split())
    assert_names(text, "fine-tuning a pretrained checkpoint", "--ot-mode residual")
    assert "sst2_minilm_elastic" in text
    # the options the advice names exist
    for option in ("--ot-mode", "--ot-lambda", "--ot-num-steps"):
        assert option in sub._option_string_actions


def test_set_says_how_to_use_your_own_data_on_every_command_reading_a_recipe():
    from hf_ot.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name in ("evaluate", "calibrate", "robustness", "sweep"):
        text = " ".join(commands[name].format_help().split())
        assert "--set data.train_file=my.csv" in text, name


def test_a_data_file_given_as_the_recipe_says_how_to_train_on_it(capsys, tmp_path, monkeypatch):
    from hf_ot.cli import build_parser

    monkeypatch.chdir(tmp_path)
    for name in ("my.csv", "pairs.jsonl", "notes.txt.gz"):
        (tmp_path / name).write_text("text\n")
    for argv in (["train", "my.csv"], ["evaluate", "m", "--config", "pairs.jsonl"], ["sweep", "notes.txt.gz"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
        assert_names(capsys.readouterr().err, "not a recipe", f"--set data.train_file={argv[-1]}")
    assert build_parser().parse_args(["train", "my.yaml"]).config == "my.yaml"


def test_a_flag_is_spelt_whole(capsys, monkeypatch, tmp_path):
    # argparse took `train --out x` as --output-dir (a prefix): a flag of another command silently meant this one's
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(hf_ot.recipes, "run_recipe", lambda *a, **k: pytest.fail("--out was read as --output-dir"))
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "quickstart", "--out", "x"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert_names(err, "hf-ot train", "--output-dir", "not --out")


def test_robustness_into_a_folder_another_run_holds_is_refused(tmp_path, capsys):
    from conftest import held_by_another_process

    out = tmp_path / "r"
    with held_by_another_process(out) as pid:
        code = main(["robustness", "--models", "a=someone/model", "--config", "quickstart", "--out", str(out)])
        assert code == 2 and str(pid) in capsys.readouterr().err
        assert sorted(p.name for p in out.iterdir()) == [".hf_ot.lock"]


def test_summary_files_never_go_into_a_model_folder(tmp_path, capsys):
    # `hf-ot robustness --out RUN/model` wrote robustness.json into the model folder: a later save there refused it as
    # a file of the user's, and a push would upload it
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    code = main(["robustness", "--models", "a=someone/model", "--config", "quickstart", "--out", str(model)])
    assert code == 2 and "is a model folder" in capsys.readouterr().err
    assert [p.name for p in model.iterdir()] == ["config.json"]


def test_ot_flags_are_the_settings_table_s_names_in_every_command():
    from hf_ot.cli import build_parser
    from hf_ot.models.ot_config import SETTING_OF_FIELD

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, fields in (("convert", SETTING_OF_FIELD), ("evaluate", ["ot_num_steps", "ot_solver"])):
        for field in fields if name == "evaluate" else ["ot_num_steps", "ot_terminal_time", "ot_lambda", "ot_solver"]:
            action = commands[name]._option_string_actions[SETTING_OF_FIELD[field].flag]
            assert action.option_strings[0] == "--" + field.replace("_", "-") and action.dest == field
    assert commands["check"]._option_string_actions["--ot-num-steps"].dest == "ot_num_steps"


@pytest.mark.parametrize(
    "argv,field,value,new",
    [
        (["convert", "b", "o", "--num-steps", "3"], "ot_num_steps", 3, "--ot-num-steps"),
        (["convert", "b", "o", "--lambda", "3e-4"], "ot_lambda", 3e-4, "--ot-lambda"),
        (["convert", "b", "o", "--solver", "rk4"], "ot_solver", "rk4", "--ot-solver"),
        (["evaluate", "m", "--config", "q", "--steps", "2"], "ot_num_steps", 2, "--ot-num-steps"),
        (["check", "--steps", "1", "2"], "ot_num_steps", [1, 2], "--ot-num-steps"),
    ],
)
def test_earlier_ot_flags_still_work_with_a_warning_naming_the_new_one(argv, field, value, new, capsys):
    from hf_ot.cli import build_parser

    assert getattr(build_parser().parse_args(argv), field) == value
    err = capsys.readouterr().err
    assert "deprecated" in err and new in err
    flag = argv.index(next(a for a in argv if a.startswith("--") and a != "--config"))
    assert getattr(build_parser().parse_args([*argv[:flag], new, *argv[flag + 1 :]]), field) == value
    assert "deprecated" not in capsys.readouterr().err


@pytest.fixture
def torch_threads_restored():
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_threads_follow_the_flag_then_omp_num_threads_then_the_cores(monkeypatch, capsys, torch_threads_restored):
    import torch

    from hf_ot.env import choose_threads

    assert choose_threads(None, {}, cores=2)[0] == 1  # 2 cores: one thread (small models stall at two)
    assert choose_threads(None, {}, cores=16)[0] == 4 and choose_threads(None, {}, cores=128)[0] == 4
    assert choose_threads(None, {"OMP_NUM_THREADS": "3"}, cores=2) == (3, "OMP_NUM_THREADS")
    assert choose_threads(2, {"OMP_NUM_THREADS": "3"}, cores=16) == (2, "--threads")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    for argv, threads, why in ((["env"], 3, "OMP_NUM_THREADS"), (["env", "--threads", "2"], 2, "--threads")):
        assert main([*argv, "--json"]) == 0
        info = json.loads(capsys.readouterr().out)
        assert (
            (info["torch_threads"], info["torch_threads_chosen_by"]) == (threads, why) == (torch.get_num_threads(), why)
        )
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr("hf_ot.env.usable_cores", lambda: 2)
    assert main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["torch_threads"] == 1 and "2 usable cores" in info["torch_threads_chosen_by"]
    monkeypatch.setenv("OMP_NUM_THREADS", "two")
    assert main(["env"]) == 2  # named, not torch's silent fallback
    assert "OMP_NUM_THREADS" in capsys.readouterr().err


def test_evaluate_scores_the_whole_file_and_says_every_cap(tmp_path, capsys, caplog):
    """`hf-ot evaluate` of a translator on a 300-line file of one's own scores all 300 sentences (the recipe's
    evaluation.generate_samples=100 is training's validation cut); a cap set on its command line is said on the
    console and in the JSON (scored, of, cap)."""
    from conftest import set_flags as set_args
    from helpers import toy_overrides

    overrides = toy_overrides("translation_t5", tmp_path)
    assert main(["train", "translation_t5", "--output-dir", str(tmp_path / "run"), *set_args(overrides)]) == 0
    for side, text in (("source", "ein Satz"), ("target", "a sentence")):
        (tmp_path / f"mine.{side}").write_text("".join(f"{text} {i}\n" for i in range(300)))
    mine = [o for o in overrides if "generate_samples" not in o and not o.startswith("data.validation_")]
    mine += [f"data.validation_{side}={tmp_path / f'mine.{side}'}" for side in ("source", "target")]
    command = ["evaluate", str(tmp_path / "run" / "model"), "--config", "translation_t5", *set_args(mine), "--json"]
    capsys.readouterr()
    assert main(command) == 0
    whole = json.loads(capsys.readouterr().out)
    assert (whole["scored"], whole["of"], whole["runs"][0]["samples"]) == (300, 300, 300) and "cap" not in whole
    caplog.clear()
    assert main([*command, "--set", "evaluation.generate_samples=100"]) == 0
    capped = json.loads(capsys.readouterr().out)
    assert (capped["scored"], capped["of"], capped["cap"]) == (100, 300, "evaluation.generate_samples=100")
    assert capped["runs"][0]["samples"] == 100
    assert any("100 of 300" in r.getMessage() and "generate_samples" in r.getMessage() for r in caplog.records)


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads TOML")
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_check_of_an_ot_folder_in_residual_mode_asks_for_its_base(tmp_path, capsys):
    # a paper-mode folder is refused ("Give the base checkpoint a model was converted from"); a residual one (what
    # `hf-ot train sst2_minilm` saves, M=2) was loaded as the base, converted again and compared at M'=1 with
    # itself at M=2: "m1_equals_base": false, exit 1, as if the conversion were broken
    from conftest import make_base

    import hf_ot

    make_base("bert", "BertModel").save_pretrained(tmp_path / "base")
    hf_ot.save_model(hf_ot.convert(str(tmp_path / "base"), ot_num_steps=2), str(tmp_path / "ot"))
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


def test_ctrl_c_while_the_cli_imports_its_libraries_exits_130_without_a_traceback(tmp_path):
    # `timeout -s INT 1 hf-ot env`: a KeyboardInterrupt while `import hf_ot` imports torch printed a traceback
    # and exited 1 (the console script imports the module holding main before main can catch anything)
    target = pyproject()["project"]["scripts"]["hf-ot"]
    module, _, function = target.partition(":")
    fake = tmp_path / "torch"  # an interrupt that arrives while torch is imported, every time
    fake.mkdir()
    (fake / "__init__.py").write_text("raise KeyboardInterrupt\n")
    script = f"import sys\nfrom {module} import {function}\nsys.exit({function}())\n"  # what pip writes
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, "env"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert done.returncode == 130, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "interrupted" in done.stderr


def test_env_lists_what_training_and_evaluation_use(capsys):
    # hf-ot env listed torch, transformers, accelerate, peft, datasets, huggingface_hub, safetensors only: not the
    # metrics' sacrebleu, rouge-score, bert-score (nor the other extras)
    project = pyproject()["project"]
    # the test extra's tools, and the extras' alias
    tools = {"pytest", "pytest-xdist", "ruff", "mypy", "types-PyYAML", "hf-ot"}
    names = [
        requirement.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
        for requirement in [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]
    ]
    assert main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    for name in sorted(set(names) - tools):
        try:
            want = version(name)
        except PackageNotFoundError:
            want = "not installed"
        assert info.get(name) == want, name


def test_check_of_a_paper_mode_model_says_what_check_compares(run, capsys):
    assert main(["check", str(run / "model"), "--ot-num-steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "paper mode" in err and "Give the base checkpoint" in err and "ot_block_layer_norms" not in err


@pytest.mark.parametrize("text", ["no", "No", "NO", "yes", "on", "off", "y", "n", "tRue", "false"])
def test_a_text_key_keeps_what_yaml_11_reads_as_a_flag(text):
    assert parse_override("card.license", text) == text


@pytest.mark.parametrize(
    "text,value", [("true", True), ("True", True), ("yes", True), ("1", True), ("false", False), ("no", False)]
)
def test_a_flag_key_reads_true_and_false_as_hf_argument_parser_does(text, value):
    assert parse_override("training.push_to_hub", text) is value
    assert parse_override("data.streaming", text) is value


@pytest.mark.usefixtures("in_repo")
@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "some/model", "--config", "recipes/configs/quickstart.yaml", "--noise", "1.5"],
        ["evaluate", "some/model", "--config", "recipes/configs/quickstart.yaml", "--noise", "0.1", "-1"],
        ["robustness", "--models", "ot=some/model", "--config", "recipes/configs/quickstart.yaml", "--rates", "2"],
        ["robustness", "--models", "some/model", "--config", "recipes/configs/quickstart.yaml"],
        ["check", "--ot-num-steps", "0"],
        ["convert", "base", "out", "--ot-num-steps", "0"],
    ],
)
def test_bad_cli_values_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    # (convert's OT arguments are checked against the models' bounds: "must be an integer from 1 to 1024")
    assert any(m in err for m in ("between 0 and 1", "NAME=FOLDER", "not >= 1", "must be an integer from 1"))


@pytest.mark.usefixtures("in_repo")
def test_cli_unknown_key_is_a_usage_error_before_anything_runs(tmp_path, capsys):
    assert cli_train(tmp_path / "run", "--set", "data.blok_size=64") == 2
    assert "Unknown config key 'data.blok_size'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.usefixtures("in_repo")
def test_ctrl_c_in_any_command_is_a_message_not_a_traceback(monkeypatch, capsys):
    import hf_ot.recipes.evaluate

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(hf_ot.recipes.evaluate, "evaluate_folder", interrupted)
    assert main(["evaluate", "some/model", "--config", "quickstart"]) == 130
    assert "interrupted" in capsys.readouterr().err
