"""`hf-ot convert BASE OUT`: hf_ot.convert, then hf_ot.save_model (weights, code, tokenizer, card)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import Outcome, add_ot_argument, local_or_hub

HELP = "convert a base checkpoint into an OT model folder"
EPILOG = (
    "For fine-tuning a pretrained checkpoint keep --ot-mode residual (M = 1 is the base model) and --ot-lambda 0.1 or "
    "less: --ot-num-steps 2 keeps plain fine-tuning's accuracy at 2 field evaluations; --ot-num-steps 4 gives a model "
    "that keeps "
    "it at every solver and M' of 2 evaluations or more (recipe sst2_minilm_elastic; hf-ot calibrate picks the "
    "cheapest setting). A lambda near 1 costs accuracy at a fine-tuning budget."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", nargs="?", default=None, help="hub id or local folder (default: embedded MiniLM)")
    p.add_argument("output_dir")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a folder that holds an hf_ot model (never a folder holding anything else)",
    )
    # defaults (None): hf_ot.convert's for a base checkpoint (M=1, T=1, lambda=0.1, euler, residual); an OT model
    # keeps its own settings unless one is given. Types and bounds: the config's (OT_SETTINGS).
    add_ot_argument(p, "ot_num_steps", "M, solver steps over depth (default 1; an OT model: its own)", "--num-steps")
    add_ot_argument(p, "ot_terminal_time", "T, dt = T/M (default 1.0)", "--terminal-time")
    add_ot_argument(p, "ot_lambda", "weight of reg in training loss (default 0.1)", "--lambda")
    add_ot_argument(p, "ot_solver", "(default euler)", "--solver")
    add_ot_argument(p, "ot_mode", "(default residual)", "--mode")
    p.add_argument(
        "--task",
        default=None,
        help="base, causal-lm, masked-lm, seq2seq-lm, sequence-classification, token-classification, or the "
        "transformers pipeline name: feature-extraction, text-generation, fill-mask, text2text-generation / "
        "translation / summarization, text-classification / sentiment-analysis, token-classification / ner "
        "(default: the checkpoint's architecture)",
    )


def run(args: argparse.Namespace) -> Outcome:
    import hf_ot

    from ..conversion_check import default_base
    from ..hub import save_model
    from ..run_folders import check_no_live_run, check_replaceable_model_folder, check_writable
    from ..tokenizers import load_tokenizer

    base = local_or_hub(args.base, "BASE") if args.base else default_base()
    # before converting: only a folder that holds an hf_ot model is ever replaced, and only with --overwrite (an
    # interrupted save there is repaired by the save itself, not by a command that may still be refused)
    check_replaceable_model_folder(args.output_dir, overwrite=args.overwrite, ot_only=True)
    check_writable(Path(args.output_dir).parent, what=f"OUT {args.output_dir}")
    check_no_live_run(args.output_dir)
    model = hf_ot.convert(
        base,
        task=args.task,
        ot_num_steps=args.ot_num_steps,
        ot_terminal_time=args.ot_terminal_time,
        ot_lambda=args.ot_lambda,
        ot_solver=args.ot_solver,
        ot_mode=args.ot_mode,
    )
    # None, with a warning, for a base without tokenizer files; one past the model's vocabulary: refused
    tokenizer = load_tokenizer(base, required=False, vocab_size=getattr(model.config, "vocab_size", None))
    out = save_model(model, args.output_dir, tokenizer=tokenizer, overwrite=args.overwrite)
    keys = ("num_steps", "terminal_time", "lambda", "solver", "mode", "decoder_num_steps", "decoder_terminal_time")
    saved = {f"ot_{k}": getattr(model.config, f"ot_{k}") for k in keys if getattr(model.config, f"ot_{k}") is not None}
    return Outcome(
        {
            "saved": str(out),
            "class": type(model).__name__,
            "loading_info": model.ot_loading_info,
            # as saved, and what an OT base kept or changed
            "ot_settings": {**saved, **model.ot_conversion_info},  # type: ignore[dict-item]
        }
    )
