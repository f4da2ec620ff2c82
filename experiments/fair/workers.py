"""Workers for the fair study: the overfitting study's runner and claims, over a job list rebuilt after every run
(the report seeds join it once their family's selection has finished)."""

from __future__ import annotations

import time
from pathlib import Path

from experiments.overfit.train import run_job
from experiments.overfit.workers import run as overfit_run
from experiments.studies.workers import _claim

from .jobs import SETTINGS, build_jobs


def work(
    out: Path,
    settings: dict | None = None,
    train_file: str | None = None,
    poll_s: float = 20.0,
    only: tuple[str, ...] = (),
) -> None:
    import torch

    torch.set_num_threads(1)
    while True:
        todo = [job for job in build_jobs(out, only) if not (out / "raw" / f"{job.id}.json").exists()]
        if not todo:
            return
        job = next((job for job in todo if _claim(out, job)), None)  # type: ignore[arg-type]
        if job is None:  # the rest is claimed by live workers; their results may add report seeds
            time.sleep(poll_s)
            continue
        print(f"[{time.strftime('%H:%M:%S')}] {job.id} started", flush=True)
        # the study's settings, then the job's (the long run's steps), then the command line's (a smoke run)
        record = run_job(job, out, {**SETTINGS, **job.settings, **(settings or {})}, train_file)
        res = record["result"]
        print(
            f"[{time.strftime('%H:%M:%S')}] {job.id} done in {record['wall_s']:.0f}s "
            f"(best {res['best_curve_val_loss']:.4f} at {res['best_step']}, report {res['best']['loss']:.4f})",
            flush=True,
        )


def run(out: Path, workers: int, argv_rest: list[str]) -> None:
    overfit_run(out, workers, argv_rest, study="experiments.fair")
