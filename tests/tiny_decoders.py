"""Tiny random configs of the decoder-only families added in issue 9 (loaded by conftest.py).

Each factory takes the common ids (vocab_size, pad/bos/eos) and returns the base transformers config: 2 layers,
hidden 32, 4 heads, no dropout; grouped-query attention (2 key/value heads) where the family has it, and a sliding
window of 4 (shorter than every test sequence) where it has one, mixed with full-attention layers where its config
allows.
"""

from transformers import LlamaConfig

TINY = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64)


def llama(**common):
    return LlamaConfig(**TINY, num_key_value_heads=2, attention_dropout=0.0, **common)


CONFIGS = {"llama": llama}

HEADS = [
    ("llama", "LlamaModel"),
    ("llama", "LlamaForCausalLM"),
    ("llama", "LlamaForSequenceClassification"),
]
