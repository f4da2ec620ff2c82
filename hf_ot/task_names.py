"""Task names: transformers' pipeline names (`text-classification`, `text-generation`, ...) are accepted wherever
hf_ot takes a task, as aliases of hf_ot's own names."""

from __future__ import annotations

from .errors import UsageError

# pipeline name -> hf_ot.convert's task (the head converted)
CONVERT_TASK_ALIASES = {
    "feature-extraction": "base",
    "text-generation": "causal-lm",
    "fill-mask": "masked-lm",
    "text2text-generation": "seq2seq-lm",
    "translation": "seq2seq-lm",
    "summarization": "seq2seq-lm",
    "text-classification": "sequence-classification",
    "sentiment-analysis": "sequence-classification",
    "token-classification": "token-classification",
    "ner": "token-classification",
}
# pipeline name -> recipe task (a recipe's `task:`)
RECIPE_TASK_ALIASES = {
    "text-generation": "causal-lm",
    "text-classification": "sequence-classification",
    "sentiment-analysis": "sequence-classification",
    "translation": "translation",
    "text2text-generation": "translation",
    "summarization": "translation",  # a seq2seq recipe on source / target files
}
# pipeline tasks with a convertible head but no recipe yet
NO_RECIPE_YET = ("fill-mask", "token-classification", "ner", "feature-extraction")


def convert_task(task: str | None) -> str | None:
    """hf_ot.convert's task for `task` (its own name or a pipeline name)."""
    return CONVERT_TASK_ALIASES.get(task, task) if task is not None else None


def recipe_task(task: object, tasks: tuple[str, ...]) -> str:
    """The recipe task for `task` (one of `tasks` or a pipeline name); a usage error naming both otherwise."""
    if isinstance(task, str) and task in tasks:
        return task
    if isinstance(task, str) and task in RECIPE_TASK_ALIASES:
        return RECIPE_TASK_ALIASES[task]
    if isinstance(task, str) and task in NO_RECIPE_YET:
        raise UsageError(
            f"Recipe config: task {task!r} has no recipe yet (recipes: {list(tasks)}); convert a checkpoint for it "
            f"with hf_ot.convert(base, task={convert_task(task)!r}) and train it with OTTrainer."
        )
    raise UsageError(
        f"Recipe config: task must be one of {list(tasks)} or a transformers pipeline name "
        f"({', '.join(f'{k} = {v}' for k, v in RECIPE_TASK_ALIASES.items())}), got {task!r}."
    )
