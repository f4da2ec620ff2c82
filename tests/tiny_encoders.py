"""Tiny random configs of the encoder-only families, and the heads of those beyond BERT (loaded by conftest).

None of these families has grouped-query attention. ModernBERT mixes a global and a local (sliding-window) layer whose
window (local_attention=4: two tokens either side) is shorter than the test sequences.
"""

from transformers import BertConfig, DistilBertConfig, ElectraConfig, ModernBertConfig, RobertaConfig, XLMRobertaConfig

from hf_ot.models import FAMILIES
from hf_ot.models.ot_model import base_class_of

_BERT_LIKE = dict(
    num_hidden_layers=2,
    hidden_size=32,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)

CONFIGS = {
    "bert": lambda **common: BertConfig(**_BERT_LIKE, **common),
    "roberta": lambda **common: RobertaConfig(**_BERT_LIKE, **common),
    "xlm-roberta": lambda **common: XLMRobertaConfig(**_BERT_LIKE, **common),
    # embedding_size < hidden_size: ElectraModel projects the embeddings before its loop
    "electra": lambda **common: ElectraConfig(**_BERT_LIKE, embedding_size=16, **common),
    "distilbert": lambda **common: DistilBertConfig(
        n_layers=2,
        dim=32,
        n_heads=4,
        hidden_dim=37,
        max_position_embeddings=64,
        dropout=0.0,
        attention_dropout=0.0,
        seq_classif_dropout=0.0,
        **common,
    ),
    "modernbert": lambda **common: ModernBertConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
        layer_types=["full_attention", "sliding_attention"],
        local_attention=4,
        cls_token_id=common["bos_token_id"],
        sep_token_id=common["eos_token_id"],
        **common,
    ),
}

# The heads of every family of this kind beyond the first four (gpt2, bert, t5, bart have their own tests), from the
# family table: a new family file joins these tests.
HEADS = [
    (family, base_class_of(cls).__name__)
    for family, row in FAMILIES.items()
    if family not in ("gpt2", "bert", "t5", "bart") and "masked-lm" in row.tasks and "seq2seq-lm" not in row.tasks
    for cls in row.model_classes
]
