"""`hf-ot sweep`: grid points, seeds, and their run folders."""

import json

import pytest
from conftest import set_flags, snapshot, tiny_run
from helpers import QUIET_LM, assert_names, quick_cfg, raises_naming

from hf_ot import OTDeprecationWarning
from hf_ot.cli import main
from hf_ot.errors import UsageError


@pytest.mark.slow
def test_a_sweep_into_a_folder_another_run_holds_is_refused(tmp_path, capsys):
    # `hf-ot sweep ... --out r1` while another hf-ot process held r1's lock (`hf-ot train` refuses: "is in use by
    # another hf-ot run (pid ...)"): rc 0, its sweep.json, .hf_ot_outputs.json and run folder written beside the
    # other run's files (two sweeps into one --out write the same sweep.json)
    from conftest import held_by_another_process

    out = tmp_path / "r1"
    with held_by_another_process(out) as pid:
        flags = set_flags(tiny_run("training.save_strategy=no", max_steps=1))
        code = main(
            ["sweep", "quickstart", "--param", "model.ot.ot_lambda", "--values", "0", "--out", str(out), *flags]
        )
        assert code == 2 and not (out / "sweep.json").exists()
        assert str(pid) in capsys.readouterr().err


def test_a_sweeps_refusal_of_earlier_runs_names_its_own_flags(tmp_path):
    # hf-ot sweep quickstart --param model.ot.ot_lambda --values 0 1 --out sw twice: "sw/ot_lambda=0_seed1 holds
    # a model (ot_gpt2). Choose another output_dir, pass --overwrite to replace it, or --resume to continue from its
    # last checkpoint." sweep (and paper) have --out and --overwrite, no --resume and no output_dir
    import json

    from hf_ot.recipes.sweep import sweep

    (tmp_path / "sw" / "ot_lambda=0_seed1").mkdir(parents=True)
    (tmp_path / "sw" / "ot_lambda=0_seed1" / "results.json").write_text(json.dumps({"hf_ot_result": 1}))
    with pytest.raises(UsageError, match="already holds") as err:
        sweep("quickstart", "model.ot.ot_lambda", [0], out_dir=str(tmp_path / "sw"), check_only=True)
    assert "--resume" not in str(err.value) and "--out" in str(err.value) and "--overwrite" in str(err.value)


