"""Per family and head: max |OT - base| at residual, T = 1, M = 1 (fp32), and cached decoding against a full-prefix
recompute at M = 3 with RK4, on the tiny test configs. Writes benchmarks/results/families.json.

    python benchmarks/families.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import HEADS, inputs_for, is_encoder_decoder, main_output, make_base  # noqa: E402

import hf_ot  # noqa: E402

CACHE_NAME = "cache"


def m1_difference(family, class_name):
    base = make_base(family, class_name)
    model = hf_ot.convert(base).eval()
    inputs = inputs_for(family, class_name, pad_last=2)
    with torch.no_grad():
        return (main_output(model(**inputs)) - main_output(base(**inputs))).abs().max().item()


def cache_difference(family, class_name, steps=3, solver="rk4"):
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=steps, ot_solver=solver).eval()
    g = torch.Generator().manual_seed(0)
    fixed = {}
    if is_encoder_decoder(family):
        with torch.no_grad():
            fixed["encoder_outputs"] = model.get_encoder()(input_ids=torch.randint(4, 99, (2, 7), generator=g))
        key = "decoder_input_ids"
    else:
        key = "input_ids"
    ids = torch.randint(4, 99, (2, 9), generator=g)
    with torch.no_grad():
        full = model(**fixed, **{key: ids}, use_cache=False).logits
        cache, steps_out = None, []
        for t in range(3, ids.shape[1] + 1):
            chunk = ids[:, :t] if cache is None else ids[:, t - 1 : t]
            out = model(**fixed, **{key: chunk}, use_cache=True, **({CACHE_NAME: cache} if cache is not None else {}))
            cache = out.get(CACHE_NAME) if CACHE_NAME in out else out.get("past_key_values")
            steps_out.append(out.logits[:, -1])
    return (torch.stack(steps_out, 1) - full[:, 2:]).abs().max().item()


def main():
    rows = []
    for family, class_name in HEADS:
        row = {"family": family, "head": class_name, "m1_max_abs_diff": m1_difference(family, class_name)}
        if class_name.endswith(("LMHeadModel", "ForCausalLM", "ForConditionalGeneration", "MTModel")):
            row["cache_vs_full_max_abs_diff_m3_rk4"] = cache_difference(family, class_name)
        rows.append(row)
        print(json.dumps(row))
    out = Path(__file__).parent / "results" / "families.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"transformers": __import__("transformers").__version__, "rows": rows}, indent=1))
    print(out)


if __name__ == "__main__":
    main()
