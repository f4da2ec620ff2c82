"""Every figure README, docs/ and the recipe configs state about a recipe, measured by running that recipe as
shipped: `hf-ot train NAME --set output_dir=DIR` in a subprocess from the repository root, as a user types it, one
recipe at a time.

    OMP_NUM_THREADS=1 python -m experiments.recipes_as_shipped run [NAME ...] [--out runs/as_shipped]
    python -m experiments.recipes_as_shipped report

`run` records per recipe: the exact command, the UTC date, wall and CPU time, OMP_NUM_THREADS and the cores, the load
average (sampled every 5 s while it runs: how busy the machine was with other jobs), the recipe's own metrics and the
whole results.json it wrote, in experiments/recipes_as_shipped/results/NAME.json; `report` writes report.md (one
table) from those files. A run given --set overrides (a smoke test: --set training.max_steps=2) is recorded with them
and reported as not as shipped; write those elsewhere with --results.

sst2_minilm_elastic (about 35 minutes per seed here) is measured over 3 seeds by experiments/pretrained_elastic
(`run.py recipe`), which runs it through `train_command` / `run_measured` below.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
# every recipe README, docs/ or a config states a figure for (time, loss, accuracy or BLEU), in the order run
RECIPES = (
    "quickstart",
    "sst2_minilm",
    "translation_t5",
    "translation_bart",
    "causal_lm_shakespeare_char",
    "causal_lm_shakespeare_char_baseline",
)
# where each recipe's figures are stated (what to update from a new measurement)
STATED = {
    "quickstart": "README.md (Quick start: time), recipes/README.md (table, times), configs/quickstart.yaml header",
    "sst2_minilm": "recipes/README.md (table: time, accuracy), configs/sst2_minilm.yaml header, "
    "docs/results/studies.md (the recipe's 120 steps reach ...)",
    "translation_t5": "recipes/README.md (table: time, BLEU), configs/translation_t5.yaml header",
    "translation_bart": "recipes/README.md (table: time, BLEU), configs/translation_bart.yaml header",
    "causal_lm_shakespeare_char": "recipes/README.md (table: time), configs/causal_lm_shakespeare_char.yaml header",
    "causal_lm_shakespeare_char_baseline": "recipes/README.md (table: time)",
}
# results.json keys a stated figure quotes, per task
HEADLINE = {
    "causal-lm": ("loss", "perplexity"),
    "sequence-classification": ("accuracy",),
    "translation": ("bleu", "rougeL"),
}
LOAD_EVERY_S = 5.0


def utc(seconds: float | None = None) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))


def train_command(name: str, output_dir: str | Path, sets=()) -> list[str]:
    """The command a user types: `hf-ot train NAME --set output_dir=DIR [--set KEY=VALUE ...]`."""
    command = ["hf-ot", "train", name, "--set", f"output_dir={output_dir}"]
    for item in sets:
        command += ["--set", item]
    return command


def run_measured(command: list[str], log_path: Path, limit_s: float | None = None) -> dict:
    """Run `hf-ot ...` (as `python -m hf_ot.cli ...` of this interpreter: the same entry point) from the repository
    root with the caller's environment; its output goes to log_path. Returns what the run cost and how busy the
    machine was: wall and CPU time (user + system of the child), the 1-minute load average at the start and sampled
    while it ran, the threads it was given. A run still going after limit_s seconds is stopped (SIGTERM: hf-ot
    train's own interrupt) and recorded as stopped."""
    import resource

    assert command[0] == "hf-ot", command
    argv = [sys.executable, "-m", "hf_ot.cli", *command[1:]]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before = usage.ru_utime + usage.ru_stime
    loads = [os.getloadavg()[0]]
    start = time.time()
    stopped = False
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            while proc.poll() is None:
                try:
                    proc.wait(timeout=LOAD_EVERY_S)
                except subprocess.TimeoutExpired:
                    loads.append(os.getloadavg()[0])
                    if limit_s is not None and time.time() - start > limit_s and not stopped:
                        proc.terminate()
                        stopped = True
        except BaseException:  # Ctrl-C: the run this started does not outlive it
            proc.terminate()
            proc.wait()
            raise
    wall = time.time() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "command": " ".join(shlex.quote(c) for c in command),
        "environment": f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}",
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpu_count": os.cpu_count(),
        "cwd": "the repository root",
        "returncode": proc.returncode,
        "stopped_after_s": limit_s if stopped else None,
        "started": utc(start),
        "finished": utc(),
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime - cpu_before, 1),
        "load_1min": {
            "start": round(loads[0], 2),
            "mean": round(sum(loads) / len(loads), 2),
            "max": round(max(loads), 2),
            "samples": len(loads),
        },
        "log": str(log_path),
    }


