"""The overfitting study's settings and job list, in the order the runs go (core comparison first, sensitivity last,
so a study cut short by the clock loses sensitivity runs, never a seed of the comparison)."""

from __future__ import annotations

from dataclasses import dataclass, field

CONFIGS = {
    "baseline": "recipes/configs/study_shakespeare_baseline.yaml",
    "ot": "recipes/configs/study_shakespeare_ot.yaml",
}
SEEDS = (1, 2, 3)
BLOCK = 64
# Every run: the same subset, optimizer, schedule and number of steps; `--set` overrides any of these (smoke test).
SETTINGS = {
    "train_blocks": 250,  # the first 250 blocks of 64 characters of the 90% train split: 16,000 characters
    "train_start": 0,  # the subset's first block (250: the second window, characters 16,000-32,000)
    "steps": 500,  # 4,000 blocks seen: 16 epochs of the subset
    "batch": 8,
    "lr": 1e-3,
    "warmup": 25,
    "weight_decay": 0.1,
    "eval_every": 25,
    "curve_blocks": 96,  # validation blocks behind the learning curve and the choice of the best step
    "curve_train_blocks": 32,  # training blocks behind the train curve (the generalisation gap)
    "final_blocks": 256,  # validation blocks of the final / best-checkpoint evaluation (16,384 characters)
    "eval_batch": 32,
    # The fair-comparison study's (experiments.fair) splits; the defaults keep the study above as it ran.
    "report_offset": 0,  # the final evaluation's first validation block (> curve_blocks: disjoint from selection)
    "report_curve_blocks": 0,  # report-split blocks also evaluated at every curve point (0: none)
    "noise": 1,  # 0: no input-noise evaluation (saves 6 of 8 final evaluations)
    "patience": 0,  # early stopping: end the run after this many curve points without a new best (0: never)
    # 1: calibrate an OT model's best checkpoint (hf_ot.calibration) on the selection blocks, and report the loss of
    # every solver x M' point of its grid on the report blocks (inference at the calibrated M')
    "calibrate": 0,
}
NOISE_RATES = (0.05, 0.1, 0.2)
TEXT_METRICS = ("bleu", "rouge")

_SIZE = ["model.scratch.n_positions=64", "data.block_size=64"]
_OT = ["model.ot.ot_block_layer_norms=false", "model.ot.ot_mode=paper", "model.ot.ot_solver=euler"]
# name -> (config, overrides). Baseline: plain GPT-2 4 x 128 with its LayerNorms. OT in paper mode without
# LayerNorms (the paper's char run): "ot" at about the paper's parameter ratio (-42%), "ot_matched" the baseline's
# own 4 x 128 blocks as one shared field (the same parameters less the LayerNorms').
MODELS = {
    "baseline": ("baseline", [*_SIZE, "model.scratch.n_layer=4", "model.scratch.n_embd=128"]),
    "ot": ("ot", [*_SIZE, *_OT, "model.scratch.n_layer=3", "model.scratch.n_embd=112"]),
    "ot_matched": ("ot", [*_SIZE, *_OT, "model.scratch.n_layer=4", "model.scratch.n_embd=128"]),
    # the baseline with every LayerNorm removed as OT's paper mode removes them (blocks' and the final one)
    "baseline_noln": ("baseline", [*_SIZE, "model.scratch.n_layer=4", "model.scratch.n_embd=128"]),
}
NORMLESS = {"baseline_noln"}
CORE = (("baseline", 1.0, 5), ("ot", 1.0, 5), ("ot_matched", 1.0, 5), ("ot", 0.0, 5))
SENS_LAMBDAS = (0.01, 0.1, 1.0, 10.0)
SENS_STEPS = (1, 2, 5, 10)
# After the sensitivity runs (cut first if time runs short): the matched OT model at M = 1, each block applied once
# (no sharing across steps), the control that separates sharing/integration from the missing LayerNorms at equal size.
ONE_PASS = ("ot_matched", 1.0, 1)
# Last: twice the steps on the same subset (32 epochs; the baseline overfits further), baseline and matched OT.
LONG = {"steps": 1000, "eval_every": 50}
LONG_MODELS = (("baseline", 1.0, 5), ("ot_matched", 1.0, 5))
# then the OT size with and without the transport cost, and the M = 1 control
LONG_LAST = (("ot", 1.0, 5), ("ot", 0.0, 5), ONE_PASS)


@dataclass
class Job:
    id: str
    model: str  # a MODELS key
    lam: float
    num_steps: int
    seed: int
    groups: list[str] = field(default_factory=list)  # "core", "lambda", "steps", "one_pass", "long"
    settings: dict = field(default_factory=dict)  # this job's changes to SETTINGS (the long runs)
    extra: list[str] = field(default_factory=list)  # recipe overrides after the model's (dropout, OT mode)

    def overrides(self) -> list[str]:
        config, extra = MODELS[self.model]
        ot = [f"model.ot.ot_lambda={self.lam}", f"model.ot.ot_num_steps={self.num_steps}"] if config == "ot" else []
        return [*extra, *ot, *self.extra]


def job_id(model: str, lam: float, num_steps: int, seed: int) -> str:
    if model == "baseline":
        return f"baseline_s{seed}"
    return f"{model}_lam{lam:g}_M{num_steps}_s{seed}"


def build_jobs(seeds=SEEDS, sensitivity: bool = True) -> list[Job]:
    """The 12 core runs seed by seed, then the one-seed sensitivity runs (lambda, then M) at the OT size (the point
    lambda=1, M=5 is the core seed-1 OT run, counted once), then the matched model at M = 1 (ONE_PASS), every seed,
    then the LONG runs, seed by seed."""
    jobs: dict[str, Job] = {}
    for seed in seeds:
        for model, lam, steps in CORE:
            jobs.setdefault(
                job_id(model, lam, steps, seed), Job(job_id(model, lam, steps, seed), model, lam, steps, seed)
            )
            jobs[job_id(model, lam, steps, seed)].groups.append("core")
    if sensitivity:
        seed = seeds[0]
        for group, points in (
            ("lambda", [(lam, 5) for lam in SENS_LAMBDAS]),
            ("steps", [(1.0, m) for m in SENS_STEPS]),
        ):
            for lam, steps in points:
                key = job_id("ot", lam, steps, seed)
                jobs.setdefault(key, Job(key, "ot", lam, steps, seed)).groups.append(group)
        model, lam, steps = ONE_PASS
        for seed in seeds:
            key = job_id(model, lam, steps, seed)
            jobs.setdefault(key, Job(key, model, lam, steps, seed)).groups.append("one_pass")
        for seed in seeds:
            for model, lam, steps in LONG_MODELS:
                key = f"long_{job_id(model, lam, steps, seed)}"
                jobs[key] = Job(key, model, lam, steps, seed, ["long"], dict(LONG))
        for model, lam, steps in LONG_LAST:
            for seed in seeds:
                key = f"long_{job_id(model, lam, steps, seed)}"
                jobs[key] = Job(key, model, lam, steps, seed, ["long"], dict(LONG))
    return list(jobs.values())
