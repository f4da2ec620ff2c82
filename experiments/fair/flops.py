"""FLOPs of every model of the study: analytic (the matmuls of a GPT-2 block per token, Kaplan et al.'s count: 24 d^2
for the projections and MLP plus 4 T d for attention scores and values, per block application; 2 d V for the LM
head; training = 3 x forward) and counted (torch's FlopCounterMode over one real training step, forward and
backward), so the report's compute axis is checked against what torch runs."""

from __future__ import annotations

from experiments.overfit.jobs import SETTINGS as OVERFIT
from experiments.overfit.jobs import Job

BLOCK = 64


def analytic(n_layer: int, d: int, applications: int, vocab: int, tokens: int, context: int = BLOCK) -> dict:
    per_token = applications * (24 * d * d + 4 * context * d) + 2 * d * vocab
    return {"forward_per_token": per_token, "train_per_step": 3 * per_token * tokens}


def counted(job: Job, train_file: str | None = None) -> int:
    """Forward + backward FLOPs of one training step of `job`'s model (batch of SETTINGS['batch'] blocks)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from experiments.overfit.train import recipe
    from hf_ot.recipes import build_model, causal_lm_datasets

    cfg = recipe(job, OVERFIT, train_file)
    tokenizer, train, _ = causal_lm_datasets(cfg)
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.task, tokenizer)
    rows = torch.tensor(train["input_ids"][: OVERFIT["batch"]], dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        out = model(input_ids=rows, labels=rows)
        loss = out.loss + out.reg if getattr(out, "reg", None) is not None else out.loss
        loss.backward()
    return int(counter.get_total_flops())


def models() -> dict[str, tuple[Job, int, int, int]]:
    """name -> (job, n_layer, d, block applications per forward)."""
    from .jobs import _LN, _RESIDUAL

    return {
        "baseline 4x128": (Job("f", "baseline", 0.0, 0, 1), 4, 128, 4),
        "baseline 4x128, no LayerNorms": (Job("f", "baseline_noln", 0.0, 0, 1), 4, 128, 4),
        **{f"OT 3x112, M={m}": (Job("f", "ot", 1.0, m, 1), 3, 112, 3 * m) for m in (1, 2, 5, 10)},
        "OT 3x112, M=5, paper + LayerNorms": (Job("f", "ot", 1.0, 5, 1, extra=_LN), 3, 112, 15),
        "OT 3x112, M=5, residual": (Job("f", "ot", 1.0, 5, 1, extra=_RESIDUAL), 3, 112, 15),
    }


def flops_table(train_file: str | None = None, vocab: int = 65) -> dict:
    tokens = OVERFIT["batch"] * BLOCK
    table = {}
    for name, (job, n_layer, d, apps) in models().items():
        row = analytic(n_layer, d, apps, vocab, tokens)
        row["counted_train_per_step"] = counted(job, train_file)
        row["block_applications"] = apps
        table[name] = row
    return table
