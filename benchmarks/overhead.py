"""Training-step overhead of the OT integrator, measured side by side in one run (CPU by default).

(1) OT GPT-2 with L layers and M Euler steps (residual mode, dt = 1) against a plain GPT-2 with M*L layers: the same
    block arithmetic, so the ratio is the integrator's own cost.  Target: step_ratio_vs_unrolled <= 1.05.
(2) The OT model trained with loss + lambda * reg (lambda > 0) against loss alone (lambda = 0).
    Target: reg_overhead_ratio <= 1.02.
(3) Activation memory: bytes saved for backward (counted exactly with saved_tensors_hooks, so not noisy) for
    M = 1, 2, 4, 8, without checkpointing, with block checkpointing (gradient_checkpointing_enable(): the growth per
    step is the L block inputs plus the state reg reads) and with depth-step checkpointing (config.ot_checkpoint_steps:
    one state per step). Target: step_checkpoint_growth_per_step_in_states <= 1.5.
(4) The compute cost of checkpointing: training-step time with block / step checkpointing over the time without
    (each recomputes one more forward of what it checkpoints).
Each repeat times the variants back to back, alternating their order; figures are medians of per-repeat ratios.
"""

from __future__ import annotations

import copy
import json
import statistics
import time
from pathlib import Path

import torch
from common import build_pair, parser


def step_time(model, ids, reg_lambda=None):
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    out = model(ids, labels=ids, use_cache=False)  # the plain GPT-2 would fill a KV cache in training otherwise
    loss = out.loss if not reg_lambda else out.loss + reg_lambda * out.reg
    loss.backward()
    return time.perf_counter() - start


def saved_activation_bytes(model, ids) -> int:
    """Bytes of the tensors autograd saves for backward in one training forward (checkpointed blocks save only
    their inputs; their internals are recomputed)."""
    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = model(ids, labels=ids)
    (out.loss + out.reg).backward()
    return total


def activation_memory(layers, width, heads, vocab, seq, batch, steps_list=(1, 2, 4, 8)) -> dict:
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    result = {}
    for checkpointing in ("no_checkpointing", "checkpointing", "step_checkpointing"):
        row = {}
        for steps in steps_list:
            ot, _ = build_pair(layers, steps, width, heads, vocab, seq)
            ot.train()
            if checkpointing == "checkpointing":
                ot.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            ot.config.ot_checkpoint_steps = checkpointing == "step_checkpointing"
            row[steps] = saved_activation_bytes(ot, ids)
        result[checkpointing] = row
    state = batch * seq * width * 4  # one fp32 hidden state

    def growth(row):
        return (row[steps_list[-1]] - row[steps_list[0]]) / (steps_list[-1] - steps_list[0]) / state

    result["hidden_state_bytes"] = state
    result["uncheckpointed_growth_per_step_in_states"] = growth(result["no_checkpointing"])
    result["checkpointed_growth_per_step_in_states"] = growth(result["checkpointing"])  # L block inputs + reg's
    result["step_checkpoint_growth_per_step_in_states"] = growth(result["step_checkpointing"])  # the step's input
    return result


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "overhead.json"))
    args = p.parse_args(argv)

    ot, unrolled = build_pair(args.layers, args.steps, args.width, args.heads, args.vocab, args.seq)
    ot.train()
    unrolled.train()
    block_ck = copy.deepcopy(ot)
    block_ck.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    step_ck = copy.deepcopy(ot)
    step_ck.config.ot_checkpoint_steps = True
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(0))
    variants = {
        "ot_lambda0": lambda: step_time(ot, ids),
        "unrolled": lambda: step_time(unrolled, ids),
        "ot_lambda_pos": lambda: step_time(ot, ids, reg_lambda=0.1),
        "ot_block_checkpointing": lambda: step_time(block_ck, ids, reg_lambda=0.1),
        "ot_step_checkpointing": lambda: step_time(step_ck, ids, reg_lambda=0.1),
    }
    for _ in range(args.warmup):
        for run in variants.values():
            run()
    times = {name: [] for name in variants}
    order = list(variants)
    for r in range(args.repeats):
        for name in order if r % 2 == 0 else order[::-1]:
            times[name].append(variants[name]())
    ratio_unrolled = [a / b for a, b in zip(times["ot_lambda0"], times["unrolled"])]
    ratio_reg = [a / b for a, b in zip(times["ot_lambda_pos"], times["ot_lambda0"])]

    def cost(name):  # time with checkpointing over the same step without
        return statistics.median([a / b for a, b in zip(times[name], times["ot_lambda_pos"])])

    result = {
        "device": "cpu",
        "torch_threads": torch.get_num_threads(),
        "config": vars(args) | {"out": None},
        "median_step_s": {name: statistics.median(t) for name, t in times.items()},
        "step_ratio_vs_unrolled": statistics.median(ratio_unrolled),
        "reg_overhead_ratio": statistics.median(ratio_reg),
        "block_checkpointing_time_ratio": cost("ot_block_checkpointing"),
        "step_checkpointing_time_ratio": cost("ot_step_checkpointing"),
    }
    memory = activation_memory(args.layers, args.width, args.heads, args.vocab, args.seq, args.batch)
    result["step_checkpoint_growth_per_step_in_states"] = memory["step_checkpoint_growth_per_step_in_states"]
    result["targets"] = {
        "step_ratio_vs_unrolled": 1.05,
        "reg_overhead_ratio": 1.02,
        "step_checkpoint_growth_per_step_in_states": 1.5,
    }
    result["meets_targets"] = {key: result[key] <= target for key, target in result["targets"].items()}
    result["activation_memory_bytes"] = memory
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
