"""Every packaged recipe, at toy size on data written here, through every CLI command that takes a recipe:
`hf-ot train`, `hf-ot evaluate` of the saved model (clean and under token noise) for its task, `hf-ot calibrate`
(without and with --write), `hf-ot robustness` and `hf-ot sweep`, with their results read back as JSON. Needs no
../shared/data: each config's data paths are replaced by small files. (`hf-ot paper` runs two of these configs for
hours: its parts are these commands.)"""

import json

import pytest
from conftest import set_flags
from helpers import TEXT, TOY_SCRATCH_LM, assert_names, toy_overrides

from hf_ot.cli import main
from hf_ot.recipes.config import load_config, packaged_configs


def check_calibrate(config, model, overrides, tmp_path, capsys):
    """`hf-ot calibrate` on one validation batch: the grid (3 solvers x M' = 1 .. 2M) without --write leaves the
    folder as it is; with --write (on a copy) the choice goes into the copy's config, the trained setting kept, and
    the card gets the table and figure. A baseline (no OT) model is a usage error."""
    import shutil

    from hf_ot.calibration import CARD_BEGIN, CONFIG_KEY, FIGURE

    command = ["calibrate", str(model), "--config", config, *set_flags(overrides), "--max-batches", "1", "--json"]
    before = {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()}
    values = json.loads((model / "config.json").read_text())
    if not str(values.get("model_type", "")).startswith("ot_"):
        assert main(command) == 2
        assert "calibrate applies to hf_ot OT models" in capsys.readouterr().err
        return
    assert main(command) == 0
    result = json.loads(capsys.readouterr().out)
    steps = values["ot_num_steps"]
    assert result["task"] == load_config(config).task
    assert result["metric"] == ("accuracy" if result["task"] == "sequence-classification" else "loss")
    assert len(result["rows"]) == 3 * 2 * steps and result["choice"] in result["rows"]
    assert (result["trained"]["solver"], result["trained"]["num_steps"]) == (values["ot_solver"], steps)
    assert {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()} == before  # no --write: untouched

    copy = tmp_path / "calibrated"
    shutil.copytree(model, copy)
    command[1] = str(copy)
    admit_all = "0.99999" if result["metric"] == "accuracy" else "100"  # (an accuracy tolerance is a fraction, < 1)
    assert main([*command, "--tolerance", admit_all, "--write"]) == 0  # admits every setting: the cheapest is chosen
    written = json.loads(capsys.readouterr().out)
    assert (written["choice"]["solver"], written["choice"]["num_steps"]) == ("euler", 1)
    stored = json.loads((copy / "config.json").read_text())
    assert (stored["ot_num_steps"], stored["ot_solver"]) == (1, "euler")
    assert stored[CONFIG_KEY]["trained"]["ot_num_steps"] == steps
    assert (copy / FIGURE).is_file() and CARD_BEGIN in (copy / "README.md").read_text()
    assert {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()} == before  # the original as it was


