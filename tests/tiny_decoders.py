"""Tiny random configs of the GPT-2, Llama-style, GPT-NeoX and OPT decoder-only families (loaded by conftest.py).

Each factory takes the common ids (vocab_size, pad/bos/eos) and returns the base transformers config: 2 layers,
hidden 32, 4 heads, no dropout; grouped-query attention (2 key/value heads) where the family has it, and a sliding
window of 4 (shorter than every test sequence) where it has one, mixed with full-attention layers where its config
allows (Qwen2, Qwen3: [full, sliding]; Gemma2: [sliding, full]; Mistral and Phi3 apply their window to every layer).
"""

from transformers import (
    Gemma2Config,
    GPT2Config,
    GPTNeoXConfig,
    LlamaConfig,
    MistralConfig,
    OPTConfig,
    Phi3Config,
    Qwen2Config,
    Qwen3Config,
)

from hf_ot.models import FAMILIES
from hf_ot.models.ot_model import base_class_of

TINY = dict(
    num_hidden_layers=2,
    hidden_size=32,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    attention_dropout=0.0,
)
GQA = dict(num_key_value_heads=2)
WINDOW = 4


def gpt2(**common):
    return GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=4,
        n_inner=37,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        **common,
    )


def llama(**common):
    return LlamaConfig(**TINY, **GQA, **common)


def mistral(**common):
    return MistralConfig(**TINY, **GQA, sliding_window=WINDOW, **common)


def qwen2(**common):
    return Qwen2Config(
        **TINY,
        **GQA,
        use_sliding_window=True,
        sliding_window=WINDOW,
        layer_types=["full_attention", "sliding_attention"],
        **common,
    )


def qwen3(**common):
    return Qwen3Config(
        **TINY,
        **GQA,
        head_dim=8,
        use_sliding_window=True,
        sliding_window=WINDOW,
        layer_types=["full_attention", "sliding_attention"],
        **common,
    )


def gemma2(**common):
    return Gemma2Config(
        **TINY,
        **GQA,
        head_dim=8,
        query_pre_attn_scalar=8,
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        **common,
    )


def phi3(**common):
    return Phi3Config(**TINY, **GQA, sliding_window=WINDOW, resid_pdrop=0.0, embd_pdrop=0.0, **common)


def gpt_neox(**common):  # no grouped-query attention or sliding window in GPT-NeoX; rotary on a quarter of each head
    return GPTNeoXConfig(**TINY, rotary_pct=0.25, hidden_dropout=0.0, **common)


def opt(**common):  # no grouped-query attention or sliding window in OPT; pre-LN with a final norm (OPT-125m style)
    return OPTConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        ffn_dim=37,
        word_embed_proj_dim=32,
        max_position_embeddings=64,
        dropout=0.0,
        attention_dropout=0.0,
        **common,
    )


CONFIGS = {
    "gpt2": gpt2,
    "llama": llama,
    "mistral": mistral,
    "qwen2": qwen2,
    "qwen3": qwen3,
    "gemma2": gemma2,
    "phi3": phi3,
    "gpt_neox": gpt_neox,
    "opt": opt,
}

# The heads of every family of this kind beyond the first four (gpt2, bert, t5, bart have their own tests), from the
# family table: a new family file joins these tests.
HEADS = [
    (family, base_class_of(cls).__name__)
    for family, row in FAMILIES.items()
    if family not in ("gpt2", "bert", "t5", "bart") and "causal-lm" in row.tasks
    for cls in row.model_classes
]
