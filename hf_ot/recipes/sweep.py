"""Seeds and sweeps (`hf-ot sweep`): one recipe run per (value, seed), their summary over seeds, and plots."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..errors import UsageError
from ..redaction import is_secret_key
from ..run_folders import check_outputs_replaceable, check_run_folder, lock_outputs, write_json, writing_outputs
from .config import RecipeConfig, load_config, override_key, set_value
from .evaluate import TASK_METRIC, check_distinct
from .plots import curve, plot_curves, plot_xy
from .run import run_recipe

SWEEP_FILES = ("sweep.json", "sweep.png", "curves.png")  # what a sweep writes into its folder (recorded as hf-ot's)


def set_key(cfg: RecipeConfig, dotted: str, value) -> RecipeConfig:
    """A checked copy of cfg with one key set: the recipes' one override parser (hf_ot.recipes.config)."""
    return RecipeConfig.from_dict(set_value(cfg.to_dict(), override_key(dotted), value))


def run_variants(
    variants: dict[str, RecipeConfig], out: Path, seeds, folder: str, title: str, overwrite=False, check_only=False
) -> dict[str, list[dict]]:
    """One recipe run per variant and seed (every folder checked first), and OUT/curves.png of their task loss."""
    check_distinct(seeds, "seed", "--seeds")
    planned = []
    for name, cfg in variants.items():
        for seed in seeds:
            run_cfg = set_key(cfg, "training.seed", int(seed))
            run_cfg.output_dir = run_dir = str(Path(out) / folder.format(name, seed))
            resolved = run_cfg.resolved_output_dir()
            again = "Choose another --out, or pass --overwrite to replace the earlier runs there."  # (no --resume)
            check_run_folder(resolved, run_cfg.trainer_dir(resolved), overwrite, False, again)
            planned.append((name, seed, run_dir, run_cfg))
    if check_only:
        return {}
    Path(out).mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for name, seed, run_dir, run_cfg in planned:
        results = run_recipe(run_cfg, overwrite=overwrite)
        task_loss = curve(json.loads((Path(run_dir) / "log_history.json").read_text()), "task_loss", "loss")
        runs[name].append(dict(seed=seed, dir=run_dir, results=results, curve=task_loss))
    with writing_outputs(out, ("curves.png",)):
        plot_curves(
            {name: [run["curve"] for run in rows] for name, rows in runs.items()}, Path(out) / "curves.png", title
        )
    return runs


def summarize(runs: list[dict], key: str = "loss") -> dict | None:
    """mean and sample std over the runs (seeds) of `key`; None when a run has no number for it."""
    values = [run["results"].get(key) for run in runs]
    if not all(isinstance(v, (int, float)) for v in values):
        return None
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.mean(values), "std": std, "n": len(values)}


def sweep(
    config: str, param: str, values, seeds=(1,), overrides=None, out_dir="runs/sweep", overwrite=False, check_only=False
) -> dict:
    """One run per value of `param` and seed, summarized in OUT/sweep.json and sweep.png (check_only: checks only)."""
    if is_secret_key(param):  # its values would name run folders and fill sweep.json
        raise UsageError(f"--param {param}: a credential is not swept (its values would be written to disk).")
    cfg, param = load_config(config, overrides), override_key(param)  # (model.ot.lambda: model.ot.ot_lambda)
    check_distinct(values, f"value of {param}", "--values")
    name = param.rsplit(".", 1)[-1]
    variants = {f"{name}={v}": set_key(cfg, param, v) for v in values}  # a bad key or value fails now, before any run
    out = Path(out_dir)
    with lock_outputs(out, "hf-ot sweep"):
        check_outputs_replaceable(out, SWEEP_FILES)  # before any run
        runs = run_variants(variants, out, seeds, "{}_seed{}", f"learning curves over {name}", overwrite, check_only)
        if check_only:
            return {}
        key, label = TASK_METRIC[cfg.task]  # the task's headline metric: plotted over the values
        summary: dict = {"param": param, "values": list(values), "seeds": list(seeds), "metric": key}
        for k in ("loss", "eval_reg", "perplexity", key):  # per value, those whose every run has a number for k
            stats = {str(v): summarize(rows, k) for v, rows in zip(values, runs.values())}
            summary[k] = {v: stat for v, stat in stats.items() if stat is not None}
        rows = [{"param": param, "value": v, **run} for v, group in zip(values, runs.values()) for run in group]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        position = {str(v): float(v) if numeric else i for i, v in enumerate(values)}  # other values: in their order
        points = [(position[v], s["mean"], s["std"]) for v, s in summary[key].items()]
        xlabel, series = name if numeric else f"{name} {values}", {"OT" if cfg.is_ot else "baseline": points}
        with writing_outputs(out, SWEEP_FILES):
            write_json(out / "sweep.json", {"summary": summary, "runs": rows}, indent=1)
            plot_xy(
                series, out / "sweep.png", xlabel, label, f"sensitivity to {name}", logx=numeric and name == "ot_lambda"
            )
        return summary
