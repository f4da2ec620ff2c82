"""torch.compile (inductor) of an OT GPT-2 with regional compilation against an unrolled plain GPT-2 compiled whole.

OT GPT-2 (L layers, M Euler steps, residual mode, dt = 1) compiled with `hf_ot.compile(model)` (each block compiled
once, reused for every application) against a plain GPT-2 with M*L layers compiled with `torch.compile(model)`:
the same block arithmetic per training step (forward + backward of loss + reg).
Fields and targets:
- compiled_speedup_ratio_vs_unrolled = (OT eager / OT compiled) / (unrolled eager / unrolled compiled)   >= 0.9
- compile_time_ratio_vs_unrolled = OT first-compile s / unrolled first-compile s                         <= 0.5
- compile_time_growth_m8_over_m2 = first-compile s of the OT model at M=8 / at M=2                        <= 1.2
- recompiles_when_m_changes = new graphs after changing M (2, 8) and the solver (heun) of the compiled OT model = 0
First-compile seconds = first compiled training step - median compiled step (what compiling cost). Each model runs
in its own process with an empty inductor cache and inductor's one-time set-up paid beforehand on a toy function, so
no model profits from another's compilation. Speedups come from alternating repeats of an eager copy and the
compiled model in that process; compiled losses are checked against the eager copy's.
--whole-model-ot adds the OT model under whole-model torch.compile (the solver loop unrolled into one graph).
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import build_pair, parser


def step_time(model, ids):
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    out = model(ids, labels=ids)
    loss = out.loss + out.reg if getattr(out, "reg", None) is not None else out.loss
    loss.backward()
    return time.perf_counter() - start, loss.item()


def worker(args) -> dict:
    """One model, one process: eager vs compiled training steps, first-compile time, recompiles."""
    from torch._dynamo.utils import counters

    import hf_ot

    torch.set_num_threads(args.threads)
    torch.compile(lambda x: (x * 2).sin())(torch.ones(4))  # inductor's one-time set-up (compiler checks, headers)
    torch._dynamo.reset()
    steps = {"ot_m2": 2, "ot_m8": 8}.get(args.worker, args.steps)
    ot, unrolled = build_pair(args.layers, steps, args.width, args.heads, args.vocab, args.seq)
    model = unrolled if args.worker == "unrolled" else ot
    model.train()
    eager = copy.deepcopy(model)
    if args.worker in ("unrolled", "ot_whole"):
        compiled = torch.compile(model)
    else:
        compiled = hf_ot.compile(model)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(0))
    for _ in range(args.warmup):
        step_time(eager, ids)
    first, first_loss = step_time(compiled, ids)
    _, eager_loss = step_time(eager, ids)
    result = {
        "variant": args.worker,
        "steps": steps,
        "first_compiled_step_s": first,
        "compiled_minus_eager_loss": first_loss - eager_loss,
    }
    if args.worker in ("ot_m2", "ot_m8"):  # compile time only
        result["compiled_step_s"] = [step_time(compiled, ids)[0] for _ in range(3)]
        result["compile_s"] = first - statistics.median(result["compiled_step_s"])
        return result
    times = {"eager": [], "compiled": []}
    for r in range(args.repeats):
        for name in ("eager", "compiled") if r % 2 == 0 else ("compiled", "eager"):
            times[name].append(step_time(eager if name == "eager" else compiled, ids)[0])
    result["median_step_s"] = {name: statistics.median(t) for name, t in times.items()}
    result["speedup"] = statistics.median([e / c for e, c in zip(times["eager"], times["compiled"])])
    result["compile_s"] = first - result["median_step_s"]["compiled"]
    result["graphs_after_first_step"] = counters["stats"]["unique_graphs"]
    if args.worker != "unrolled":
        before = counters["stats"]["unique_graphs"]
        for new_steps, solver in ((2, "euler"), (8, "euler"), (args.steps, "heun")):
            model.config.ot_num_steps, model.config.ot_solver = new_steps, solver
            step_time(compiled, ids)
        model.config.ot_num_steps, model.config.ot_solver = args.steps, "euler"
        result["recompiles_when_m_changes"] = counters["stats"]["unique_graphs"] - before
    return result


def run_worker(name, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="hf_ot_inductor_") as cache, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        argv = [sys.executable, __file__, "--worker", name, "--worker-out", str(out)] + [
            f"--{key.replace('_', '-')}={value}"
            for key, value in vars(args).items()
            if key in ("layers", "steps", "width", "heads", "vocab", "seq", "batch", "repeats", "warmup", "threads")
        ]
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        subprocess.run(argv, check=True, env=env)
        return json.loads(out.read_text())


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per model process (1: steadier on a shared host, where waiting threads stall)",
    )
    p.add_argument("--whole-model-ot", action="store_true", help="also compile the OT model whole (slow)")
    p.add_argument("--worker", help=argparse_hidden())
    p.add_argument("--worker-out", help=argparse_hidden())
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "compile.json"))
    args = p.parse_args(argv)
    if args.worker:
        Path(args.worker_out).write_text(json.dumps(worker(args)))
        return

    names = ["ot", "unrolled", "ot_m2", "ot_m8"] + (["ot_whole"] if args.whole_model_ot else [])
    runs = {name: run_worker(name, args) for name in names}
    ot, unrolled = runs["ot"], runs["unrolled"]
    result = {
        "device": "cpu",
        "torch_threads": args.threads,
        "torch": torch.__version__,
        "config": {k: v for k, v in vars(args).items() if k not in ("out", "worker", "worker_out")},
        "runs": runs,
        "compiled_speedup_ratio_vs_unrolled": ot["speedup"] / unrolled["speedup"],
        "compile_time_ratio_vs_unrolled": ot["compile_s"] / unrolled["compile_s"],
        "compile_time_growth_m8_over_m2": runs["ot_m8"]["compile_s"] / runs["ot_m2"]["compile_s"],
        "recompiles_when_m_changes": ot["recompiles_when_m_changes"],
        "targets": {
            "compiled_speedup_ratio_vs_unrolled": [">=", 0.9],
            "compile_time_ratio_vs_unrolled": ["<=", 0.5],
            "compile_time_growth_m8_over_m2": ["<=", 1.2],
            "recompiles_when_m_changes": ["<=", 0],
        },
    }
    result["meets_targets"] = {
        key: (result[key] >= bound if op == ">=" else result[key] <= bound)
        for key, (op, bound) in result["targets"].items()
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
