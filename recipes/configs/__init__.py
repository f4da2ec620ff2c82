"""The recipe configs, shipped inside the package as `hf_ot.recipe_configs` (hf_ot.recipes.config.packaged_configs)."""
