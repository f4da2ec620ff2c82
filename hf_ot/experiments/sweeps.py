"""Seeds and sweeps: one recipe run per (value, seed), their summary over seeds, and the noise-robustness table."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..outputs import check_outputs_replaceable, check_run_folder, record_outputs, write_json
from ..recipes import load_config, run_recipe, trainer_output_dir
from ..recipes.config import with_value
from .evaluate import evaluate_folder
from .plots import plot_curves, plot_xy


def set_key(cfg: dict, dotted: str, value) -> dict:
    """A checked copy of cfg with one key set: the recipes' one override parser (hf_ot.recipes.config)."""
    return with_value(cfg, dotted, value)


def run_grid(cfg: dict, out_dir: Path, param: str | None, values, seeds, overwrite=False) -> list[dict]:
    """One recipe run per (value, seed); returns their results with the learning curves. Every run folder is checked
    first: one that holds an earlier run is replaced only with overwrite=True (--overwrite)."""
    check_distinct(seeds, "seed", "--seeds")
    if param:
        check_distinct(values, f"value of {param}", "--values")
    runs = []
    for value in (values if param else [None]):
        for seed in seeds:
            run_cfg = set_key(cfg, "training.seed", int(seed))
            tag = f"seed{seed}"
            if param:
                run_cfg = set_key(run_cfg, param, value)
                tag = f"{param.rsplit('.', 1)[-1]}={value}_{tag}"
            run_cfg["output_dir"] = str(Path(out_dir) / tag)
            folder = Path(run_cfg["output_dir"]).resolve()
            check_run_folder(folder, trainer_output_dir(run_cfg, str(folder)), overwrite, False)
            runs.append((value, seed, tag, run_cfg))
    rows = []
    for value, seed, tag, run_cfg in runs:
        results = run_recipe(run_cfg, overwrite=overwrite)
        history = json.loads((Path(out_dir) / tag / "log_history.json").read_text())
        rows.append({"param": param, "value": value, "seed": seed, "dir": str(Path(out_dir) / tag),
                     "results": results, "curve": [(h["step"], h["loss"]) for h in history if "loss" in h
                                                   and "step" in h]})
    return rows


def check_distinct(items, what: str, flag: str) -> None:
    """A grid point given twice would run twice into one folder (the second replacing the first) and count twice in
    the mean and std: refused, naming it."""
    from ..errors import UsageError

    seen = []
    for item in items:
        same = [s for s in seen if s == item and type(s) is not bool and type(item) is not bool or s is item]
        if same or str(item) in map(str, seen):
            raise UsageError(f"{flag}: the {what} {item!r} is given more than once (as {same[0] if same else item!r}): "
                             "each run of a sweep needs its own point. Give each value once.")
        seen.append(item)


def summarize(rows: list[dict], key: str = "loss") -> dict:
    """mean and sample std over seeds of `key`, per swept value."""
    groups: dict = {}
    for row in rows:
        groups.setdefault(str(row["value"]), []).append(row["results"].get(key))
    return {v: {"mean": statistics.mean(x), "std": statistics.stdev(x) if len(x) > 1 else 0.0, "n": len(x)}
            for v, x in groups.items() if all(isinstance(i, (int, float)) for i in x)}


def sweep(config: str, param: str, values, seeds=(1,), overrides=None, out_dir="runs/sweep",
          overwrite: bool = False) -> dict:
    cfg = load_config(config, overrides)
    for value in values:  # a bad key or value fails now, not after the first runs
        with_value(cfg, param, value)
    out = Path(out_dir)
    written = ["sweep.json", "sweep.png", "curves.png"]
    check_outputs_replaceable(out, written)  # before any run
    out.mkdir(parents=True, exist_ok=True)
    rows = run_grid(cfg, out, param, values, seeds, overwrite=overwrite)
    summary = {"param": param, "values": list(values), "seeds": list(seeds),
               "loss": summarize(rows, "loss"), "eval_reg": summarize(rows, "eval_reg"),
               "perplexity": summarize(rows, "perplexity")}
    write_json(out / "sweep.json", {"summary": summary, "runs": rows}, indent=1)
    name = param.rsplit(".", 1)[-1]
    points = [(float(v), s["mean"], s["std"]) for v, s in summary["loss"].items()]
    plot_xy({"OT": points}, out / "sweep.png", name, "validation loss (teacher-forced CE)", f"sensitivity to {name}",
            logx=name == "lambda")
    plot_curves({f"{name}={v}": [r["curve"] for r in rows if str(r["value"]) == str(v)] for v in values},
                out / "curves.png", f"learning curves over {name}")
    record_outputs(out, written)
    return summary


def robustness(models: dict[str, str], config: str, rates, overrides=None, out_dir="runs/robustness",
               trust_remote_code: bool = False) -> dict:
    out = Path(out_dir)
    check_outputs_replaceable(out, ["robustness.json", "robustness.png"])
    out.mkdir(parents=True, exist_ok=True)
    table = {name: evaluate_folder(folder, config, overrides, noise_rates=rates, metrics=(),
                                   trust_remote_code=trust_remote_code)["runs"]
             for name, folder in models.items()}
    write_json(out / "robustness.json", table, indent=1)
    series = {name: [(r["noise_rate"], r["loss"], 0.0) for r in runs] for name, runs in table.items()}
    plot_xy(series, out / "robustness.png", "fraction of input tokens replaced", "validation loss",
            "robustness to test-time noise")
    record_outputs(out, ["robustness.json", "robustness.png"])
    return table
