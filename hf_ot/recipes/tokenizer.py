"""Tokenizers for recipes: character level (nanoGPT's), BPE trained on the data, or a pretrained one."""

from __future__ import annotations

import sys
import warnings
from collections import Counter

from .config import ModelSection


def build_char_tokenizer(text: str):
    """A character-level tokenizer (nanoGPT's) that saves; `<pad>` is also its EOS token (as GPT-2's one is both)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(text))
    vocab = {"<unk>": 0, "<pad>": 1, **{c: i + 2 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<pad>")


def warn_unknown_characters(tokenizer, texts) -> None:
    """Warn where a character-level tokenizer (each token but the special ones one character) does not know
    characters of `texts` (a "text" column): each reads as its unknown token, whose predictions a perplexity scores."""
    from .data import iter_texts

    known = set(tokenizer.get_vocab()) - set(tokenizer.all_special_tokens)
    if any(len(token) != 1 for token in known):  # not character-level
        return
    counts: Counter = Counter()
    for batch in iter_texts(texts):
        counts.update("".join(batch))  # (counted in C, per character of the text)
    if unknown := sorted(counts.keys() - known):
        warnings.warn(
            f"The tokenizer does not know {sum(counts[c] for c in unknown)} characters of the evaluation text "
            f"({len(unknown)} distinct: {', '.join(map(repr, unknown[:5]))}{', ...' * (len(unknown) > 5)}): each is "
            f"read as {tokenizer.unk_token}, so the perplexity scores predictions of {tokenizer.unk_token} there. "
            "Evaluate on text of the characters the model was trained on, or train on text that has them.",
            stacklevel=2,
        )


def build_subword_tokenizer(texts, vocab_size: int):
    """A BPE tokenizer with pad/bos/eos/unk trained on `texts` (strings or batches of strings, read once)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    special = dict(pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>")  # ids 0 to 3
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    # the Rust trainer writes its progress to the process's stdout, past a redirect of Python's (`--json`)
    progress = sys.stdout is sys.__stdout__
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[*special.values()], initial_alphabet=alphabet, show_progress=progress
    )
    tok.train_from_iterator(texts, trainer)
    end = ("</s>", tok.token_to_id("</s>"))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[end])
    return PreTrainedTokenizerFast(tokenizer_object=tok, **special)


# the tokenizers a recipe builds from its data, and the tasks that build them (splits.py)
BUILT = {"char": ("causal-lm", "a character-level one of the text"), "bpe": ("translation", "a BPE of the pairs")}


def recipe_tokenizer(spec: str | None, model_cfg: ModelSection, task: str | None = None):
    """The tokenizer a recipe names (`tokenizer:` a hub id, folder or 'minilm'), else that of `model.base`; a
    tokenizer built from the data (char, bpe) where `task` builds none is a UsageError, never a Hub id."""
    from ..conversion_check import default_base
    from ..errors import UsageError
    from ..tokenizers import load_tokenizer

    if spec in BUILT:
        applies, what = BUILT[spec]
        raise UsageError(
            f"tokenizer: {spec} ({what}, built from the data) applies to {applies} recipes, not to this "
            f"{task or 'one'}: unset it (the base model's tokenizer), or give minilm, a Hub id or a folder."
        )
    name = spec if isinstance(spec, str) else model_cfg.base
    return load_tokenizer(default_base() if name == "minilm" else name)


def check_tokenizer_pads(tokenizer, task: str, folder: str | None = None) -> None:
    """A tokenizer that pads `task`'s batches (`folder`: a saved model's), else an error naming the fix."""
    if tokenizer.pad_token is None:
        fix = "Set one (tokenizer.pad_token = tokenizer.eos_token, or tokenizer: ... with a pad token) before training"
        if folder:
            fix = (
                "Save one there first: tokenizer.pad_token = tokenizer.eos_token (say), then tokenizer.save_pretrained"
            )
        where = f" in {folder}" if folder else ""
        raise ValueError(f"The tokenizer{where} has no pad token, which {task} batches need. {fix}.")
