"""The study's settings, data slices and job list. For each N (256, then 2,048): the selection runs (seed 1), then
the report seeds of each family's selected configuration (added once that family's selection has finished)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"  # raw JSON per run (committed)
WORK = HERE.parents[1] / "runs" / "small_data"  # claims and worker logs (ignored by git)

SEEDS = (1, 2, 3)
SELECT_SEED = 1
SIZES = (256, 2048)
SELECT_SIZE = 512
# The N whose seed-1 selection runs choose each family's configuration for N: each N is tuned on its own.
TUNED_AT = {256: 256, 2048: 2048}
# One fixed draw for every seed: datasets' shuffle(seed=0) of train.tsv (the recipes' own pool), exact duplicate
# sentences dropped, then the first 512 select and the next 2,048 train; N = 256 is the first 256 of those. Seeds
# vary the head's initialisation, the order of the batches and dropout, not the data.
POOL = 3000

# The same optimiser, schedule, batch and length for every run. lr and clipping are the sst2_minilm_elastic recipe's
# (200 steps of 32 converge plain fine-tuning there); warm-up 10% of the run, then linear decay to 0.
SETTINGS = {
    "lr": 1e-4,
    "batch": 16,
    "warmup_frac": 0.1,
    "max_length": 64,
    "clip": 1.0,
    # Sized to the CPU time there was (2 cores shared with other jobs): N = 256 is the study, N = 2,048 runs last.
    "epochs": {256: 6, 2048: 1},
    "eval_every": {256: 16, 2048: 32},  # steps between evaluations on the selection slice (an epoch; a quarter)
    "eval_batch": 128,
}
# 4 configurations per family. Plain: dropout 0 / 0.1 (the checkpoint's) / 0.2 (hidden, attention and classifier)
# at weight decay 0.01 (BERT's), and the most regularised, dropout 0.2 at weight decay 1 (AdamW's decoupled decay,
# biases and LayerNorms excluded: at lr 1e-4 over ~100 steps 0.01 against 0 changes nothing, 1 shrinks weights ~1%).
# OT: M in {1, 4} Euler x lambda in {0.1, 1} at the checkpoint's dropout and no weight decay.
PLAIN_GRID = ((0.0, 0.01), (0.1, 0.01), (0.2, 0.01), (0.2, 1.0))  # (dropout, weight decay)
OT_GRID = ((1, 0.1), (1, 1.0), (4, 0.1), (4, 1.0))  # (M, lambda)


@dataclass(frozen=True)
class Job:
    n: int
    family: str  # "plain" | "ot"
    seed: int
    steps: int = 1  # M (Euler)
    lam: float = 0.0
    dropout: float = 0.1
    weight_decay: float = 0.0
    groups: tuple = field(default=("select",), compare=False)

    @property
    def config(self) -> str:
        if self.family == "plain":
            return f"d{self.dropout:g}_wd{self.weight_decay:g}"
        return f"M{self.steps}_lam{self.lam:g}"

    @property
    def id(self) -> str:
        return f"N{self.n}_{self.family}_{self.config}_s{self.seed}"


def slices(texts: list[str], select: int = SELECT_SIZE, sizes=SIZES) -> dict[str, list[int]]:
    """Row indices of the selection slice and of each training slice in `texts` (the shuffled pool): exact duplicate
    sentences dropped (the first kept), the first `select` select, the next max(sizes) train; smaller training slices
    are prefixes of the largest. Every training slice is disjoint from the selection slice, also by text."""
    seen, unique = set(), []
    for i, text in enumerate(texts):
        if text not in seen:
            seen.add(text)
            unique.append(i)
    if len(unique) < select + max(sizes):
        raise ValueError(f"pool of {len(unique)} distinct sentences; the slices need {select + max(sizes)}")
    train = unique[select : select + max(sizes)]
    return {"select": unique[:select], **{f"train{n}": train[:n] for n in sizes}}


def selection(n: int) -> dict[str, list[Job]]:
    return {
        "plain": [Job(n, "plain", SELECT_SEED, dropout=d, weight_decay=wd) for d, wd in PLAIN_GRID],
        "ot": [Job(n, "ot", SELECT_SEED, steps=m, lam=lam) for m, lam in OT_GRID],
    }


def load_raw(job: Job, results: Path = RESULTS) -> dict | None:
    path = results / f"{job.id}.json"
    return json.loads(path.read_text()) if path.exists() else None


def rank_key(record: dict) -> tuple:
    """Higher selection accuracy at the kept (early-stopped) point first; lower selection loss breaks ties."""
    best = record["best"]
    return (-best["select_acc"], best["select_loss"])


def selected(n: int, family: str, results: Path = RESULTS) -> Job | None:
    """The family's configuration with the best early-stopped selection accuracy at seed 1; None while any of its
    selection runs is unfinished."""
    records = [(job, load_raw(job, results)) for job in selection(n)[family]]
    if any(rec is None for _, rec in records):
        return None
    return min(records, key=lambda pair: rank_key(pair[1]))[0]  # type: ignore[arg-type]


def with_seed(job: Job, seed: int) -> Job:
    return Job(job.n, job.family, seed, job.steps, job.lam, job.dropout, job.weight_decay, ("report",))


def build_jobs(results: Path | None = RESULTS, sizes=SIZES) -> list[Job]:
    """Every job whose turn has come, in order: per N tuned on its own (TUNED_AT), its selection runs, then the report
    seeds of each family's selected configuration once its selection has finished; then the N tuned on another N:
    the configurations selected there, every seed, the two families alternating."""
    jobs: list[Job] = []
    for n in sizes:
        tuned_at = TUNED_AT[n]
        if tuned_at == n:
            sel = selection(n)
            jobs += [*sel["plain"], *sel["ot"]]
        chosen = [selected(tuned_at, family, results) if results else None for family in ("plain", "ot")]
        for seed in SEEDS:
            jobs += [
                Job(n, job.family, seed, job.steps, job.lam, job.dropout, job.weight_decay, ("report",))
                for job in chosen
                if job is not None and (seed != SELECT_SEED or tuned_at != n) and (tuned_at == n or None not in chosen)
            ]
    return jobs
