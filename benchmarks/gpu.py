"""Every benchmark on one CUDA GPU in one short command (bf16 autocast, SDPA, eager and compiled); a short CPU run
where no GPU is present, so the script itself stays tested.

    python benchmarks/gpu.py            # a few minutes on a GPU; writes benchmarks/results/gpu-*.json
    python benchmarks/gpu.py --cpu      # the short CPU fallback (also taken when CUDA is absent)

Files (on CPU: benchmarks/results/gpu-fallback-cpu-*.json, with device "cpu"):
- gpu-overhead.json: OT GPT-2 (L layers, M Euler steps) vs a plain GPT-2 with M*L layers, training step, eager and
  compiled (OT: hf_ot.compile, regional; unrolled: torch.compile whole), step_ratio_vs_unrolled per variant and
  compiled_speedup_ratio_vs_unrolled; first-compile seconds of each.
- gpu-memory.json: peak memory of a training step without checkpointing, with block checkpointing and with depth-step
  checkpointing (config.ot_checkpoint_steps), for M = 2 and 8 (CUDA: torch.cuda.max_memory_allocated; CPU: the
  allocator's bytes held after the forward, from the profiler).
- gpu-paper-shape.json: hf_ot paper mode vs the hand-written reference (benchmarks/paper_shape.py) at the paper's
  Shakespeare-char shape and batch 64, eager and compiled (reference: torch.compile whole, as nanoGPT does).
- gpu-generation.json: cached greedy decoding tokens/s, OT vs unrolled, and the OT model without cache.
- gpu-compiled-generation.json (when compiling): transformers' compiled static-cache decoding, OT vs unrolled, both
  compiled whole (fullgraph) with mode="reduce-overhead" on CUDA (CUDA graphs: one graph per decoding step needed),
  tokens/s, graph breaks, graphs compiled over 3 prompt lengths (benchmarks/compile_whole.py, fp32/TF32 weights).
Timing: CUDA-synchronised medians of per-repeat ratios, variants alternating.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import time
from pathlib import Path

import torch
from common import build_pair
from compile_whole import static_decoding

import hf_ot


class Bench:
    def __init__(self, device: torch.device, bf16: bool):
        self.device = device
        self.bf16 = bf16

    def autocast(self):
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def timed(self, fn) -> float:
        self.sync()
        start = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - start

    def alternate(self, variants: dict, repeats: int, warmup: int) -> dict:
        for _ in range(warmup):
            for fn in variants.values():
                fn()
        times = {name: [] for name in variants}
        order = list(variants)
        for r in range(repeats):
            for name in order if r % 2 == 0 else order[::-1]:
                times[name].append(self.timed(variants[name]))
        return times


def ratio(times, a, b):
    return statistics.median([x / y for x, y in zip(times[a], times[b])])


def hf_train_step(bench, model, ids):
    def run():
        model.zero_grad(set_to_none=True)
        with bench.autocast():
            out = model(ids, labels=ids, use_cache=False)
            loss = out.loss + out.reg if getattr(out, "reg", None) is not None else out.loss
        loss.backward()

    return run


def first_compile_seconds(bench, step, later_runs=3) -> float:
    first = bench.timed(step)
    return first - statistics.median(bench.timed(step) for _ in range(later_runs))


def overhead(bench, args) -> dict:
    ot, unrolled = build_pair(args.layers, args.steps, args.width, args.heads, args.vocab, args.seq)
    ot, unrolled = ot.to(bench.device).train(), unrolled.to(bench.device).train()
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=bench.device)
    variants = {"ot_eager": hf_train_step(bench, ot, ids), "unrolled_eager": hf_train_step(bench, unrolled, ids)}
    result = {}
    if args.compile:
        ot_c = hf_ot.compile(copy.deepcopy(ot))
        unrolled_c = torch.compile(copy.deepcopy(unrolled))
        variants["ot_compiled"] = hf_train_step(bench, ot_c, ids)
        variants["unrolled_compiled"] = hf_train_step(bench, unrolled_c, ids)
        result["first_compile_s"] = {
            name: first_compile_seconds(bench, variants[name]) for name in ("ot_compiled", "unrolled_compiled")
        }
        result["compile_time_ratio_vs_unrolled"] = (
            result["first_compile_s"]["ot_compiled"] / result["first_compile_s"]["unrolled_compiled"]
        )
    times = bench.alternate(variants, args.repeats, args.warmup)
    result["median_step_s"] = {name: statistics.median(t) for name, t in times.items()}
    result["step_ratio_vs_unrolled"] = {"eager": ratio(times, "ot_eager", "unrolled_eager")}
    if args.compile:
        result["step_ratio_vs_unrolled"]["compiled"] = ratio(times, "ot_compiled", "unrolled_compiled")
        result["compiled_speedup_ratio_vs_unrolled"] = ratio(times, "ot_eager", "ot_compiled") / ratio(
            times, "unrolled_eager", "unrolled_compiled"
        )
    return result


def memory(bench, args) -> dict:
    from torch.profiler import ProfilerActivity, profile

    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=bench.device)
    rows = {}
    for variant in ("no_checkpointing", "block_checkpointing", "step_checkpointing"):
        rows[variant] = {}
        for steps in (2, 8):
            ot, _ = build_pair(args.layers, steps, args.width, args.heads, args.vocab, args.seq)
            ot = ot.to(bench.device).train()
            if variant == "block_checkpointing":
                ot.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            ot.config.ot_checkpoint_steps = variant == "step_checkpointing"
            if bench.device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                hf_train_step(bench, ot, ids)()
                rows[variant][steps] = torch.cuda.max_memory_allocated() - base
            else:
                with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                    with bench.autocast():
                        out = ot(ids, labels=ids, use_cache=False)
                rows[variant][steps] = sum(e.self_cpu_memory_usage for e in prof.key_averages())
                (out.loss + out.reg).backward()
                del out  # freed later inside the next profiling window, it would count negative there
            del ot
    state = args.batch * args.seq * args.width * 4  # the residual stream stays fp32 under autocast
    return {
        "bytes": rows,
        "hidden_state_bytes": state,
        "growth_per_step_in_states": {variant: (row[8] - row[2]) / 6 / state for variant, row in rows.items()},
    }


def paper_shape(bench, args) -> dict:
    import paper_shape as ps

    shape = argparse.Namespace(
        layers=5,
        heads=5,
        width=320,
        steps=5,
        block=args.paper_block,
        vocab=65,
        dropout=0.2,
        activation="gelu",
        reg_lambda=1.0,
    )
    ours, reference = ps.build(shape)
    ours, reference = ours.to(bench.device).train(), reference.to(bench.device).train()
    ids = torch.randint(0, 65, (args.paper_batch, args.paper_block), device=bench.device)
    targets = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -1)], dim=1)

    def ref_step(model):
        def run():
            model.zero_grad(set_to_none=True)
            with bench.autocast():
                _, loss, reg = model(ids, targets)
            (loss + reg).backward()

        return run

    variants = {"hf_ot_eager": hf_train_step(bench, ours, ids), "reference_eager": ref_step(reference)}
    result = {"batch": args.paper_batch, "block": args.paper_block}
    if args.compile:
        variants["hf_ot_compiled"] = hf_train_step(bench, hf_ot.compile(copy.deepcopy(ours)), ids)
        variants["reference_compiled"] = ref_step(torch.compile(copy.deepcopy(reference)))
        result["first_compile_s"] = {
            name: first_compile_seconds(bench, variants[name]) for name in ("hf_ot_compiled", "reference_compiled")
        }
    times = bench.alternate(variants, args.repeats, args.warmup)
    result["median_step_s"] = {name: statistics.median(t) for name, t in times.items()}
    result["train_step_ratio_vs_reference"] = {"eager": ratio(times, "hf_ot_eager", "reference_eager")}
    if args.compile:
        result["train_step_ratio_vs_reference"]["compiled"] = ratio(times, "hf_ot_compiled", "reference_compiled")
    return result


def generation(bench, args) -> dict:
    ot, unrolled = build_pair(
        args.layers, args.steps, args.width, args.heads, args.vocab, args.prompt + args.new_tokens
    )
    ot, unrolled = ot.to(bench.device).eval(), unrolled.to(bench.device).eval()
    ids = torch.randint(1, args.vocab, (1, args.prompt), device=bench.device)

    def decode(model, use_cache):
        def run():
            with torch.no_grad(), bench.autocast():
                model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=args.new_tokens,
                    min_new_tokens=args.new_tokens,
                    do_sample=False,
                    use_cache=use_cache,
                    pad_token_id=0,
                )

        return run

    variants = {
        "ot_cached": decode(ot, True),
        "unrolled_cached": decode(unrolled, True),
        "ot_uncached": decode(ot, False),
    }
    times = bench.alternate(variants, max(2, args.repeats // 3), 1)
    return {
        "tokens_per_s": {name: args.new_tokens / statistics.median(t) for name, t in times.items()},
        "cached_vs_unrolled_ratio": ratio(times, "unrolled_cached", "ot_cached"),
        "cache_speedup": ratio(times, "ot_uncached", "ot_cached"),
    }


def compiled_generation(bench, args) -> dict:
    if not args.compile:
        return {"skipped": "compiling is off (--compile to run it on the CPU)"}
    mode = "reduce-overhead" if bench.device.type == "cuda" else None
    return static_decoding(args, bench.device, mode=mode)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="the short CPU run even when CUDA is available")
    p.add_argument("--compile", dest="compile", action="store_true", default=None, help="default on CUDA only")
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument(
        "--only", nargs="*", choices=["overhead", "memory", "paper_shape", "generation", "compiled_generation"]
    )
    p.add_argument("--out-dir", default=str(Path(__file__).parent / "results"))
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available() and not args.cpu
    bench = Bench(torch.device("cuda" if cuda else "cpu"), bf16=cuda)
    if cuda:  # GPT-2-small blocks; the paper's batch for its shape
        sizes = dict(
            layers=4,
            steps=4,
            width=768,
            heads=12,
            vocab=50257,
            seq=512,
            batch=8,
            repeats=10,
            warmup=3,
            paper_batch=64,
            paper_block=256,
            prompt=128,
            new_tokens=128,
        )
        torch.backends.cuda.matmul.allow_tf32 = True
    else:  # minutes on 2 CPU cores; compiling on CPU takes minutes per model, so it is off unless asked
        sizes = dict(
            layers=2,
            steps=4,
            width=64,
            heads=4,
            vocab=256,
            seq=32,
            batch=2,
            repeats=3,
            warmup=1,
            paper_batch=1,
            paper_block=64,
            prompt=16,
            new_tokens=8,
        )
    args.compile = cuda if args.compile is None else args.compile
    vars(args).update(sizes, bf16=cuda)
    prefix = "gpu-" if cuda else "gpu-fallback-cpu-"
    benches = {
        "overhead": overhead,
        "memory": memory,
        "paper_shape": paper_shape,
        "generation": generation,
        "compiled_generation": compiled_generation,
    }
    for name in args.only or benches:
        start = time.perf_counter()
        result = {
            "device": torch.cuda.get_device_name() if cuda else "cpu",
            "torch": torch.__version__,
            "bf16_autocast": cuda,
            "compiled": args.compile,
            "sizes": sizes,
            **benches[name](bench, args),
        }
        result["wall_s"] = time.perf_counter() - start
        path = Path(args.out_dir) / f"{prefix}{name.replace('_', '-')}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(path, json.dumps(result))


def distributed_eval_across_gpus() -> None:
    """benchmarks/distributed_eval.py on every visible GPU (one process each) against one GPU: the evaluation's
    wall-time speedup and the equality of its results (benchmarks/results/distributed_eval-gpu.json)."""
    count = torch.cuda.device_count()
    if count < 1:
        print("distributed_eval: no CUDA device; run benchmarks/distributed_eval.py for the CPU comparison")
        return
    import distributed_eval

    distributed_eval.main(["--processes", str(count), "--rounds", "1"])  # 1 GPU: 1 vs 1, the script still runs


if __name__ == "__main__":
    main()
    distributed_eval_across_gpus()