@pytest.mark.parametrize("config", sorted(packaged_configs()))
def test_every_packaged_recipe_trains_and_evaluates_through_the_cli(config, tmp_path, capsys):
    overrides = toy_overrides(config, tmp_path)
    run = tmp_path / "run"
    assert main(["train", config, "--output-dir", str(run), *set_flags(overrides), "--json"]) == 0
    trained = json.loads(capsys.readouterr().out)
    task = load_config(config).task
    assert ("accuracy" in trained) if task == "sequence-classification" else ("bleu" in trained)

    assert (
        main(["evaluate", str(run / "model"), "--config", config, *set_flags(overrides), "--noise", "0.5", "--json"])
        == 0
    )
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["task"] == task and [r["noise_rate"] for r in evaluated["runs"]] == [0.0, 0.5]
    clean, noisy = evaluated["runs"]
    key = {"causal-lm": "loss", "sequence-classification": "accuracy", "translation": "bleu"}[task]
    assert key in clean and noisy["drop"][key] == pytest.approx(noisy[key] - clean[key])
    if task == "sequence-classification":  # the same sentences as after training, the same model: the same accuracy
        assert clean["accuracy"] == pytest.approx(trained["accuracy"])
    if task == "causal-lm":
        assert clean["loss"] == pytest.approx(trained["loss"], rel=1e-5)

    check_calibrate(config, run / "model", overrides, tmp_path, capsys)

    out = tmp_path / "robustness"
    assert (
        main(
            [
                "robustness",
                "--models",
                f"toy={run / 'model'}",
                "--config",
                config,
                *set_flags(overrides),
                "--rates",
                "0.5",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    table = json.loads(capsys.readouterr().out)
    assert [r["noise_rate"] for r in table["toy"]] == [0.0, 0.5] and key in table["toy"][1]
    assert (out / "robustness.png").is_file()

    out = tmp_path / "sweep"
    assert (
        main(
            [
                "sweep",
                config,
                "--param",
                "training.learning_rate",
                "--values",
                "0.001",
                *set_flags(overrides),
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["metric"] == key and list(summary[key]) == ["0.001"]
    assert (out / "sweep.png").is_file() and (out / "curves.png").is_file()


@pytest.mark.slow
def test_paper_runs_its_recipes_noise_test_and_sweeps_through_the_cli(tmp_path, capsys):
    """`hf-ot paper` at toy size: the OT and baseline Shakespeare-char recipes, the noise test on both, the lambda and
    M sweeps, and the markdown report of their tables."""
    (tmp_path / "text.txt").write_text(TEXT)
    tiny = [
        "training.max_steps=2",
        "training.per_device_train_batch_size=2",
        "evaluation.batch_size=2",
        "evaluation.metrics=[bleu]",
        *TOY_SCRATCH_LM,
        "data.block_size=16",
        "data.max_eval_blocks=4",
        f"data.train_file={tmp_path / 'text.txt'}",
    ]
    out = tmp_path / "paper"
    assert main(["paper", "--seeds", "1", "--out", str(out), *set_flags(tiny), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["summary"]) == {"ot", "baseline"} and set(report["sweeps"]) == {"lambda", "num_steps"}
    assert [r["noise_rate"] for r in report["robustness"]["ot"]] == [0.0, 0.05, 0.1, 0.2]
    assert "| model | parameters |" in (out / "results.md").read_text()


def test_perplexity_is_exp_of_the_mean_token_loss_and_evaluate_takes_the_runs_block_size(tmp_path, capsys):
    """`perplexity` is exp(mean token NLL) (run_clm, lm-evaluation-harness) in results.json and in `hf-ot evaluate`;
    the paper's mean over sequences of exp(loss) keeps its own name. `hf-ot evaluate` without data.block_size
    evaluates at the run's block size (clamped to the model's positions); a block longer than the positions when
    told is a usage error, not an IndexError."""
    import math

    overrides = toy_overrides("quickstart", tmp_path)
    run = tmp_path / "run"
    assert main(["train", "quickstart", "--output-dir", str(run), *set_flags(overrides), "--json"]) == 0
    trained = json.loads(capsys.readouterr().out)
    assert trained["perplexity"] == pytest.approx(math.exp(trained["loss"]), rel=1e-6)
    assert trained["perplexity_per_sequence_mean"] >= trained["perplexity"] * (1 - 1e-6)  # Jensen
    assert trained["block_size"] == 16
    card = (run / "model" / "README.md").read_text()
    assert "Perplexity (task loss)" not in card

    untold = [o for o in overrides if not o.startswith("data.block_size=")]  # the recipe says 128 > 32 positions
    assert main(["evaluate", str(run / "model"), "--config", "quickstart", *set_flags(untold), "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["block_size"] == 16  # the run's
    clean = evaluated["runs"][0]
    assert clean["loss"] == pytest.approx(trained["loss"], rel=1e-5)
    assert clean["perplexity"] == pytest.approx(math.exp(clean["loss"]), rel=1e-6)

    told = [*untold, "data.block_size=64"]
    assert main(["evaluate", str(run / "model"), "--config", "quickstart", *set_flags(told), "--json"]) == 2
    assert_names(capsys.readouterr().err, "data.block_size=64", "32 positions")


def test_pipeline_task_names_are_recipe_task_aliases():
    from hf_ot.errors import UsageError

    for alias, task in [
        ("text-generation", "causal-lm"),
        ("text-classification", "sequence-classification"),
        ("sentiment-analysis", "sequence-classification"),
        ("summarization", "translation"),
    ]:
        assert load_config("quickstart", [f"task={alias}"]).task == task
    with pytest.raises(UsageError, match="no recipe yet.*masked-lm"):
        load_config("quickstart", ["task=fill-mask"])


def test_convert_takes_pipeline_task_names():
    from conftest import make_base

    import hf_ot

    model = hf_ot.convert(make_base("bert", "BertForMaskedLM"), task="text-classification", num_labels=3)
    assert type(model).__name__ == "OTBertForSequenceClassification"
    assert type(hf_ot.convert(make_base("bert", "BertModel"), task="fill-mask")).__name__ == "OTBertForMaskedLM"


OUTSIDE = """
import json, sys
from hf_ot.cli import main
config, out, alias = sys.argv[1], sys.argv[2], sys.argv[3]
overrides = json.loads(sys.argv[4])
sets = sum((["--set", s] for s in overrides), [])
assert main(["train", config, "--output-dir", out + "/run", *sets, "--set", "task=" + alias]) == 0
assert main(["evaluate", out + "/run/model", "--config", config, *sets, "--noise", "0.5"]) == 0
assert main(["robustness", "--models", "toy=" + out + "/run/model", "--config", config, *sets, "--rates", "0.5",
             "--out", out + "/robustness"]) == 0
print("ALL-OK")
"""


@pytest.mark.parametrize("config,alias", [("sst2_minilm", "text-classification"), ("translation_t5", "translation")])
def test_classification_and_translation_through_evaluate_and_robustness_from_outside_the_checkout(
    config, alias, tmp_path
):
    """In a fresh interpreter whose folder and import path are outside the checkout (what a pip-installed user has),
    a model trained with the pipeline task name goes through `evaluate` and `robustness`."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import hf_ot

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    overrides = toy_overrides(config, tmp_path)
    repo = str(Path(hf_ot.__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    code = f"import sys; sys.path = [p for p in sys.path if p not in ('', '.', {repo!r})]\n" + OUTSIDE
    proc = subprocess.run(
        [sys.executable, "-c", code, config, str(outside), alias, json.dumps(overrides)],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "ALL-OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert json.loads((outside / "run" / "results.json").read_text())["task"] == load_config(config).task
    assert (outside / "robustness" / "robustness.png").is_file()


def test_help_lists_the_pipeline_task_names(capsys):
    for command in ("train", "convert"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "text-classification" in text and "text-generation" in text and "summarization" in text
