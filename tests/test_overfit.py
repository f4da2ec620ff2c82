"""experiments.overfit at toy scale: one 2-step OT run through the runner (raw JSON written, a rerun skips it, the
report reads it), the curve's loss against hf_ot.metrics' teacher-forced loss, and the shared data order."""

from __future__ import annotations

import json

import pytest
import torch

from experiments import overfit

TINY = {
    "train_blocks": 4,
    "steps": 2,
    "batch": 2,
    "warmup": 1,
    "eval_every": 1,
    "curve_blocks": 2,
    "curve_train_blocks": 2,
    "final_blocks": 2,
    "eval_batch": 2,
}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("overfit")
    text = tmp / "text.txt"
    text.write_text("To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. " * 40)
    job = overfit.Job("ot_lam1_M5_s1", "ot", 1.0, 5, 1, ["core"])
    record = overfit.run_job(job, tmp, TINY, str(text))
    return tmp, text, job, record


def test_run_writes_raw_record_and_rerun_skips(toy, monkeypatch):
    tmp, text, job, record = toy
    saved = json.loads((tmp / "raw" / f"{job.id}.json").read_text())
    res = saved["result"]
    assert [p["step"] for p in res["curve"]] == [0, 1, 2]
    assert res["train_blocks"] == 4 and res["final"]["blocks"] == 2
    assert res["best_curve_val_loss"] == min(p["val_loss"] for p in res["curve"])
    assert set(res["final"]["noise"]) == {"0.05", "0.1", "0.2"}
    ot = res["config"]["model"]["ot"]
    assert ot["ot_num_steps"] == 5 and ot["ot_block_layer_norms"] is False

    def fail(*args, **kwargs):
        raise AssertionError("a finished job ran again")

    monkeypatch.setattr(overfit.workers, "run_job", fail)
    overfit.work([job], tmp, TINY, str(text))


def test_report_reads_raw(toy, tmp_path):
    tmp = toy[0]
    text = overfit.report(tmp, docs=tmp_path)
    row = next(line for line in text.splitlines() if line.startswith("| OT 3x112, M=5, lambda=1 |"))
    assert "(n=1)" in row and "baseline" not in text  # one seed of one model: no other rows
    assert (tmp_path / "overfit.json").exists() and (tmp_path / "figures" / "overfit_curves.png").exists()


def test_curve_loss_matches_teacher_forced_metric():
    """mean_loss (the curve) and hf_ot.metrics.teacher_forced_lm (the reported loss) are the same mean token NLL."""
    from datasets import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_ot.recipes.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer("abcdefgh ")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_layer=1, n_embd=16, n_head=2, n_positions=16))
    ids = torch.randint(2, len(tok), (5, 12))
    from hf_ot.metrics import teacher_forced_lm

    reference = teacher_forced_lm(model, Dataset.from_dict({"input_ids": ids.tolist()}), tok, 2, progress=False).loss
    assert overfit.mean_loss(model, ids, 2) == pytest.approx(reference, rel=1e-5)


def test_data_order_is_the_seeds_shuffled_epochs():
    a = overfit.data_order(6, 5, 2, seed=3)
    assert torch.equal(a, overfit.data_order(6, 5, 2, seed=3))
    assert not torch.equal(a, overfit.data_order(6, 5, 2, seed=4))
    flat = a.flatten()
    assert sorted(flat[:6].tolist()) == list(range(6))  # every block once per epoch


def test_jobs_core_first_then_sensitivity():
    jobs = overfit.build_jobs()
    core = [j for j in jobs if "core" in j.groups]
    assert jobs[: len(core)] == core and len(core) == 12
    shared = [j for j in jobs if len(j.groups) > 1]
    assert [j.id for j in shared] == ["ot_lam1_M5_s1"] and set(shared[0].groups) == {"core", "lambda", "steps"}
    one_pass, long = jobs[18:21], jobs[21:]
    assert all(j.groups == ["one_pass"] and j.model == "ot_matched" and j.num_steps == 1 for j in one_pass)
    assert len(long) == 15 and all(
        j.groups == ["long"] and j.settings["steps"] == 2 * overfit.SETTINGS["steps"] for j in long
    )


