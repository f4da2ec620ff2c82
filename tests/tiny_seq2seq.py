"""Tiny random configs of the encoder-decoder families, and the heads of those beyond T5 and BART (loaded by conftest).

None of these families has grouped-query attention or sliding windows. mBART is pre-LN with a final layer_norm in
each stack; Marian adds sinusoidal positions and has no final norm; mT5 is T5's stack with gated-GELU feed-forwards.
"""

from transformers import BartConfig, MarianConfig, MBartConfig, MT5Config, T5Config

from hf_ot.models import FAMILIES
from hf_ot.models.ot_model import base_class_of

_BART_LIKE = dict(
    encoder_layers=2,
    decoder_layers=2,
    d_model=32,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=37,
    decoder_ffn_dim=37,
    max_position_embeddings=64,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
    forced_eos_token_id=None,
)

_T5_LIKE = dict(num_layers=2, num_decoder_layers=2, d_model=32, d_kv=8, num_heads=4, d_ff=37, dropout_rate=0.0)

CONFIGS = {
    "t5": lambda **common: T5Config(**_T5_LIKE, decoder_start_token_id=common["pad_token_id"], **common),
    "bart": lambda **common: BartConfig(**_BART_LIKE, decoder_start_token_id=common["eos_token_id"], **common),
    "mt5": lambda **common: MT5Config(**_T5_LIKE, decoder_start_token_id=common["pad_token_id"], **common),
    "mbart": lambda **common: MBartConfig(**_BART_LIKE, decoder_start_token_id=common["eos_token_id"], **common),
    "marian": lambda **common: MarianConfig(**_BART_LIKE, decoder_start_token_id=common["pad_token_id"], **common),
}

# The heads of every family of this kind beyond the first four (gpt2, bert, t5, bart have their own tests), from the
# family table: a new family file joins these tests.
HEADS = [
    (family, base_class_of(cls).__name__)
    for family, row in FAMILIES.items()
    if family not in ("gpt2", "bert", "t5", "bart") and "seq2seq-lm" in row.tasks
    for cls in row.model_classes
]
