"""Recipes: a YAML config (recipes/configs, packaged) -> convert or build, train, evaluate, save a model and card."""

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
