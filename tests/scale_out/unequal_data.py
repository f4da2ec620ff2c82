"""Processes that read different data (tests/test_distributed_evaluation.py): under torchrun each process evaluates
a tiny OT causal LM on blocks of its own count (rank 0: 6, rank 1: 2),
then training's check of every process's data; each writes WORK/unequalRANK.json with the errors it got.

    torchrun --nproc_per_node 2 unequal_data.py WORK
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from datasets import Dataset
from transformers import GPT2Config, GPT2LMHeadModel

import hf_ot
from hf_ot.metrics import launch_accelerator, teacher_forced_lm


def main(work: Path) -> None:
    state = launch_accelerator()  # (as hf-ot evaluate: every process of the launch, on the CPU here)
    rank = state.process_index
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=50, n_positions=32, bos_token_id=0, eos_token_id=0)
    base = GPT2LMHeadModel(config)
    model = hf_ot.convert(base, ot_num_steps=2).eval()
    tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: " ".join(map(str, ids)))
    errors = {}
    blocks = Dataset.from_dict({"input_ids": [[i % 50] * 8 for i in range(6 - 4 * rank)]})
    try:
        teacher_forced_lm(model, blocks, tokenizer, batch_size=2, accelerator=state, progress=False)
    except ValueError as err:
        errors["evaluation"] = f"{type(err).__name__}: {err}"
    from hf_ot.recipes.config import RecipeConfig
    from hf_ot.recipes.splits import TaskRun, check_same_data

    cfg = RecipeConfig.from_dict({"task": "causal-lm"})
    vocab = SimpleNamespace(get_vocab=lambda: {"a": 0, "b": 1})
    run = TaskRun(None, vocab, blocks, Dataset.from_dict({"input_ids": [[1, 2], [3, 4]]}), None)
    try:
        check_same_data(cfg, run, state)
    except ValueError as err:
        errors["training"] = f"{type(err).__name__}: {err}"
    (work / f"unequal{rank}.json").write_text(json.dumps(errors))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
