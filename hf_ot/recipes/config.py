"""Recipe configs: YAML files with sections task, model, data, training, evaluation, card, output_dir."""

from __future__ import annotations

from pathlib import Path

import yaml

from .. import data as data_lib


TASKS = ("causal-lm", "sequence-classification", "translation")


def load_config(path: str | None, overrides: list[str] | None = None) -> dict:
    """Read a recipe YAML and apply `section.key=value` overrides (values parsed as YAML)."""
    config = {}
    if path:
        p = Path(data_lib.resolve_path(path)) if not Path(path).exists() else Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"Recipe config {path!r} not found.")
        config = yaml.safe_load(p.read_text()) or {}
    for item in overrides or []:
        if "=" not in item:
            raise ValueError(f"Override {item!r} must look like section.key=value.")
        key, value = item.split("=", 1)
        node = config
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"Override {item!r}: {part!r} is not a section.")
        node[parts[-1]] = yaml.safe_load(value)
    if config.get("task") not in TASKS:
        raise ValueError(f"Recipe config: task must be one of {list(TASKS)}, got {config.get('task')!r}.")
    return config
