"""Shared by the benchmarks: the model-shape arguments and the OT / unrolled GPT-2 pair they compare."""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

import hf_ot


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=2, help="L, blocks of the OT model")
    p.add_argument("--steps", type=int, default=4, help="M, Euler steps (the unrolled model has M*L blocks)")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    return p


def build_pair(layers, steps, width, heads, vocab, positions):
    """An OT GPT-2 (L layers, M Euler steps, residual mode, dt = 1) and a plain GPT-2 with M*L layers: the same
    block arithmetic per forward, so their ratio is the integrator's own cost."""
    cfg = GPT2Config(
        n_layer=layers,
        n_embd=width,
        n_head=heads,
        vocab_size=vocab,
        n_positions=positions,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    torch.manual_seed(0)
    ot = hf_ot.convert(
        GPT2LMHeadModel(cfg), ot_num_steps=steps, ot_terminal_time=float(steps), ot_solver="euler", ot_mode="residual"
    )
    unrolled = GPT2LMHeadModel(GPT2Config(**{**cfg.to_dict(), "n_layer": layers * steps}))
    return ot, unrolled
