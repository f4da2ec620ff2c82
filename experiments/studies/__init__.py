"""Three studies of what OT buys a user, at CPU scale, 3 seeds each:

1. elasticity: Shakespeare-char OT models (paper mode, no LayerNorms, M=5 Euler) trained with lambda in {0, 0.1, 1},
   evaluated at other M' and solvers (set on model.config, read at every forward): val loss vs field evaluations.
2. finetune: the real MiniLM on SST-2, base fine-tune vs its OT conversion (residual, M in {2, 4}, lambda in
   {0, 0.1, 1}), same optimizer steps: accuracy before and after fine-tuning, under token noise, time per step.
3. matched: (a) baseline, (b) OT (L shared blocks x M, LayerNorms on), (c) compute-matched M*L unshared layers,
   (d) parameter-matched L layers one pass, and (b) without LayerNorms (= the lambda=1 runs of study 1).

    python -m experiments.studies all --out runs/studies          # every run (2 worker processes), then `report`
    python -m experiments.studies run --out runs/studies --workers 2 [--study elasticity ...] [--lm-set k=v]
        [--sst-set k=v]
    python -m experiments.studies report --out runs/studies [--docs docs] [--from docs/studies.json]

Each finished run writes `OUT/raw/<job>.json` at once, and a rerun skips the jobs that have one, so an interrupted
study resumes. Workers claim jobs through `OUT/claims/<job>` folders, so any number of them share one job list.

One concern per module: jobs (the job list), runs (one run and its evaluation), workers (processes sharing the
job list), report (statistics, tables, figures); `python -m experiments.studies` is __main__.
"""

from hf_ot.metrics import accuracy, noisy_ids, predict

from .jobs import (
    BEFORE_SENTENCES,
    CONFIGS,
    ELASTIC_SOLVERS,
    ELASTIC_STEPS,
    LAMBDAS,
    MATCHED,
    NOISE_RATES,
    NOISE_SUBSET_EVERY,
    SEEDS,
    SST_STEPS,
    STUDIES,
    Job,
    build_jobs,
    field_evaluations,
    lam_tag,
)
from .report import figures, fmt, load_records, machine, report, stat, summarize, tables
from .runs import encode_validation, lm_losses, load_lm, run_job, run_lm, run_sst2, time_steps, timing
from .workers import run, work

__all__ = [
    "BEFORE_SENTENCES",
    "CONFIGS",
    "ELASTIC_SOLVERS",
    "ELASTIC_STEPS",
    "Job",
    "LAMBDAS",
    "MATCHED",
    "NOISE_RATES",
    "NOISE_SUBSET_EVERY",
    "SEEDS",
    "SST_STEPS",
    "STUDIES",
    "accuracy",
    "build_jobs",
    "encode_validation",
    "field_evaluations",
    "figures",
    "fmt",
    "lam_tag",
    "lm_losses",
    "load_lm",
    "load_records",
    "machine",
    "noisy_ids",
    "predict",
    "report",
    "run",
    "run_job",
    "run_lm",
    "run_sst2",
    "stat",
    "summarize",
    "tables",
    "time_steps",
    "timing",
    "work",
]
