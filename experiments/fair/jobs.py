"""The fair-comparison study's settings and job list. Selection runs (seed 1) first, then the report seeds of each
family's selected configuration (added once that family's selection runs have all finished), then one long run of
the selected OT configuration, then the ablations: a study cut short by the clock loses ablations first."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.overfit.jobs import Job

SEEDS = (1, 2, 3)
SELECT_SEED = 1
# The overfitting study's subset, optimizer and schedule at its long length (1,000 steps, where the untuned OT won);
# the validation split cut in two disjoint parts: blocks 0-127 select (early stopping, the configuration), blocks
# 128-383 report. No input-noise evaluation (not a question of this study; saves 6 of 8 final evaluations).
SETTINGS = {
    "steps": 1000,
    "eval_every": 50,
    "curve_blocks": 128,
    "curve_train_blocks": 16,
    "report_offset": 128,
    "final_blocks": 256,
    "report_curve_blocks": 128,
    "noise": 0,
    "patience": 5,  # early stopping for every run: 250 steps without a new best on the selection split
}
# The same number of configurations per family (4: what 2 shared CPU cores allowed). Baseline: dropout (GPT-2's
# resid/embd/attn) 0 / 0.1 / 0.2 at weight decay 0.1, and the most regularised, dropout 0.2 at weight decay 1.0;
# early stopping on the selection split for every run. OT (3 x 112, paper mode, no LayerNorms): lambda 0.1 / 1 / 3
# at M = 1, and lambda 1 at M = 2.
BASELINE_GRID = ((0.0, 0.1), (0.1, 0.1), (0.2, 0.1), (0.2, 1.0))  # (dropout, weight decay)
OT_GRID = ((0.1, 1), (1.0, 1), (3.0, 1), (1.0, 2))  # (lambda, M)
LONG_STEPS = 2000


def dropout(p: float) -> list[str]:
    return [f"model.scratch.{name}_pdrop={p}" for name in ("resid", "embd", "attn")]


def baseline_job(p: float, wd: float, seed: int, group: str) -> Job:
    return Job(f"base_d{p:g}_wd{wd:g}_s{seed}", "baseline", 0.0, 0, seed, [group], {"weight_decay": wd}, dropout(p))


def ot_job(lam: float, m: int, seed: int, group: str, prefix: str = "ot", extra=(), settings=None) -> Job:
    return Job(f"{prefix}_lam{lam:g}_M{m}_s{seed}", "ot", lam, m, seed, [group], dict(settings or {}), list(extra))


def selection() -> dict[str, list[Job]]:
    return {
        "baseline": [baseline_job(p, wd, SELECT_SEED, "select") for p, wd in BASELINE_GRID],
        "ot": [ot_job(lam, m, SELECT_SEED, "select") for lam, m in OT_GRID],
    }


# Ablations, seed 1, at the untuned settings (lambda = 1, weight decay 0.1, no dropout); each differs from a
# selection run in one ingredient.
_LN = ["model.ot.ot_block_layer_norms=true"]
_RESIDUAL = [*_LN, "model.ot.ot_mode=residual"]  # residual mode keeps the stack's LayerNorms (hf_ot requires it)


def ablations() -> list[Job]:
    return [
        Job("abl_base_noln_s1", "baseline_noln", 0.0, 0, SELECT_SEED, ["ablation"], {"weight_decay": 0.1}),
        ot_job(1.0, 1, SELECT_SEED, "ablation", "abl_paperln", _LN),
        ot_job(1.0, 1, SELECT_SEED, "ablation", "abl_residual", _RESIDUAL),
        ot_job(0.0, 1, SELECT_SEED, "ablation"),
        ot_job(1.0, 2, SELECT_SEED, "ablation", "abl_paperln", _LN),
        ot_job(1.0, 2, SELECT_SEED, "ablation", "abl_residual", _RESIDUAL),
        # at the paper's M = 5 (its LayerNorm-free paper-mode run is the extra ot_lam1_M5_s1)
        ot_job(1.0, 5, SELECT_SEED, "ablation", "abl_paperln", _LN),
        ot_job(1.0, 5, SELECT_SEED, "ablation", "abl_residual", _RESIDUAL),
    ]


def extras() -> list[Job]:
    """Outside the tuning (time was left): the cheapest OT configuration (lambda 0.1, M = 1) with seeds 2 and 3, for
    the equal-compute comparison, and the paper's M = 5 at lambda = 1 (seed 1)."""
    return [
        *(ot_job(0.1, 1, seed, "extra") for seed in (2, 3)),
        ot_job(1.0, 5, SELECT_SEED, "extra"),
    ]


def inference(chosen: Job) -> list[Job]:
    """The selected OT configuration again, 3 seeds, calibrated after training (the same training as its selection
    and report runs: one seed's batches and initialisation are fixed)."""
    return [
        Job(
            f"cal_{with_seed(chosen, seed, 'infer').id}",
            chosen.model,
            chosen.lam,
            chosen.num_steps,
            seed,
            ["infer"],
            {**chosen.settings, "calibrate": 1},
            list(chosen.extra),
        )
        for seed in SEEDS
    ]


def load_raw(out: Path, job_id: str) -> dict | None:
    path = out / "raw" / f"{job_id}.json"
    return json.loads(path.read_text()) if path.exists() else None


def selected(out: Path, family: str) -> Job | None:
    """The family's configuration with the lowest best-checkpoint loss on the selection split (early stopping on the
    same split), or None while any of its selection runs is unfinished."""
    records = [(job, load_raw(out, job.id)) for job in selection()[family]]
    if any(rec is None for _, rec in records):
        return None
    return min(records, key=lambda pair: pair[1]["result"]["best_curve_val_loss"])[0]  # type: ignore[index]


def with_seed(job: Job, seed: int, group: str) -> Job:
    return Job(
        job.id.rsplit("_s", 1)[0] + f"_s{seed}",
        job.model,
        job.lam,
        job.num_steps,
        seed,
        [group],
        dict(job.settings),
        list(job.extra),
    )


def build_jobs(out: Path | None = None, only: tuple[str, ...] = ()) -> list[Job]:
    """Every job whose turn has come: selection, report seeds of the selected configurations (once known from
    OUT/raw), the long run of the selected OT configuration, ablations, extras, the calibrated OT runs; with `only`,
    the jobs of those groups."""
    sel = selection()
    jobs = [*sel["baseline"], *sel["ot"]]
    chosen = {family: selected(out, family) if out else None for family in sel}
    for family in sel:
        if chosen[family] is not None:
            jobs += [with_seed(chosen[family], seed, "report") for seed in SEEDS if seed != SELECT_SEED]
    if chosen["ot"] is not None:
        best = chosen["ot"]
        jobs.append(
            Job(
                f"long_{best.id}",
                best.model,
                best.lam,
                best.num_steps,
                SELECT_SEED,
                ["long"],
                {**best.settings, "steps": LONG_STEPS, "eval_every": 100},
                list(best.extra),
            )
        )
    jobs += ablations()
    jobs += extras()
    if chosen["ot"] is not None:
        jobs += inference(chosen["ot"])
    return [job for job in jobs if not only or set(job.groups) & set(only)]
