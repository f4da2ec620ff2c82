"""Torch threads for the packaged recipes: each recipe trained for a few steps at torch's old default (one thread per
core), at `hf-ot`'s default and at one thread, side by side in one run.

Each recipe runs as `hf-ot train NAME` (a fresh process per run, as a user runs it) with short overrides (--steps
optimizer steps, evaluation cut to a few examples, nothing saved mid-run). The variants of one recipe run back to back,
their order rotated from recipe to recipe and repeat to repeat, so a change in the machine's load falls on all of
them; each run records the load average before it. Figures: the training phase's seconds (Trainer's train_runtime),
the whole process's wall and CPU seconds, and the ratios of each variant's time to the new default's (medians over
repeats). Writes benchmarks/results/threads.json.

    python benchmarks/threads.py [--steps 20] [--repeats 1] [--recipes quickstart translation_t5 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPES = [
    "quickstart",
    "causal_lm_shakespeare_char",
    "causal_lm_shakespeare_char_baseline",
    "sst2_minilm",
    "sst2_minilm_elastic",
    "translation_t5",
    "translation_bart",
]
# short runs: the steps asked for, the evaluation after them on a few examples, no checkpoint, no grid
SHORT = {
    "causal-lm": ["data.max_eval_blocks=8", "evaluation.metrics=[]"],
    "sequence-classification": ["data.max_eval_samples=32", "evaluation.elasticity=false"],
    "translation": ["data.max_eval_samples=8", "evaluation.generate_samples=8", "evaluation.metrics=[]"],
}


def torch_default_threads() -> int:
    """torch's own default (OMP_NUM_THREADS unset), as a process started without hf-ot sees it."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    code = "import torch; print(torch.get_num_threads())"
    return int(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout)


def variants(default_threads: int) -> dict[str, tuple[dict, list[str]]]:
    """name -> (environment changes, extra arguments); None in the environment: unset."""
    return {
        # the CLI before it chose: torch's default threads, tokenizers' parallelism on
        "torch_default": (
            {"OMP_NUM_THREADS": None, "TOKENIZERS_PARALLELISM": "true"},
            ["--threads", str(default_threads)],
        ),
        "hf_ot_default": ({"OMP_NUM_THREADS": None, "TOKENIZERS_PARALLELISM": None}, []),
        "one_thread": ({"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": None}, []),
    }


def task_of(name: str) -> str:
    sys.path.insert(0, str(ROOT))
    from hf_ot.recipes.config import load_config

    return load_config(name).task


def run_once(name: str, task: str, steps: int, env_changes: dict, extra: list[str], out: Path, cwd: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for key, value in env_changes.items():
        env.pop(key, None) if value is None else env.__setitem__(key, value)
    sets = [f"training.max_steps={steps}", "training.save_strategy=no", "training.eval_strategy=no"]
    sets += [f"training.logging_steps={steps}", *SHORT[task]]
    command = [sys.executable, "-m", "hf_ot.cli", "train", name, "--output-dir", str(out), "--overwrite", "--json"]
    command += [a for s in sets for a in ("--set", s)] + extra
    load = os.getloadavg()[0]
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=cwd)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dict(train_s=result["train_runtime_s"], wall_s=round(wall, 2), cpu_s=round(cpu, 2), load_before=load)


def write_report(table: dict, args, kinds: dict, default_threads: int) -> dict:
    """args.out: the runs so far and, per recipe, the medians and the ratios to hf-ot's default."""
    summary = {}
    for recipe, runs in table.items():
        median = {
            v: {k: statistics.median(x[k] for x in rs) for k in ("train_s", "wall_s", "cpu_s")}
            for v, rs in runs.items()
        }
        if not (new := median.get("hf_ot_default")):
            continue
        summary[recipe] = {
            "median": median,
            "train_ratio_vs_hf_ot_default": {v: round(m["train_s"] / new["train_s"], 2) for v, m in median.items()},
            "wall_ratio_vs_hf_ot_default": {v: round(m["wall_s"] / new["wall_s"], 2) for v, m in median.items()},
        }
    sys.path.insert(0, str(ROOT))
    from hf_ot.env import choose_threads

    report = {
        "what": "hf-ot train NAME for --steps steps per variant: torch's default threads vs hf-ot's default vs 1",
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu_count": os.cpu_count(),
        "torch_default_threads": default_threads,
        "hf_ot_default": dict(zip(("threads", "why"), choose_threads(environ={}))),
        "steps": args.steps,
        "repeats": args.repeats,
        "variants": {v: {"environment": e, "arguments": a} for v, (e, a) in kinds.items()},
        "summary": summary,
        "runs": table,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--recipes", nargs="*", default=RECIPES)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "threads.json"))
    p.add_argument("--cwd", default=str(ROOT), help="where the runs start (a checkout: ../shared/data beside it)")
    args = p.parse_args()
    default_threads = torch_default_threads()
    kinds = variants(default_threads)
    names = list(kinds)
    table: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for i, recipe in enumerate(args.recipes):
                task = task_of(recipe)
                shift = (i + r) % len(names)  # rotated order: each variant runs first, second, last in turn
                for variant in names[shift:] + names[:shift]:
                    env_changes, extra = kinds[variant]
                    run = run_once(recipe, task, args.steps, env_changes, extra, Path(tmp) / "run", args.cwd)
                    table.setdefault(recipe, {}).setdefault(variant, []).append(run)
                    print(recipe, variant, run, file=sys.stderr, flush=True)
                    write_report(table, args, kinds, default_threads)  # (so far: a stopped run keeps its figures)
    summary = write_report(table, args, kinds, default_threads)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
