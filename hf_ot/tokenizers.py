"""Loading tokenizers with a check: a checkpoint without tokenizer files gives a clear error (or None, when a tokenizer
is optional), never the made-up empty tokenizer transformers 5 builds for it."""

from __future__ import annotations

import logging

from .errors import UsageError

logger = logging.getLogger(__name__)


def tokenizer_is_empty(tokenizer) -> bool:
    """True for a tokenizer with no real vocabulary: at most one token besides its special / added tokens.

    transformers 5 builds such a tokenizer, instead of raising, from a folder without tokenizer files (a GPT-2 one
    then tokenizes "hello world" to [], a BERT one to [UNK, UNK]).
    """
    vocab = set(tokenizer.get_vocab())
    added = {str(t) for t in getattr(tokenizer, "added_tokens_decoder", {}).values()}
    special = set(getattr(tokenizer, "all_special_tokens", []))
    return len(vocab - added - special) <= 1


def check_tokenizer(tokenizer, source=None) -> None:
    """Raise a clear error for a made-up (empty) tokenizer; `source` names where it came from."""
    if tokenizer is not None and tokenizer_is_empty(tokenizer):
        where = f" loaded from {source}" if source else ""
        raise ValueError(
            f"The tokenizer{where} is empty: it has no vocabulary besides its special tokens "
            f"({len(tokenizer)} tokens), which is what transformers builds when a folder has no tokenizer files. "
            "Use the tokenizer of the checkpoint the model came from (e.g. its Hub id), or save without one "
            "(tokenizer=None)."
        )


def load_tokenizer(name_or_path, *, required: bool = True, vocab_size: int | None = None, **kwargs):
    """AutoTokenizer.from_pretrained, checked: a checkpoint without tokenizer files gives a clear error
    (required=True) or None with a warning that says so (required=False), never a made-up empty tokenizer; one with
    more tokens than the model's `vocab_size` (ids past its embedding) a UsageError."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, **kwargs)
        check_tokenizer(tokenizer, name_or_path)
    except (OSError, ValueError) as err:
        if required:
            if isinstance(err, ValueError) and "is empty" in str(err):
                raise
            raise ValueError(f"No tokenizer could be loaded from {name_or_path}: {err}") from err
        logger.warning("Continuing without a tokenizer: %s", err)
        return None
    if vocab_size is not None and len(tokenizer) > vocab_size:
        problem = (
            f"The tokenizer in {name_or_path} has {len(tokenizer)} tokens, more than the model's vocab_size="
            f"{vocab_size} there: ids from {vocab_size} on have no embedding. Save the tokenizer the model was made "
            "with beside it, or grow the model's embedding (model.resize_token_embeddings(len(tokenizer))) and save it."
        )
        if tokenizer.vocab_size > vocab_size:  # its own vocabulary: ordinary text reaches ids past the embedding
            raise UsageError(problem)
        # only tokens added to it (a fine-tune's [PAD]): text without them works
        added = [t for t, i in tokenizer.get_added_vocab().items() if i >= vocab_size]
        logger.warning("%s Only tokens added to it are past it: %s.", problem, ", ".join(added[:5]))
    return tokenizer
