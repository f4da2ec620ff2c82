"""Recipes: a typed YAML config -> convert or build, train with OTTrainer, evaluate, save a model with its card.

A recipe is a YAML config (recipes/configs/*.yaml, packaged as `hf_ot.recipe_configs`). Tasks: `causal-lm`,
`sequence-classification`, `translation`. Modules: config (`load_config` -> RecipeConfig), data, tokenizer, splits
(the tokenized splits), build (the model), run, evaluate, sweep, plots, paper (the Shakespeare-char comparison)."""

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
