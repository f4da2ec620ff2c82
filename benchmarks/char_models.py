"""Char-level OT GPTs for the elastic-inference benchmarks (adaptive.py, speculative.py): the paper's char-level
shape (paper mode, every LayerNorm removed, T = 1, trained at M = 5 Euler), trained here for a fixed wall-clock
budget or a fixed number of optimizer steps with lambda = 0 and lambda = 1, on the text CPython ships
(pydoc_data.topics, text="python") or on Tiny Shakespeare (../shared/data, text="shakespeare"), cached under
runs/bench-char/."""

import math
import time
from pathlib import Path

import torch
from transformers import GPT2Config

import hf_ot
from hf_ot.recipes import build_char_tokenizer
from hf_ot.recipes.data import embedded_text, resolve_path

CACHE = Path(__file__).resolve().parents[1] / "runs" / "bench-char"
BLOCK = 64


TEXTS = {"python": None, "shakespeare": "../shared/data/tinyshakespeare/input.txt"}


def text_of(text: str) -> str:
    if TEXTS[text] is None:
        return embedded_text()
    return Path(resolve_path(TEXTS[text])).read_text(encoding="utf-8")


def tokenizer(text: str = "python"):
    return build_char_tokenizer(text_of(text))


def data(tok, text: str = "python"):
    ids = torch.tensor(tok(text_of(text))["input_ids"])
    split = int(len(ids) * 0.9)
    return ids[:split], ids[split:]


def batches(ids, n, batch, generator):
    starts = torch.randint(0, len(ids) - BLOCK - 1, (n, batch), generator=generator)
    for row in starts:
        yield torch.stack([ids[s : s + BLOCK] for s in row.tolist()])


def train(
    reg_lambda: float,
    width: int,
    layers: int,
    heads: int,
    seconds: float | None = None,
    steps: int = 5,
    retrain=False,
    train_steps: int | None = None,
    text: str = "python",
):
    """(model, tokenizer, info) of an OT GPT trained for `seconds` of wall clock or for `train_steps` optimizer steps
    (a step budget gives the same model on any machine; cached by its settings)."""
    if (seconds is None) == (train_steps is None):
        raise ValueError("give exactly one of seconds and train_steps")
    budget = f"{int(seconds)}s" if train_steps is None else f"{train_steps}steps"
    name = f"w{width}-l{layers}-lambda{reg_lambda:g}-{budget}" + ("" if text == "python" else f"-{text}")
    folder = CACHE / name
    tok = tokenizer(text)
    if (folder / "config.json").is_file() and not retrain:
        model = hf_ot.OTGPT2LMHeadModel.from_pretrained(folder).eval()
        return model, tok, {"name": name, **_info(folder)}
    base = GPT2Config(
        n_layer=layers,
        n_embd=width,
        n_head=heads,
        n_positions=BLOCK * 6,
        vocab_size=len(tok),
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=tok.pad_token_id,
    )
    cfg = hf_ot.OTGPT2Config.from_base_config(
        base,
        ot_num_steps=steps,
        ot_solver="euler",
        ot_mode="paper",
        ot_block_layer_norms=False,
        ot_lambda=reg_lambda,
        ot_reg_in_loss=True,
    )
    torch.manual_seed(0)
    model = hf_ot.OTGPT2LMHeadModel(cfg).train()
    train_ids, _ = data(tok, text)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(0)
    start, step = time.perf_counter(), 0
    for x in batches(train_ids, 10**6, 16, g):
        if train_steps is None:
            frac = min((time.perf_counter() - start) / seconds, 1.0)
        else:
            frac = min(step / train_steps, 1.0)
        for group in opt.param_groups:
            group["lr"] = 1e-3 * 0.5 * (1 + math.cos(math.pi * frac))
        out = model(x, labels=x)
        opt.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if (train_steps is None and frac >= 1.0) or step == train_steps:
            break
    model.eval()
    model.save_pretrained(folder)
    with torch.no_grad():
        val = val_batches(tok, text=text)
        val_loss = sum(model(**b).task_loss.item() for b in val) / len(val)  # cross-entropy, without lambda * reg
    seconds_taken = time.perf_counter() - start
    (folder / "train_steps.txt").write_text(f"{step}\n{model.num_parameters()}\n{val_loss:.4f}\n{seconds_taken:.0f}\n")
    return model, tok, {"name": name, **_info(folder)}


def _info(folder):
    fields = (folder / "train_steps.txt").read_text().split()
    info = {"train_steps": int(fields[0]), "parameters": int(fields[1])}
    if len(fields) >= 4:  # runs written before the validation loss was recorded have two fields
        info["val_loss_trained_setting"] = float(fields[2])
        info["train_seconds"] = int(fields[3])
    return info


def val_batches(tok, n=8, batch=16, text: str = "python"):
    _, val_ids = data(tok, text)
    return [{"input_ids": x, "labels": x} for x in batches(val_ids, n, batch, torch.Generator().manual_seed(1))]
