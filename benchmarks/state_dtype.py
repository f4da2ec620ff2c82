"""Low-precision integration error: an OT GPT-2 (random init, 4 layers, width 256) in bf16 / fp16, the ODE state in
float32 (`ot_state_dtype="float32"`, the default) or in the model's dtype ("model"), against the same model in fp32.

Error = max |X_lowp(T) - X_fp32(T)| / max |X_fp32(T) - X(0)| (relative to the displacement), for M in {2, 8, 32, 200}.
Writes benchmarks/results/state_dtype.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2Model

import hf_ot


def final_state(model, ids, steps, dtype, state_dtype):
    model = model.to(dtype)
    model.config.ot_num_steps = steps
    model.config.ot_state_dtype = state_dtype
    with torch.no_grad():
        out = model(ids, output_hidden_states=[0, -1])
    return out.hidden_states[0].float(), out.hidden_states[-1].float()


def main():
    torch.manual_seed(0)
    base = GPT2Model(
        GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=128, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ).eval()
    ids = torch.randint(0, 50257, (2, 64), generator=torch.Generator().manual_seed(0))
    rows = []
    for steps in (2, 8, 32, 200):
        model = hf_ot.convert(base, ot_num_steps=steps).eval()
        x0, ref = final_state(model, ids, steps, torch.float32, "float32")
        scale = (ref - x0).abs().max().item()
        for dtype in (torch.bfloat16, torch.float16):
            for state in ("float32", "model"):
                _, got = final_state(model, ids, steps, dtype, state)
                model.float()
                rows.append(
                    {
                        "M": steps,
                        "dtype": str(dtype).removeprefix("torch."),
                        "ot_state_dtype": state,
                        "relative_error": (got - ref).abs().max().item() / scale,
                    }
                )
                print(rows[-1])
    out = Path(__file__).parent / "results" / "state_dtype.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"model": "OT GPT-2, 4 layers, width 256, random init, batch 2 x 64", "rows": rows}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
