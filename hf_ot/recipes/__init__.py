"""Recipes: convert or build, train with OTTrainer, evaluate, save a loadable model with its card.

A recipe is a YAML config (recipes/configs/*.yaml, shipped in the package as `hf_ot.recipe_configs`) with sections
`task`, `model`, `data`, `training`, `evaluation`, `card`, `output_dir`. Tasks: `causal-lm` (text, GPT-2 style),
`sequence-classification` (SST-2, BERT style), `translation` (Multi30k, T5/BART style).

One concern per module: config (reading, typing and overriding configs), tokenizer, model, dataset, run
(orchestration and saving), evaluate (metrics after training).
"""

from .config import TASKS, load_config
from .splits import (
    causal_lm_datasets,
    check_splits_not_empty,
    classification_datasets,
    text_blocks,
    translation_datasets,
)
from .evaluate import evaluate_recipe
from .build import build_model, ot_settings
from .run import card_results, run_recipe, trainer_output_dir, training_arguments
from .tokenizer import (
    build_char_tokenizer,
    build_subword_tokenizer,
    check_tokenizer_pads,
    default_minilm,
    load_tokenizer,
)

__all__ = [
    "TASKS", "build_char_tokenizer", "build_model", "build_subword_tokenizer", "card_results", "causal_lm_datasets",
    "check_splits_not_empty", "check_tokenizer_pads", "classification_datasets", "default_minilm",
    "evaluate_recipe", "load_config", "load_tokenizer", "ot_settings", "run_recipe", "text_blocks",
    "trainer_output_dir", "training_arguments", "translation_datasets",
]
