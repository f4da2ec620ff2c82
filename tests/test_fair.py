"""experiments.fair: the job list (equal tuning budgets, report seeds once a family's selection has finished),
the FLOPs count, the entry point's imports."""

from __future__ import annotations

import json

import pytest

from experiments import fair
from experiments.fair import flops, jobs


def test_equal_tuning_budgets_and_disjoint_splits():
    listed = fair.build_jobs()
    select = [j for j in listed if j.groups == ["select"]]
    base = [j for j in select if j.model == "baseline"]
    assert len(base) == len(select) - len(base) == 4 and all(j.seed == 1 for j in select)
    assert not [j for j in listed if j.groups in (["report"], ["long"])]  # nothing selected yet
    assert fair.SETTINGS["curve_blocks"] <= fair.SETTINGS["report_offset"]


def test_report_seeds_of_the_lowest_selection_loss_join_when_its_family_finished(tmp_path):
    (tmp_path / "raw").mkdir()
    sel = jobs.selection()
    for i, job in enumerate(sel["baseline"]):  # the third configuration is best
        loss = 2.0 if i == 2 else 3.0
        (tmp_path / "raw" / f"{job.id}.json").write_text(json.dumps({"result": {"best_curve_val_loss": loss}}))
    listed = {j.id: j for j in fair.build_jobs(tmp_path)}
    best = sel["baseline"][2]
    report = [j for j in listed.values() if j.groups == ["report"]]
    assert sorted(j.seed for j in report) == [2, 3] and all(j.extra == best.extra for j in report)
    assert all(j.settings == best.settings for j in report) and not [j for j in listed if j.startswith("long_")]


def test_analytic_flops_scale_with_block_applications():
    one, five = (flops.analytic(3, 112, 3 * m, 65, 512) for m in (1, 5))
    head = 2 * 112 * 65
    assert five["forward_per_token"] - head == 5 * (one["forward_per_token"] - head)
    assert one["train_per_step"] == 3 * 512 * one["forward_per_token"]


def test_the_selected_ot_configuration_is_calibrated_with_every_seed_and_only_filters_groups(tmp_path):
    (tmp_path / "raw").mkdir()
    sel = jobs.selection()
    for i, job in enumerate(sel["ot"]):  # the last configuration (lambda 1, M = 2) is best
        loss = 2.0 if i == 3 else 3.0
        (tmp_path / "raw" / f"{job.id}.json").write_text(json.dumps({"result": {"best_curve_val_loss": loss}}))
    infer = fair.build_jobs(tmp_path, only=("infer",))
    best = sel["ot"][3]
    assert sorted(j.seed for j in infer) == [1, 2, 3] and all(j.groups == ["infer"] for j in infer)
    assert all((j.lam, j.num_steps, j.extra) == (best.lam, best.num_steps, best.extra) for j in infer)
    assert all(j.settings["calibrate"] == 1 for j in infer)
    assert {j.id for j in fair.build_jobs(tmp_path, only=("select",))} == {j.id for v in sel.values() for j in v}


def test_the_inference_table_pairs_each_setting_with_its_cost_and_the_baselines_loss():
    """report.inference against hand-computed figures: forward FLOPs per token of GPT-2 blocks (24 d^2 + 4 T d per
    block application, 2 d V for the head; T = 64, V = 65) and the mean report loss over seeds."""
    from experiments.fair import report

    def record(job_id, seed, groups, model, result):
        return {
            "job": {"id": job_id, "seed": seed, "groups": groups},
            "settings": {"final_blocks": 256},
            "result": {"config": {"model": model}, **result},
        }

    ot_model = {
        "scratch": {"n_layer": 3, "n_embd": 112},
        "ot": {"ot_num_steps": 2, "ot_mode": "paper", "ot_block_layer_norms": False, "ot_lambda": 1.0},
    }
    base_model = {"scratch": {"n_layer": 4, "n_embd": 128, "resid_pdrop": 0.2}}

    def calibration(loss_at_1):
        rows = [
            {"solver": "euler", "num_steps": m, "field_evaluations": m, "select_loss": 2.5, "report_loss": loss}
            for m, loss in ((1, loss_at_1), (2, 2.6))
        ]
        trained = {"solver": "euler", "num_steps": 2, "field_evaluations": 2}
        return {"calibration": {"tolerance": 0.01, "trained": trained, "choice": trained, "rows": rows}}

    records = [
        record("cal_ot_s1", 1, ["infer"], ot_model, calibration(2.7)),
        record("cal_ot_s2", 2, ["infer"], ot_model, calibration(2.9)),
        record("base_s1", 1, ["report"], base_model, {"best": {"loss": 2.65}}),
        record("base_s2", 2, ["report"], base_model, {"best": {"loss": 2.75}}),
    ]
    summary = {"selected": {"baseline": {"id": "base", "seeds": [1, 2], "label": "baseline"}}}
    inf = report.inference(records, summary)
    one, two = inf["rows"]
    assert (one["num_steps"], two["num_steps"]) == (1, 2)
    assert one["mflop_per_token"] * 1e6 == 3 * (24 * 112**2 + 4 * 64 * 112) + 2 * 112 * 65  # 1,003,744
    assert inf["baseline"]["mflop_per_token"] * 1e6 == 4 * (24 * 128**2 + 4 * 64 * 128) + 2 * 128 * 65
    assert one["report"]["mean"] == pytest.approx(2.8) and inf["baseline"]["report"]["mean"] == pytest.approx(2.7)
    table = report.inference_table(inf)
    assert "| +0.100 |" in table and "tolerance 0.01" in table and "256 blocks" in table
