"""Worker processes sharing the job list: each claims a job through an OUT/claims/<job> folder (experiments.studies'
claim rule: atomic, taken over when its owner died), skips jobs that already have OUT/raw/<job>.json, and runs the
rest in list order, so a rerun resumes an interrupted study."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from experiments.studies.workers import _claim, start_workers

from .jobs import Job
from .train import run_job


def work(jobs: list[Job], out: Path, settings: dict | None = None, train_file: str | None = None) -> None:
    import torch

    torch.set_num_threads(1)
    for job in jobs:
        if (out / "raw" / f"{job.id}.json").exists() or not _claim(out, job):  # type: ignore[arg-type]
            continue
        print(f"[{time.strftime('%H:%M:%S')}] {job.id} started", flush=True)
        record = run_job(job, out, settings, train_file)
        res = record["result"]
        print(
            f"[{time.strftime('%H:%M:%S')}] {job.id} done in {record['wall_s']:.0f}s "
            f"({res['s_per_step']:.3f} s/step; best {res['best_curve_val_loss']:.4f} at {res['best_step']}, "
            f"final {res['final_curve_val_loss']:.4f})",
            flush=True,
        )


def run(out: Path, workers: int, argv_rest: list[str], study: str = "experiments.overfit") -> None:
    """`workers` processes (one thread each) of `python -m STUDY work` over the job list, logs in OUT/logs/."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", study, "work", "--out", str(out), *argv_rest]
    start_workers(cmd, out, workers, env)
