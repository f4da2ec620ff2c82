"""Depth-speculative decoding: tokens/s of plain cached greedy generation at the trained setting (Euler M = 5) vs the
same model drafting with its own field at fewer steps (model.generate(..., draft_num_steps=, draft_solver=,
num_draft_tokens=)), 256 new tokens, for char-level OT GPTs trained with lambda = 1 and lambda = 0
(benchmarks/char_models.py, a fixed number of optimizer steps each on Tiny Shakespeare, cached under
runs/bench-char/) at two sizes. Writes benchmarks/results/speculative.json.

Draft tokens per round: 2, 4, 8 or 16 every round, or "auto" (transformers' default: 20, a round cut where the draft's
confidence falls under a threshold it tunes as decoding goes). `block_time_share`: the part of plain generation's
time spent inside the transformer blocks (the rest is Python overhead of generate and the flow), which says whether
block arithmetic dominates at that size. `teacher_forced_agreement`: on fixed validation blocks, the part of positions
where the draft setting's most likely next token is the trained setting's (what greedy acceptance follows, measured
on text the model did not write). `sample`: the start of the generated text (the same for every row: greedy output is
identical), to show what the model writes.

    python benchmarks/speculative.py [--train-steps 1000]
    # the longer-trained small pair (does agreement grow with training?):
    python benchmarks/speculative.py --sizes small --train-steps 3000 \
        --out benchmarks/results/speculative_small_3000steps.json
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from char_models import data, train, val_batches

OUT = Path(__file__).resolve().parent / "results" / "speculative.json"
NEW = 256
DRAFTS = [(1, "euler"), (1, "heun"), (2, "euler")]  # (draft steps, solver)
TOKENS = [2, 4, 8, 16, None]  # None: transformers' default round (20, cut by the draft's confidence)
TEXT = "shakespeare"  # the paper's char-level text (../shared/data); greedy decoding of it writes words
SIZES = {"large": (384, 3, 6), "small": (128, 3, 4)}  # width, blocks, heads


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


@torch.no_grad()
def agreement(model, tok) -> dict:
    """Per draft setting, the part of validation positions where the draft's argmax is the trained setting's; the
    draft is hf_ot's own (`ot_draft_model`: the same modules, its own settings), as generate uses it."""
    inputs = [b["input_ids"] for b in val_batches(tok, n=4, text=TEXT)]
    target = [model(x, use_cache=False).logits.argmax(-1) for x in inputs]
    total = sum(t.numel() for t in target)
    result = {}
    for steps, solver in DRAFTS:
        draft = model.ot_draft_model(ot_num_steps=steps, ot_solver=solver)
        same = sum(int((draft(x, use_cache=False).logits.argmax(-1) == t).sum()) for x, t in zip(inputs, target))
        result[steps, solver] = round(same / total, 4)
    return result


def measure(model, tok, ids, repeats):
    """Plain and speculative runs side by side (alternating), speedup = median of the per-pair time ratios."""
    plain, plain_s, _ = run(model, ids)  # warm-up and the reference tokens
    rows, plain_times = [], []
    agree = agreement(model, tok)
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
                    "teacher_forced_agreement": agree[steps, solver],
                    "tokens_identical": identical,
                }
            )
    sample = tok.decode(plain[0, ids.shape[1] :].tolist())[:120]
    return {"plain_tokens_per_s": round(NEW / statistics.median(plain_times), 1), "sample": sample, "rows": rows}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-steps", type=int, default=1000, help="optimizer steps per model (the shipped run: 1000)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--sizes", nargs="*", choices=list(SIZES), default=list(SIZES), help="sizes to measure (none: summarise)"
    )
    p.add_argument("--lambdas", type=float, nargs="+", default=[1.0, 0.0])
    p.add_argument("--out", type=Path, default=OUT, help=f"results file (default {OUT.relative_to(OUT.parents[2])})")
    args = p.parse_args()
    out_file = args.out
    torch.set_num_threads(args.threads)
    # a run of some sizes or lambdas updates the others' entries in place (two processes can share the work)
    results = json.loads(out_file.read_text()) if out_file.is_file() else {}
    results |= {
        "protocol": f"greedy, {NEW} new tokens after a 32-character validation prompt, batch 1, cached; "
        f"median of {args.repeats} ratios of plain / speculative runs side by side; torch threads {args.threads}; "
        "CPU; trained setting Euler M = 5 "
        "(paper mode, no LayerNorms); acceptance = accepted draft tokens / drafted tokens"
    }
    written = {"protocol"}
    for size in args.sizes:
        width, layers, heads = SIZES[size]
        for lam in args.lambdas:
            model, tok, info = train(lam, width, layers, heads, train_steps=args.train_steps, text=TEXT)
            _, val = data(tok, TEXT)
            ids = val[:32].unsqueeze(0)
            key = f"{size}_lambda{lam:g}"
            written.add(key)
            results[key] = {
                **info,
                "width": width,
                "layers": layers,
                "block_time_share": block_time_share(model, ids),
                **measure(model, tok, ids, args.repeats),
            }
            print(key, json.dumps(results[key]), flush=True)
    if out_file.is_file():  # another process may have written its entries meanwhile
        results = json.loads(out_file.read_text()) | {k: v for k, v in results.items() if k in written}
    for size in SIZES:
        if not {f"{size}_lambda1", f"{size}_lambda0"} <= results.keys():
            continue
        one = results[f"{size}_lambda1"]
        best = max(one["rows"], key=lambda r: r["speedup"])
        zero = max(results[f"{size}_lambda0"]["rows"], key=lambda r: r["speedup"])
        suffix = "" if size == "large" else "_small"
        results[f"speculative_speedup_lambda1{suffix}"] = best["speedup"]
        results[f"acceptance_rate_lambda1{suffix}"] = best["acceptance_rate"]
        results[f"speculative_speedup_lambda0{suffix}"] = zero["speedup"]
        results[f"acceptance_rate_lambda0{suffix}"] = zero["acceptance_rate"]
        setting = ("draft_num_steps", "draft_solver", "num_draft_tokens")
        results[f"best{suffix}"] = {k: best[k] for k in setting}
        results[f"best_lambda0{suffix}"] = {k: zero[k] for k in setting}
        results[f"model_size{suffix}"] = f"{one['parameters']:,} parameters ({one['layers']} blocks x {one['width']})"
    results["tokens_identical"] = all(
        r["tokens_identical"] for k, v in results.items() if isinstance(v, dict) for r in v.get("rows", [])
    )
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
