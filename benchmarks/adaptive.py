"""Adaptive depth: validation loss against field evaluations per forward, fixed grids (Euler, Heun, RK4 at M') vs
error-controlled solvers (heun_euler, bosh3, dopri5 over rtol = atol), for char-level OT GPTs trained with lambda = 0
and lambda = 1 (benchmarks/char_models.py). Writes benchmarks/results/adaptive.json.

    python benchmarks/adaptive.py [--seconds 120]
"""

import argparse
import json
from pathlib import Path

import torch
from char_models import train, val_batches

from hf_ot.models.ot_solver import num_stages

OUT = Path(__file__).resolve().parent / "results" / "adaptive.json"


def evaluate(model, batches):
    losses, evaluations = [], []
    with torch.no_grad():
        for b in batches:
            out = model(**b, use_cache=False)
            losses.append(out.loss.item())
            n = out.num_field_evaluations
            evaluations.append(n if n is not None else model.config.ot_num_steps * num_stages(model.config.ot_solver))
    return sum(losses) / len(losses), sum(evaluations) / len(evaluations)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=120, help="training budget per model")
    p.add_argument("--width", type=int, default=96)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--lambdas", type=float, nargs="+", default=[1.0, 0.0])
    p.add_argument("--tols", type=float, nargs="+", default=[1e-1, 3e-2, 1e-2, 1e-3], help="rtol = atol values")
    args = p.parse_args()
    torch.set_num_threads(1)
    results = {
        "protocol": "mean validation loss over 8 batches of 16 x 64 characters; evaluations per forward "
        "(adaptive: mean over batches, trial steps included); the trained setting is Euler M = 5"
    }
    previous = json.loads(OUT.read_text()) if OUT.is_file() else {}
    results = {**previous, **results}  # one lambda at a time: the others' rows are kept
    for lam in args.lambdas:
        model, tok, info = train(lam, args.width, args.layers, 4, args.seconds)
        batches = val_batches(tok)
        rows = []
        for solver in ("euler", "heun", "rk4"):
            for m in (1, 2, 3, 5, 10):
                model.config.ot_solver, model.config.ot_num_steps = solver, m
                loss, ev = evaluate(model, batches)
                rows.append({"solver": solver, "M": m, "tol": None, "evaluations": ev, "loss": round(loss, 4)})
        for solver in ("heun_euler", "bosh3", "dopri5"):
            for tol in args.tols:
                model.config.ot_solver, model.config.ot_num_steps = solver, 1
                model.config.ot_rtol = model.config.ot_atol = tol
                loss, ev = evaluate(model, batches)
                rows.append(
                    {"solver": solver, "M": None, "tol": tol, "evaluations": round(ev, 2), "loss": round(loss, 4)}
                )
        model.config.ot_solver, model.config.ot_num_steps = "euler", 5
        trained, _ = evaluate(model, batches)
        results[f"lambda{lam:g}"] = {
            **info,
            "width": args.width,
            "layers": args.layers,
            "trained_loss": round(trained, 4),
            "rows": rows,
        }
        print(json.dumps(results[f"lambda{lam:g}"]), flush=True)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
