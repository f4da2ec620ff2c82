"""The paper's claim in its own regime at CPU scale: a plain GPT-2 baseline that overfits a small Tiny Shakespeare
training subset, against OT-Transformers (hf_ot, paper mode, no LayerNorms) at the paper's parameter ratio, at
matched size, and with lambda = 0 (3 seeds each); then lambda and M at the OT size (one seed), the matched model at
M = 1 (each block once: the sharing control) and twice the steps for the baseline and matched OT (3 seeds each).

    python -m experiments.overfit run --out runs/overfit                  # every run (2 processes, one thread each)
    python -m experiments.overfit run --out runs/overfit --no-sensitivity # the 12 core runs only (no later runs)
    python -m experiments.overfit report --out runs/overfit --docs docs   # tables, figures, docs/overfit.json
    python -m experiments.overfit report --from docs/overfit.json --docs docs
    python -m experiments.overfit timing --out runs/overfit               # s/step of every model, back to back

Every run uses the same training subset (the first `train_blocks` blocks of the 90% train split; validation is
nanoGPT's last 10%, unchanged), optimizer, schedule, number of steps and, per seed, the same batches in the same
order. Each finished run writes OUT/raw/<job>.json at once and a rerun skips those, so an interrupted study resumes;
the core comparison runs first, then the sensitivity runs, the M = 1 control and the long runs.

Modules: jobs (settings, models, job list), train (one run: training loop, evaluation), workers (processes sharing
the job list), report (statistics, tables, figures); `python -m experiments.overfit` is __main__.
"""

from .jobs import CONFIGS, CORE, MODELS, NOISE_RATES, SEEDS, SETTINGS, Job, build_jobs
from .report import figures, load_records, report, summarize, tables
from .train import data_order, evaluate, mean_loss, run_job, train_and_evaluate
from .workers import run, work

__all__ = [
    "CONFIGS",
    "CORE",
    "MODELS",
    "NOISE_RATES",
    "SEEDS",
    "SETTINGS",
    "Job",
    "build_jobs",
    "data_order",
    "evaluate",
    "figures",
    "load_records",
    "mean_loss",
    "report",
    "run",
    "run_job",
    "summarize",
    "tables",
    "train_and_evaluate",
    "work",
]
