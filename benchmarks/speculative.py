"""Depth-speculative decoding: tokens/s of plain cached greedy generation at the trained setting (Euler M = 5) vs the
same model drafting with its own field at fewer steps (model.generate(..., draft_num_steps=, draft_solver=,
num_draft_tokens=)), 256 new tokens, for char-level OT GPTs trained with lambda = 1 and lambda = 0
(benchmarks/char_models.py) at two sizes. Writes benchmarks/results/speculative.json.

Draft tokens per round: 4, 8 or 16 every round, or "auto" (transformers' default: 20, a round cut where the draft's
confidence falls under a threshold it tunes as decoding goes). `block_time_share`: the part of plain generation's
time spent inside the transformer blocks (the rest is Python overhead of generate and the flow), which says whether
block arithmetic dominates at that size.

    python benchmarks/speculative.py [--seconds 300]
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from char_models import data, train

OUT = Path(__file__).resolve().parent / "results" / "speculative.json"
NEW = 256
DRAFTS = [(1, "euler"), (1, "heun")]  # (draft steps, solver); --wide adds 2 Euler steps
TOKENS = [4, 8, 16, None]  # None: transformers' default round (20, cut by the draft's confidence)
SIZES = {"large": (512, 3, 8, 300), "small": (256, 3, 4, 240)}  # width, blocks, heads, training seconds


class Counter:
    """Forward calls of the target and of its draft (the draft shares the model's hooks: it is a copy over the same
    modules), for the acceptance rate."""

    def __init__(self, model):
        self.model, self.target, self.draft = model, 0, 0
        self.handle = model.register_forward_pre_hook(self)

    def __call__(self, module, args):
        if module is self.model:
            self.target += 1
        else:
            self.draft += 1


def run(model, ids, **kwargs):
    counter = Counter(model)
    start = time.perf_counter()
    out = model.generate(ids, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0, **kwargs)
    seconds = time.perf_counter() - start
    counter.handle.remove()
    # assisted decoding: each target call verifies one round of drafted tokens (one draft call each) and adds one
    # token of its own, so accepted draft tokens = new tokens - rounds
    return out, seconds, {"rounds": counter.target, "drafted": counter.draft, "accepted": NEW - counter.target}


def block_time_share(model, ids) -> float:
    """Part of plain generation's wall time spent inside the transformer blocks (hooks around each block)."""
    spent, started = [0.0], {}

    def pre(module, args):
        started[id(module)] = time.perf_counter()

    def post(module, args, output):
        spent[0] += time.perf_counter() - started.pop(id(module))

    blocks = list(model.transformer.h)
    handles = [h for b in blocks for h in (b.register_forward_pre_hook(pre), b.register_forward_hook(post))]
    try:
        _, seconds, _ = run(model, ids)
    finally:
        for h in handles:
            h.remove()
    return round(spent[0] / seconds, 3)


def measure(model, ids, repeats):
    """Plain and speculative runs side by side (alternating), speedup = median of the per-pair time ratios."""
    plain, plain_s, _ = run(model, ids)  # warm-up and the reference tokens
    rows, plain_times = [], []
    for steps, solver in DRAFTS:
        for tokens in TOKENS:
            ratios, times, identical = [], [], True
            for _ in range(repeats):
                _, p, _ = run(model, ids)
                # tokens None: transformers' default round, the draft's confidence decides where it stops
                round_length = {} if tokens is None else {"num_draft_tokens": tokens}
                out, s, counts = run(model, ids, draft_num_steps=steps, draft_solver=solver, **round_length)
                ratios.append(p / s)
                times.append(s)
                plain_times.append(p)
                identical &= bool(torch.equal(out, plain))
            rows.append(
                {
                    "draft_num_steps": steps,
                    "draft_solver": solver,
                    "num_draft_tokens": "auto" if tokens is None else tokens,
                    "tokens_per_s": round(NEW / statistics.median(times), 1),
                    "speedup": round(statistics.median(ratios), 3),
                    "acceptance_rate": round(counts["accepted"] / max(counts["drafted"], 1), 3),
                    "tokens_identical": identical,
                }
            )
    return {"plain_tokens_per_s": round(NEW / statistics.median(plain_times), 1), "rows": rows}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=None, help="training budget per model (default: per size)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--wide", action="store_true", help="also 2 Euler draft steps")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.wide:
        DRAFTS.append((2, "euler"))
    results = {
        "protocol": f"greedy, {NEW} new tokens after a 32-character validation prompt, batch 1, cached; "
        f"median of {args.repeats} ratios of plain / speculative runs side by side; torch threads {args.threads}; "
        "CPU; trained setting Euler M = 5 "
        "(paper mode, no LayerNorms); acceptance = accepted draft tokens / drafted tokens"
    }
    for size, (width, layers, heads, seconds) in SIZES.items():
        for lam in (1.0, 0.0):
            model, tok, info = train(lam, width, layers, heads, args.seconds or seconds)
            _, val = data(tok)
            ids = val[:32].unsqueeze(0)
            key = f"{size}_lambda{lam:g}"
            results[key] = {
                **info,
                "width": width,
                "layers": layers,
                "block_time_share": block_time_share(model, ids),
                **measure(model, ids, args.repeats),
            }
            print(key, json.dumps(results[key]), flush=True)
    for size in SIZES:
        one = results[f"{size}_lambda1"]
        best = max(one["rows"], key=lambda r: r["speedup"])
        zero = max(results[f"{size}_lambda0"]["rows"], key=lambda r: r["speedup"])
        suffix = "" if size == "large" else "_small"
        results[f"speculative_speedup_lambda1{suffix}"] = best["speedup"]
        results[f"acceptance_rate_lambda1{suffix}"] = best["acceptance_rate"]
        results[f"speculative_speedup_lambda0{suffix}"] = zero["speedup"]
        results[f"acceptance_rate_lambda0{suffix}"] = zero["acceptance_rate"]
        results[f"best{suffix}"] = {k: best[k] for k in ("draft_num_steps", "draft_solver", "num_draft_tokens")}
        results[f"model_size{suffix}"] = f"{one['parameters']:,} parameters ({one['layers']} blocks x {one['width']})"
    results["tokens_identical"] = all(
        r["tokens_identical"] for k, v in results.items() if isinstance(v, dict) for r in v.get("rows", [])
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