def versions() -> dict:
    import torch
    import transformers

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "hf_ot_commit": commit or None,
    }


def measure(name: str, out: Path, sets=(), overwrite: bool = False, limit_s: float | None = None) -> dict:
    """Train recipe NAME as shipped (plus `sets`) into OUT/NAME; the record of the run (run_measured) with the
    recipe's own metrics and its whole results.json."""
    output_dir = (out / name).resolve()
    command = train_command(name, output_dir, sets)
    if overwrite:
        command.append("--overwrite")  # hf-ot's own check: it replaces only a run it can show it wrote
    record = {"recipe": name, "overrides": list(sets), "as_shipped": not sets, "output_dir": str(output_dir)}
    record.update(run_measured(command, output_dir.parent / f"{name}.log", limit_s))
    record.update(versions())
    results_path = output_dir / "results.json"
    if record["returncode"] == 0 and results_path.is_file():
        results = json.loads(results_path.read_text())
        task = results.get("task")
        record["task"] = task
        record["metrics"] = {k: results[k] for k in HEADLINE.get(task, ()) if k in results}
        record["train_runtime_s"] = results.get("train_runtime_s")
        record["results"] = results
    return record


def load(results: Path = RESULTS) -> list[dict]:
    records = [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]
    order = {name: i for i, name in enumerate(RECIPES)}
    return sorted(records, key=lambda r: (order.get(r["recipe"], len(order)), r["recipe"]))


def minutes(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def figures(record: dict) -> str:
    """The recipe's own headline metrics, as README would quote them."""
    m = record.get("metrics")
    if record.get("stopped_after_s"):
        return f"not measured: stopped after {record['stopped_after_s'] / 60:.0f} minutes (the limit of this run)"
    if record.get("returncode") != 0 or m is None:
        return f"failed (exit {record.get('returncode')}; see {record.get('log')})"
    task = record.get("task")
    if task == "causal-lm":
        return f"validation loss {m['loss']:.3f} (perplexity {m['perplexity']:.2f})"
    if task == "sequence-classification":
        return f"accuracy {100 * m['accuracy']:.1f}%"
    if task == "translation":
        return f"BLEU {m['bleu']:.2f}" + (f", ROUGE-L {m['rougeL']:.1f}" if "rougeL" in m else "")
    return json.dumps(m)


def table(records: list[dict]) -> str:
    lines = [
        "| recipe | command (from the repository root) | date | wall time | CPU time | training (Trainer) | "
        "threads / cores | load average during the run (1 min: start, mean, max) | the recipe's own figures | "
        "stated in |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        load = r["load_1min"]
        name = r["recipe"] if r.get("as_shipped") else f"{r['recipe']} (not as shipped: {', '.join(r['overrides'])})"
        lines.append(
            f"| {name} | `{r['environment']} {r['command']}` | {r['started']} | {minutes(r['wall_s'])} | "
            f"{minutes(r['cpu_s'])} | {minutes(r.get('train_runtime_s'))} | {r['omp_num_threads'] or 'unset'} / "
            f"{r['cpu_count']} | {load['start']:.1f}, {load['mean']:.1f}, {load['max']:.1f} | {figures(r)} | "
            f"{STATED.get(r['recipe'], '–')} |"
        )
    return "\n".join(lines)


def report(results: Path = RESULTS, out: Path = HERE / "report.md") -> Path:
    records = load(results)
    text = [
        "# The recipes as shipped (generated by `python -m experiments.recipes_as_shipped report` from results/)",
        "",
        "Each recipe run as a user runs it, one at a time, by `OMP_NUM_THREADS=1 python -m "
        "experiments.recipes_as_shipped run`. The machine has 2 CPU cores and was running other jobs: the load "
        "average says how busy it was, and wall times on free cores are shorter (CPU time is the work itself). "
        "Raw JSON (with each run's whole results.json): results/NAME.json.",
        "",
        table(records),
        "",
        "sst2_minilm_elastic (about 35 minutes per seed here) is measured over 3 seeds by "
        "`experiments/pretrained_elastic/run.py recipe`: see experiments/pretrained_elastic/report.md.",
        "",
    ]
    out.write_text("\n".join(text))
    return out
