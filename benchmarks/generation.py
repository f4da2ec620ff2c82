"""Decode speed of cached OT generation, side by side in one run (CPU by default).

(a) OT GPT-2 with L layers and M steps, cached (one KV slot per step and layer);
(b) a plain GPT-2 with M*L layers, cached: the same arithmetic per token;
(c) the OT model without cache (full-prefix recompute per token).
Targets: cached_vs_unrolled_ratio = a/b >= 0.95, cache_speedup = a/c >= 5. Medians over repeats, order alternated.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch
from common import build_pair, parser


def tokens_per_second(model, ids, new_tokens, use_cache):
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            use_cache=use_cache,
            pad_token_id=0,
        )
    elapsed = time.perf_counter() - start
    assert out.shape[1] - ids.shape[1] == new_tokens
    return new_tokens * ids.shape[0] / elapsed


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "generation.json"))
    args = p.parse_args(argv)

    ot, unrolled = build_pair(
        args.layers, args.steps, args.width, args.heads, args.vocab, args.prompt + args.new_tokens
    )
    ot.eval()
    unrolled.eval()
    ids = torch.randint(1, args.vocab, (args.batch, args.prompt), generator=torch.Generator().manual_seed(0))

    variants = {
        "ot_cached": lambda: tokens_per_second(ot, ids, args.new_tokens, True),
        "unrolled_cached": lambda: tokens_per_second(unrolled, ids, args.new_tokens, True),
        "ot_uncached": lambda: tokens_per_second(ot, ids, args.new_tokens, False),
    }
    for model in (ot, unrolled):  # warm-up
        tokens_per_second(model, ids, 8, True)
    rates = {name: [] for name in variants}
    order = list(variants)
    for r in range(args.repeats):
        for name in order if r % 2 == 0 else order[::-1]:
            rates[name].append(variants[name]())
    result = {
        "device": "cpu",
        "torch_threads": torch.get_num_threads(),
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "median_tokens_per_s": {name: statistics.median(v) for name, v in rates.items()},
        "cached_vs_unrolled_ratio": statistics.median(
            [a / b for a, b in zip(rates["ot_cached"], rates["unrolled_cached"])]
        ),
        "cache_speedup": statistics.median([a / c for a, c in zip(rates["ot_cached"], rates["ot_uncached"])]),
        "targets": {"cached_vs_unrolled_ratio": 0.95, "cache_speedup": 5.0},
    }
    result["meets_targets"] = {key: result[key] >= target for key, target in result["targets"].items()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
