"""Seeds and sweeps (`hf-ot sweep`): one recipe run per (value, seed), their summary over seeds, and plots."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..run_folders import check_outputs_replaceable, check_run_folder, record_outputs, write_json
from .config import RecipeConfig, load_config, set_value
from .evaluate import TASK_METRIC
from .plots import plot_curves, plot_xy
from .run import run_recipe


def set_key(cfg: RecipeConfig, dotted: str, value) -> RecipeConfig:
    """A checked copy of cfg with one key set: the recipes' one override parser (hf_ot.recipes.config)."""
    return RecipeConfig.from_dict(set_value(cfg.to_dict(), dotted, value))


def run_grid(cfg: RecipeConfig, out_dir: Path, param: str | None, values, seeds, overwrite=False) -> list[dict]:
    """One recipe run per (value, seed); returns their results with the learning curves. Every run folder is checked
    first: one that holds an earlier run is replaced only with overwrite=True (--overwrite)."""
    check_distinct(seeds, "seed", "--seeds")
    if param:
        check_distinct(values, f"value of {param}", "--values")
    runs = []
    for value in values if param else [None]:
        for seed in seeds:
            run_cfg = set_key(cfg, "training.seed", int(seed))
            tag = f"seed{seed}"
            if param:
                run_cfg = set_key(run_cfg, param, value)
                tag = f"{param.rsplit('.', 1)[-1]}={value}_{tag}"
            run_cfg.output_dir = str(Path(out_dir) / tag)
            folder = run_cfg.resolved_output_dir()
            check_run_folder(folder, run_cfg.trainer_dir(folder), overwrite, False)
            runs.append((value, seed, tag, run_cfg))
    rows = []
    for value, seed, tag, run_cfg in runs:
        results = run_recipe(run_cfg, overwrite=overwrite)
        history = json.loads((Path(out_dir) / tag / "log_history.json").read_text())
        rows.append(
            {
                "param": param,
                "value": value,
                "seed": seed,
                "dir": str(Path(out_dir) / tag),
                "results": results,
                "curve": _task_loss_curve(history),
            }
        )
    return rows


def _task_loss_curve(history: list[dict]) -> list:
    """The training task loss over steps (OTTrainer's `task_loss`: comparable across lambda, unlike `loss` = task +
    lambda * reg); a baseline's `loss` is its task loss."""
    key = "task_loss" if any("task_loss" in h for h in history) else "loss"
    return [(h["step"], h[key]) for h in history if key in h and "step" in h]


def check_distinct(items, what: str, flag: str) -> None:
    """A grid point given twice would run twice into one folder (the second replacing the first) and count twice in
    the mean and std: refused, naming it."""
    from ..errors import UsageError

    seen: list = []
    for item in items:
        same = [s for s in seen if s == item and type(s) is not bool and type(item) is not bool or s is item]
        if same or str(item) in map(str, seen):
            raise UsageError(
                f"{flag}: the {what} {item!r} is given more than once (as {same[0] if same else item!r}): "
                "each run of a sweep needs its own point. Give each value once."
            )
        seen.append(item)


def summarize(rows: list[dict], key: str = "loss") -> dict:
    """mean and sample std over seeds of `key`, per swept value."""
    groups: dict = {}
    for row in rows:
        groups.setdefault(str(row["value"]), []).append(row["results"].get(key))
    return {
        v: {"mean": statistics.mean(x), "std": statistics.stdev(x) if len(x) > 1 else 0.0, "n": len(x)}
        for v, x in groups.items()
        if all(isinstance(i, (int, float)) for i in x)
    }


def sweep(
    config: str, param: str, values, seeds=(1,), overrides=None, out_dir="runs/sweep", overwrite: bool = False
) -> dict:
    cfg = load_config(config, overrides)
    for value in values:  # a bad key or value fails now, not after the first runs
        set_key(cfg, param, value)
    out = Path(out_dir)
    written = ["sweep.json", "sweep.png", "curves.png"]
    check_outputs_replaceable(out, written)  # before any run
    out.mkdir(parents=True, exist_ok=True)
    rows = run_grid(cfg, out, param, values, seeds, overwrite=overwrite)
    key, label = TASK_METRIC[cfg.task]  # the task's headline metric: plotted over the values
    summary: dict = {
        "param": param,
        "values": list(values),
        "seeds": list(seeds),
        "metric": key,
        "loss": summarize(rows, "loss"),
        "eval_reg": summarize(rows, "eval_reg"),
        "perplexity": summarize(rows, "perplexity"),
        key: summarize(rows, key),
    }
    write_json(out / "sweep.json", {"summary": summary, "runs": rows}, indent=1)
    name = param.rsplit(".", 1)[-1]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    position = {str(v): float(v) if numeric else i for i, v in enumerate(values)}  # other values: in their order
    points = [(position[v], s["mean"], s["std"]) for v, s in summary[key].items()]
    plot_xy(
        {"OT" if cfg.is_ot else "baseline": points},
        out / "sweep.png",
        name if numeric else f"{name} {values}",
        label,
        f"sensitivity to {name}",
        logx=numeric and name == "lambda",
    )
    plot_curves(
        {f"{name}={v}": [r["curve"] for r in rows if str(r["value"]) == str(v)] for v in values},
        out / "curves.png",
        f"learning curves over {name}",
    )
    record_outputs(out, written)
    return summary