@pytest.mark.slow
def test_sweep_and_robustness_commands_write_json_and_plots(tmp_path):
    from hf_ot.cli import main

    tiny = [
        "--set",
        "training.max_steps=2",
        "--set",
        "data.block_size=32",
        "--set",
        "data.max_eval_blocks=4",
        "--set",
        "model.scratch.n_embd=32",
        "--set",
        "model.scratch.n_layer=1",
        "--set",
        "model.scratch.n_positions=32",
        "--set",
        "evaluation.metrics=[]",
    ]
    assert (
        main(
            [
                "sweep",
                "recipes/configs/quickstart.yaml",
                "--param",
                "model.ot.ot_num_steps",
                "--values",
                "1",
                "2",
                "--out",
                str(tmp_path / "sweep"),
                *tiny,
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "sweep" / "sweep.json").read_text())["summary"]
    assert set(summary["loss"]) == {"1", "2"}
    for png in ("sweep.png", "curves.png"):
        assert (tmp_path / "sweep" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    models = [f"m{v}={tmp_path / 'sweep' / f'ot_num_steps={v}_seed1' / 'model'}" for v in (1, 2)]
    rob = ["--rates", "0.1", *tiny, "--out", str(tmp_path / "rob")]
    assert main(["robustness", "--models", *models, "--config", "recipes/configs/quickstart.yaml", *rob]) == 0
    table = json.loads((tmp_path / "rob" / "robustness.json").read_text())
    # the table the command wrote is the one its record lists: a second run may replace it (the command rewrote it
    # after recording it, so the next run refused it as a file of the user's)
    assert main(["robustness", "--models", models[0], "--config", "quickstart", "--rates", "0.1"] + rob[-2:]) == 0
    assert set(json.loads((tmp_path / "rob" / "robustness.json").read_text())) == {"m1"}
    # a sweep writes its summary into sweep.json only: no file beside it that it replaces unchecked
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_file()) == [
        ".hf_ot_outputs.json",
        "curves.png",
        "sweep.json",
        "sweep.png",
    ]
    assert set(table) == {"m1", "m2"}
    for runs in table.values():
        assert [r["noise_rate"] for r in runs] == [0.0, 0.1]
        assert runs[1]["drop"]["loss"] == pytest.approx(runs[1]["loss"] - runs[0]["loss"])
    assert (tmp_path / "rob" / "robustness.png").is_file()


def test_paper_checks_its_sweeps_run_folders_before_its_first_run(tmp_path, monkeypatch):
    """A sweep's run folder holding an earlier run is named before the OT and baseline runs start, not hours later."""
    import hf_ot.recipes.sweep as sweep_module
    from hf_ot.errors import UsageError
    from hf_ot.recipes.paper import paper

    def no_run(*args, **kwargs):
        raise AssertionError("no run may start while a folder of a later one is refused")

    monkeypatch.setattr(sweep_module, "run_recipe", no_run)
    earlier = tmp_path / "paper" / "sweep_steps" / "ot_num_steps=2_seed1"
    earlier.mkdir(parents=True)
    (earlier / "results.json").write_text(json.dumps({"hf_ot_result": 1}))
    with pytest.raises(UsageError, match="ot_num_steps=2_seed1"):
        paper(tmp_path / "paper", seeds=(1,), lambdas=(0.1,), steps=(1, 2))
    assert not (tmp_path / "paper" / "ot").exists()  # nothing started


@pytest.mark.usefixtures("in_repo")
def test_sweeps_use_the_same_checked_parser(tmp_path):
    from hf_ot.recipes.sweep import set_key

    cfg = quick_cfg(tmp_path / "run")
    assert set_key(cfg, "model.ot.ot_num_steps", 3).model.ot["ot_num_steps"] == 3
    with pytest.warns(OTDeprecationWarning, match="model.ot.ot_num_steps"):
        assert set_key(cfg, "model.ot.num_steps", 3).model.ot["ot_num_steps"] == 3  # an earlier spelling: warned about
    with raises_naming(ValueError, "unknown", "'model.ot.ot_num_step'"):
        set_key(cfg, "model.ot.ot_num_step", 3)


@pytest.mark.usefixtures("in_repo")
def test_sweep_checks_every_value_before_the_first_run(tmp_path, capsys):
    args = [
        "sweep",
        "recipes/configs/quickstart.yaml",
        "--param",
        "data.block_size",
        "--values",
        "32",
        "big",
        "--out",
        str(tmp_path / "sweep"),
        *set_flags(QUIET_LM),
    ]
    assert main(args) == 2
    assert_names(capsys.readouterr().err, "data.block_size", "int", "'big'")
    assert not list((tmp_path / "sweep").glob("*"))  # no run was started


@pytest.mark.usefixtures("in_repo")
def test_a_second_sweep_into_the_same_folder_needs_overwrite(tmp_path, capsys):
    args = [
        "sweep",
        "recipes/configs/quickstart.yaml",
        "--param",
        "model.ot.ot_num_steps",
        "--values",
        "1",
        "--out",
        str(tmp_path / "sweep"),
        *set_flags(QUIET_LM),
    ]
    assert main(args) == 0
    before = snapshot(tmp_path / "sweep" / "num_steps=1_seed1")
    assert main(args) == 2  # the earlier run's model is not replaced silently
    assert "--overwrite" in capsys.readouterr().err
    assert snapshot(tmp_path / "sweep" / "num_steps=1_seed1") == before
    assert main([*args, "--overwrite"]) == 0