def test_early_stopping_and_a_report_split_disjoint_from_selection(toy, tmp_path):
    """patience ends a run after that many curve points without a new best (lr 0: none ever); the final evaluation
    reads the blocks from report_offset on, and each curve point also scores the report blocks."""
    text = toy[1]
    settings = {**TINY, "steps": 6, "lr": 0.0, "patience": 1, "report_offset": 2, "report_curve_blocks": 1}
    settings.update(final_blocks=1, noise=0)
    record = overfit.run_job(overfit.Job("b_s1", "baseline", 0.0, 0, 1), tmp_path, settings, str(text))
    res = record["result"]
    assert res["steps_run"] == 1 and [p["step"] for p in res["curve"]] == [0, 1]
    assert res["final"]["blocks"] == 1 and res["final"]["noise"] == {} and "report_loss" in res["curve"][0]


def test_baseline_without_layernorms_loses_exactly_their_parameters(toy, tmp_path):
    settings = {**TINY, "steps": 1, "noise": 0}
    sizes = [
        overfit.run_job(overfit.Job(f"{m}_s1", m, 0.0, 0, 1), tmp_path, settings, str(toy[1]))["result"]["parameters"]
        for m in ("baseline", "baseline_noln")
    ]
    assert sizes[0] - sizes[1] == (2 * 4 + 1) * 2 * 128  # ln_1, ln_2 of 4 blocks and ln_f: weight and bias of 128


def test_overlapping_selection_and_report_blocks_refused(toy):
    settings = {**overfit.SETTINGS, **TINY, "curve_blocks": 3, "report_offset": 2}
    with pytest.raises(ValueError, match="report_offset"):
        overfit.train_and_evaluate(overfit.Job("b", "baseline", 0.0, 0, 1), settings, str(toy[1]))


def test_a_later_training_window_trains_on_its_own_blocks(toy, tmp_path):
    """train_start moves the training subset: the step-0 train curve scores blocks 2-3, as an independent model of
    the same seed and shape does on those blocks, not blocks 0-1."""
    from experiments.overfit.train import recipe
    from hf_ot.recipes import build_model, causal_lm_datasets

    text = toy[1]
    settings = {**overfit.SETTINGS, **TINY, "steps": 1, "noise": 0, "train_start": 2, "train_blocks": 2}
    job = overfit.Job("b_s1", "baseline", 0.0, 0, 1)
    res = overfit.run_job(job, tmp_path, settings, str(text))["result"]
    cfg = recipe(job, {**settings, "train_start": 0, "train_blocks": 4}, str(text))
    tokenizer, train, _ = causal_lm_datasets(cfg)
    torch.manual_seed(job.seed)
    model = build_model(cfg.model, cfg.task, tokenizer)
    blocks = torch.tensor(train["input_ids"], dtype=torch.long)
    assert res["train_blocks"] == 2
    assert res["curve"][0]["train_eval_loss"] == pytest.approx(overfit.mean_loss(model, blocks[2:4], 2), rel=1e-6)
    assert res["curve"][0]["train_eval_loss"] != pytest.approx(overfit.mean_loss(model, blocks[0:2], 2), rel=1e-6)


def test_calibrate_scores_every_solver_and_steps_on_both_splits(toy, tmp_path):
    """calibrate=1: hf_ot.calibration's grid (euler/heun/rk4 x M' 1..2M) on the selection blocks, each point's loss on
    the report blocks; the trained point's report loss is the run's own early-stopped report loss (hf_ot.metrics)."""
    text = toy[1]
    settings = {**TINY, "noise": 0, "calibrate": 1, "report_offset": 2, "final_blocks": 2}
    res = overfit.run_job(overfit.Job("ot_s1", "ot", 1.0, 2, 1), tmp_path, settings, str(text))["result"]
    cal = res["calibration"]
    grid = {(r["solver"], r["num_steps"]) for r in cal["rows"]}
    assert grid == {(s, m) for s in ("euler", "heun", "rk4") for m in range(1, 5)}
    assert cal["trained"] == {"solver": "euler", "num_steps": 2, "field_evaluations": 2}
    trained = next(r for r in cal["rows"] if (r["solver"], r["num_steps"]) == ("euler", 2))
    assert trained["report_loss"] == pytest.approx(res["best"]["loss"], rel=1e-5)
    assert trained["select_loss"] == pytest.approx(res["best_curve_val_loss"], rel=1e-5)
    assert cal["choice"]["field_evaluations"] <= 2
    base = overfit.run_job(overfit.Job("b_s1", "baseline", 0.0, 0, 1), tmp_path, settings, str(text))["result"]
    assert "calibration" not in base  # a baseline has one depth
