"""experiments/pretrained_elastic's ingest of a recipe run folder: a run of the packaged recipe is recognised as
shipped (its seed apart), any other setting is named, the grid is read in accuracy points from results.json, and the
report applies the recipe's own 0.5-point rule."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from helpers import assert_names

from hf_ot.recipes import load_config

HERE = Path(__file__).resolve().parents[1] / "experiments" / "pretrained_elastic"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"pe_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run_py():
    return _module("run")


def _row(solver, steps, metric, within=True):
    stages = {"euler": 1, "heun": 2, "rk4": 4}[solver]
    return dict(
        solver=solver,
        num_steps=steps,
        field_evaluations=stages * steps,
        metric=metric,
        seconds_per_batch=0.1,
        within_tolerance=within,
        decoder_num_steps=None,
    )


def _folder(tmp_path, overrides):
    """A finished run folder as hf-ot train leaves it: results.json with the grid, trainer/hf_ot_run.json."""
    folder = tmp_path / "run"
    (folder / "trainer").mkdir(parents=True)
    settings = load_config("sst2_minilm_elastic", [f"output_dir={folder}", *overrides]).to_dict()
    (folder / "trainer" / "hf_ot_run.json").write_text(json.dumps({"settings": settings, "data": {}}))
    trained = _row("euler", 4, 0.834)
    rows = [_row("euler", 1, 0.799, False), _row("heun", 1, 0.830), _row("euler", 4, 0.834)]
    elasticity = dict(
        metric="accuracy", tolerance=0.005, trained=trained, choice=rows[1], cheaper=True, message="m", rows=rows
    )
    results = dict(task="sequence-classification", accuracy=0.8345, train_runtime_s=60.0, elasticity=elasticity)
    (folder / "results.json").write_text(json.dumps(results))
    return folder


def test_a_shipped_run_is_read_in_points_with_its_seed(run_py, tmp_path):
    record = run_py.ingest(_folder(tmp_path, ["training.seed=2"]))
    assert record["seed"] == 2 and record["as_shipped"] and record["overrides"] == {}
    assert record["trained"] == {"key": "euler:4", "field_evaluations": 4, "accuracy": pytest.approx(83.4)}
    assert record["grid"] == pytest.approx({"euler:1": 79.9, "heun:1": 83.0, "euler:4": 83.4})
    assert record["accuracy"] == pytest.approx(83.45) and record["choice"] == "heun:1"


def test_the_default_seed_and_a_changed_setting(run_py, tmp_path):
    record = run_py.ingest(_folder(tmp_path, ["training.max_steps=2"]))
    assert record["seed"] == 1337  # not set: the recipes' default
    assert not record["as_shipped"] and record["overrides"] == {"training.max_steps": [2, 200]}


def test_a_folder_without_its_run_record_is_refused(run_py, tmp_path):
    folder = _folder(tmp_path, [])
    (folder / "trainer" / "hf_ot_run.json").unlink()
    with pytest.raises(SystemExit, match="hf_ot_run.json"):
        run_py.ingest(folder)


def test_the_report_uses_the_half_point_rule():
    report = _module("report")
    assert report.within(84.0, 84.5) and not report.within(83.9, 84.5)
    shipped = [
        dict(seed=s, as_shipped=True, grid=g, trained=dict(key="euler:4", field_evaluations=4, accuracy=g["euler:4"]))
        for s, g in ((1, {"euler:4": 84.0, "heun:1": 83.0}), (2, {"euler:4": 85.0, "heun:1": 85.0}))
    ]
    for r in shipped:
        r.update(folder="f", finished="d", train_runtime_s=60.0, accuracy=r["grid"]["euler:4"], choice="euler:4")
    text = report.recipe_section(shipped)
    row = next(line for line in text.splitlines() if line.startswith("| heun M'=1 |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells == ["heun M'=1", "2", "83.0", "85.0", "84.0 ± 1.4", "yes", "no, yes"]
    assert_names(text, "heun M'=1 84.0", "-0.5", "trained 84.5", "within 0.5 points")
