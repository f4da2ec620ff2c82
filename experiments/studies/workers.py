"""Workers: processes that claim jobs through OUT/claims/<job> folders and write OUT/raw/<job>.json when done, so any
number of them share one job list and an interrupted study resumes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .jobs import ELASTIC_SOLVERS, ELASTIC_STEPS, Job, build_jobs
from .runs import run_job


def _claim(out: Path, job: Job) -> bool:
    """Atomic: a claim folder appears whole (its owner's pid inside) by renaming a private one, so no other process
    ever reads it without its pid. A claim whose owner died (and left no result) is taken over."""
    claims = out / "claims"
    claims.mkdir(parents=True, exist_ok=True)
    folder = claims / job.id
    mine = claims / f".{job.id}.{os.getpid()}"
    mine.mkdir(exist_ok=True)
    (mine / "pid").write_text(str(os.getpid()))
    try:
        os.rename(mine, folder)  # fails when the claim exists (a non-empty folder)
        return True
    except OSError:
        shutil.rmtree(mine, ignore_errors=True)
    try:
        os.kill(int((folder / "pid").read_text()), 0)
        return False  # its owner is alive
    except (OSError, ValueError):
        shutil.rmtree(folder, ignore_errors=True)
        return _claim(out, job)


def work(jobs: list[Job], out: Path, grid=(ELASTIC_STEPS, ELASTIC_SOLVERS)) -> None:
    """Run every job that has no result yet and that no other live worker has claimed."""
    import torch

    torch.set_num_threads(1)
    for job in jobs:
        if (out / "raw" / f"{job.id}.json").exists() or not _claim(out, job):
            continue
        print(f"[{time.strftime('%H:%M:%S')}] {job.id} started", flush=True)
        record = run_job(job, out, grid)
        print(f"[{time.strftime('%H:%M:%S')}] {job.id} done in {record['wall_s']:.0f}s", flush=True)


def run(out: Path, workers: int, studies, seeds, lm_set, sst_set) -> None:
    """`workers` processes (one thread each) over the job list; each writes its log to OUT/logs/."""
    out.mkdir(parents=True, exist_ok=True)
    if workers <= 1:
        work(build_jobs(studies, seeds, lm_set, sst_set), out)
        return
    (out / "logs").mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "experiments.studies",
        "run",
        "--out",
        str(out),
        "--workers",
        "1",
        "--study",
        *studies,
        "--seeds",
        *map(str, seeds),
    ]
    cmd += [f"--lm-set={s}" for s in lm_set] + [f"--sst-set={s}" for s in sst_set]
    start_workers(cmd, out, workers, env)


def start_workers(cmd: list[str], out: Path, workers: int, env: dict) -> None:
    """`workers` copies of `cmd` sharing a job list through OUT/claims, logs in OUT/logs/; waits for all."""
    procs = []
    for i in range(workers):
        log = open(out / "logs" / f"worker{i}.log", "a")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
        time.sleep(2)  # distinct first claims
    codes = [p.wait() for p in procs]
    if any(codes):
        raise RuntimeError(f"workers exited with {codes}; see {out / 'logs'}")
