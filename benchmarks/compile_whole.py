"""Whole-model torch.compile of an OT GPT-2 against an unrolled plain GPT-2 with the same arithmetic, in training
steps and in compiled static-cache decoding (transformers' fast path: generate(cache_implementation="static") with a
CompileConfig), beside regional compilation (benchmarks/compile.py).

OT GPT-2 (L layers, M Euler steps, residual mode, dt = 1) vs a plain GPT-2 with M*L layers (benchmarks/common.py).
Fields and targets:
- graph_breaks: dynamo graph breaks of the OT forward (torch._dynamo.explain), training and decoding         = 0
- train_step_ratio = unrolled compiled step s / OT compiled step s (both torch.compile whole)                  >= 0.95
- decode_tokens_per_s_ratio = OT compiled tokens/s / unrolled compiled tokens/s (static cache, compiled step)  >= 0.95
- decode_graphs_over_prompt_lengths: graphs dynamo compiled for OT decoding over 3 prompt lengths (longest
  first: the static cache of the first generate is reused)                                                    = 1
Timings are medians of alternating repeats after a warm-up that pays every compilation. On CUDA the decoding step is
compiled with mode="reduce-overhead" (CUDA graphs, one graph needed); on the CPU with inductor's default mode.

    python benchmarks/compile_whole.py                  # CPU, a few minutes; writes results/compile_whole.json
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch
from common import build_pair, parser
from transformers.generation.configuration_utils import CompileConfig


class GraphCounter:
    """A backend wrapper counting the graphs handed to `backend` (generate deep-copies its CompileConfig)."""

    def __init__(self, backend="inductor", mode=None):
        self.graphs = 0
        self.backend = backend
        self.mode = mode

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        from torch._dynamo.backends.registry import lookup_backend

        if self.backend == "inductor":
            from torch._inductor.compile_fx import compile_fx

            return compile_fx(gm, example_inputs, mode=self.mode) if self.mode else compile_fx(gm, example_inputs)
        return lookup_backend(self.backend)(gm, example_inputs)

    def __deepcopy__(self, memo):
        return self


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def alternate(variants: dict, repeats: int, device) -> dict:
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(repeats):
        for name in list(variants) if r % 2 == 0 else list(variants)[::-1]:
            sync(device)
            start = time.perf_counter()
            variants[name]()
            sync(device)
            times[name].append(time.perf_counter() - start)
    return times


def graph_breaks(model, *args, **kwargs) -> int:
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(*args, **kwargs)
    torch._dynamo.reset()
    return explained.graph_break_count


def training(args, device) -> dict:
    ot, unrolled = build_pair(args.layers, args.steps, args.width, args.heads, args.vocab, args.seq)
    ot, unrolled = ot.to(device).train(), unrolled.to(device).train()
    # GPT2LMHeadModel names no loss type and warns about it in every forward, a graph break under fullgraph=True; its
    # loss is ForCausalLM's (the OT model sets the same, ot_model.py)
    unrolled.loss_type = "ForCausalLM"
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(0)).to(device)
    breaks = graph_breaks(ot, ids, labels=ids)
    compiled = {"ot": torch.compile(ot, fullgraph=True), "unrolled": torch.compile(unrolled, fullgraph=True)}

    def step(model):
        def run():
            model.zero_grad(set_to_none=True)
            out = model(ids, labels=ids)
            (out.loss + out.reg if getattr(out, "reg", None) is not None else out.loss).backward()

        return run

    variants = {name: step(model) for name, model in compiled.items()}
    first = {}
    for name, run in variants.items():  # pays compilation
        start = time.perf_counter()
        run()
        first[name] = time.perf_counter() - start
    times = alternate(variants, args.repeats, device)
    median = {name: statistics.median(t) for name, t in times.items()}
    return {
        "graph_breaks": breaks,
        "first_step_s": first,
        "median_step_s": median,
        "train_step_ratio": median["unrolled"] / median["ot"],
    }


def static_decoding(args, device, mode=None) -> dict:
    """Compiled static-cache greedy decoding, OT vs unrolled; graphs compiled over 3 prompt lengths."""
    prompts = [args.prompt + 4, args.prompt + 2, args.prompt]
    ot, unrolled = build_pair(args.layers, args.steps, args.width, args.heads, args.vocab, prompts[0] + args.new_tokens)
    ot, unrolled = ot.to(device).eval(), unrolled.to(device).eval()
    ids = torch.randint(1, args.vocab, (1, prompts[0]), generator=torch.Generator().manual_seed(1)).to(device)
    breaks = graph_breaks(ot, ids[:, :1], use_cache=False)
    counters = {name: GraphCounter(mode=mode) for name in ("ot", "unrolled")}

    def decode(model, counter, length=prompts[0]):
        config = CompileConfig(backend=counter, fullgraph=True, mode=None)
        config._compile_all_devices = True  # transformers compiles the decoding step by itself on accelerators only

        def run():
            prompt = ids[:, :length]
            with torch.no_grad():
                return model.generate(
                    prompt,
                    attention_mask=torch.ones_like(prompt),
                    max_new_tokens=args.new_tokens,
                    min_new_tokens=args.new_tokens,
                    do_sample=False,
                    pad_token_id=0,
                    cache_implementation="static",
                    compile_config=config,
                )

        return run

    tokens = {}
    for name, model in (("ot", ot), ("unrolled", unrolled)):
        for length in prompts:  # compiles once, then reuses the graph for shorter prompts
            tokens[(name, length)] = decode(model, counters[name], length)()
    graphs = {name: counter.graphs for name, counter in counters.items()}
    variants = {name: decode(model, counters[name]) for name, model in (("ot", ot), ("unrolled", unrolled))}
    times = alternate(variants, args.repeats, device)
    per_s = {name: args.new_tokens / statistics.median(t) for name, t in times.items()}
    return {
        "mode": mode or "default",
        "prompt_lengths": prompts,
        "graph_breaks": breaks,
        "decode_graphs_over_prompt_lengths": graphs,
        "recompiles_over_prompt_lengths": {name: n - 1 for name, n in graphs.items()},
        "tokens_per_s": per_s,
        "decode_tokens_per_s_ratio": per_s["ot"] / per_s["unrolled"],
    }


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared host)")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "compile_whole.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train = training(args, device)
    decode = static_decoding(args, device, mode="reduce-overhead" if device.type == "cuda" else None)
    result = {
        "device": device.type,
        "torch": torch.__version__,
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "training": train,
        "decoding": decode,
        "targets": {
            "graph_breaks": ["<=", 0],
            "train_step_ratio": [">=", 0.95],
            "decode_tokens_per_s_ratio": [">=", 0.95],
            "ot_recompiles_over_prompt_lengths": ["<=", 0],
        },
    }
    measured = {
        "graph_breaks": train["graph_breaks"] + decode["graph_breaks"],
        "train_step_ratio": train["train_step_ratio"],
        "decode_tokens_per_s_ratio": decode["decode_tokens_per_s_ratio"],
        "ot_recompiles_over_prompt_lengths": decode["recompiles_over_prompt_lengths"]["ot"],
    }
    result["meets_targets"] = {
        key: (measured[key] >= bound if op == ">=" else measured[key] <= bound)
        for key, (op, bound) in result["targets"].items()
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
