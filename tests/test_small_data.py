"""experiments.small_data: the slices (training, selection and report sets disjoint), equal tuning budgets, report
seeds of the configuration with the best selection accuracy once its family's selection has finished."""

from __future__ import annotations

import json

import pytest

from experiments import small_data
from experiments.small_data import jobs


def test_training_slices_are_nested_and_disjoint_from_the_selection_slice_also_by_text():
    # a pool whose duplicates straddle the cut: "s3" and "s7" come back among the training rows
    pool = [f"s{i}" for i in range(10)] + ["s3", "s7"] + [f"t{i}" for i in range(20)]
    cut = jobs.slices(pool, select=8, sizes=(4, 12))
    select_text = {pool[i] for i in cut["select"]}
    assert len(cut["select"]) == len(select_text) == 8
    for n in (4, 12):
        rows = cut[f"train{n}"]
        assert len(rows) == len({pool[i] for i in rows}) == n and not select_text & {pool[i] for i in rows}
    assert cut["train12"][:4] == cut["train4"]
    with pytest.raises(ValueError, match="distinct"):
        jobs.slices(pool, select=8, sizes=(40,))


def test_the_study_data_selection_training_and_report_sets_are_disjoint():
    from experiments.small_data import train

    d = train.data(train.recipe_tokenizer())
    assert {k: len(v[0]) for k, v in d.items()} == {"select": 512, "train256": 256, "train2048": 2048, "report": 872}
    rows = {k: {tuple(r) for r in v[0]} for k, v in d.items()}
    assert len(rows["select"]) == 512 and not rows["select"] & rows["train2048"]
    assert rows["train256"] <= rows["train2048"] and not rows["report"] & (rows["select"] | rows["train2048"])


def test_equal_tuning_budgets():
    listed = small_data.build_jobs(None)
    assert {j.n for j in listed} == {n for n in jobs.SIZES if jobs.TUNED_AT[n] == n}  # nothing selected yet
    for n in {j.n for j in listed}:
        select = [j for j in listed if j.n == n]
        plain = [j for j in select if j.family == "plain"]
        assert len(plain) == len(select) - len(plain) == 4 and all(j.seed == jobs.SELECT_SEED for j in select)
        assert {j.steps for j in plain} == {1} and all(j.lam == 0 for j in plain)


def test_report_seeds_of_the_best_selection_accuracy_join_when_its_family_finished(tmp_path):
    sel = jobs.selection(256)
    for i, job in enumerate(sel["ot"]):  # the third configuration is best; the first ties on accuracy, higher loss
        best = {"select_acc": 90.0 if i in (0, 2) else 80.0, "select_loss": 0.3 if i == 2 else 0.4}
        (tmp_path / f"{job.id}.json").write_text(json.dumps({"best": best}))
    report = [j for j in small_data.build_jobs(tmp_path) if j.seed != jobs.SELECT_SEED]
    chosen = sel["ot"][2]
    assert sorted(j.seed for j in report) == [2, 3]
    assert all((j.n, j.family, j.config) == (256, "ot", chosen.config) for j in report)


def test_a_size_tuned_on_another_runs_both_families_choices_once_both_are_known(tmp_path, monkeypatch):
    monkeypatch.setitem(jobs.TUNED_AT, 2048, 256)  # N = 2,048 takes N = 256's choices (the study tunes each N)
    sel = jobs.selection(256)
    for job in sel["plain"][1:] + sel["ot"]:  # the plain selection unfinished: no N = 2,048 run yet
        best = {"select_acc": 90.0 if job in (sel["plain"][3], sel["ot"][0]) else 80.0, "select_loss": 0.3}
        (tmp_path / f"{job.id}.json").write_text(json.dumps({"best": best}))
    assert not [j for j in small_data.build_jobs(tmp_path) if j.n == 2048]
    (tmp_path / f"{sel['plain'][0].id}.json").write_text(json.dumps({"best": {"select_acc": 70.0, "select_loss": 1}}))
    big = [j for j in small_data.build_jobs(tmp_path) if j.n == 2048]
    assert [(j.family, j.config, j.seed) for j in big] == [
        (family, chosen.config, seed)
        for seed in jobs.SEEDS
        for family, chosen in (("plain", sel["plain"][3]), ("ot", sel["ot"][0]))
    ]
