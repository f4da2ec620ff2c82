"""What is specific to the decoder-only families of issue 9 (Llama-style, GPT-NeoX, OPT).

The shared tests (equivalence, contracts, save/cache/generation, hub, PEFT) cover these families through HEADS in
tests/tiny_decoders.py; here: conversion paths, and sliding-window layers whose KV cache must stay right past the
window.
"""

import pytest
import torch
from conftest import HEADS, make_base, make_inputs
from tiny_decoders import CONFIGS

import hf_ot

DECODER_HEADS = [(f, c) for f, c in HEADS if f in CONFIGS]


@pytest.mark.parametrize("class_name", ["LlamaModel", "LlamaForCausalLM", "LlamaForSequenceClassification"])
def test_llama_converts_from_folder_and_model_picking_the_class(tmp_path, class_name):
    base = make_base("llama", class_name)
    base.save_pretrained(tmp_path)
    inputs = make_inputs("llama", pad_last=2)
    with torch.no_grad():
        expected = base(**inputs)[0]
    for source in (str(tmp_path), base):
        model = hf_ot.convert(source).eval()
        assert type(model).__name__ == "OT" + class_name  # from config.architectures / the loaded class
        assert model.ot_loading_info == {"missing_keys": [], "unexpected_keys": []}
        with torch.no_grad():
            assert (model(**inputs)[0] - expected).abs().max().item() <= 1e-5
