"""OT against the baseline a practitioner would train, at equal tuning and equal compute (Tiny Shakespeare subset,
CPU scale): the overfitting study's subset, optimizer and runner (experiments.overfit), 1,000 steps; the baseline
tuned over dropout x weight decay with early stopping, OT over lambda x M, the same number of configurations each, on
a selection split of the validation text disjoint from the report split; the selected configuration of each family
with 3 seeds; ablations of the attribution; one longer OT run; FLOPs per step of every model.

    python -m experiments.fair run --out runs/fair                                 # every run (2 processes)
    python -m experiments.fair report --out runs/fair --docs docs/results          # tables, figures, JSON
    python -m experiments.fair report --from docs/results/fair-comparison.json --docs docs/results
    python -m experiments.fair flops                                               # FLOPs per step of each model

Modules: jobs (settings, grids, the job list), workers (processes over a job list rebuilt after every run), flops
(analytic and counted FLOPs), report (tables, figures).
"""

from .jobs import SETTINGS, build_jobs

__all__ = ["SETTINGS", "build_jobs"]
