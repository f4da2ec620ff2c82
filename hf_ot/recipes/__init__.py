"""Recipes: a typed YAML config -> convert or build, train with OTTrainer, evaluate, save a model with its card.

A recipe is a YAML config (recipes/configs/*.yaml, shipped in the package as `hf_ot.recipe_configs`) with sections
`task`, `model`, `data`, `training`, `evaluation`, `card`, `output_dir`. Tasks: `causal-lm` (text, GPT-2 style),
`sequence-classification` (SST-2, BERT style), `translation` (Multi30k, T5/BART style).

One concern per module: config (reading, typing and overriding configs: `load_config` returns a RecipeConfig),
data (files, Hub datasets, the embedded text, LM blocks), tokenizer, splits (the recipe's tokenized splits),
build (the model), run (orchestration and saving), evaluate (every task, after training and of saved models),
sweep (one run per value and seed), plots, paper (the paper's Shakespeare-char comparison).
"""

from .build import build_model
from .config import TASKS, RecipeConfig, load_config
from .evaluate import evaluate_folder, robustness
from .run import run_recipe, training_arguments
from .splits import causal_lm_datasets, classification_datasets, translation_datasets
from .tokenizer import build_char_tokenizer, recipe_tokenizer

__all__ = [
    "TASKS",
    "RecipeConfig",
    "build_char_tokenizer",
    "build_model",
    "causal_lm_datasets",
    "classification_datasets",
    "evaluate_folder",
    "load_config",
    "recipe_tokenizer",
    "robustness",
    "run_recipe",
    "training_arguments",
    "translation_datasets",
]
