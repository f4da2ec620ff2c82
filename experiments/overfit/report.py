"""The report: statistics over seeds, markdown tables and figures (docs/figures/overfit_*.png) from the raw JSON."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from experiments.studies.report import load_records

from .jobs import NOISE_RATES, SENS_LAMBDAS, SENS_STEPS

GROUPS = {  # core model name -> (model, lambda, M)
    "baseline": ("baseline", None, None),
    "ot": ("ot", 1.0, 5),
    "ot_matched": ("ot_matched", 1.0, 5),
    "ot_lam0": ("ot", 0.0, 5),
    "ot_matched_M1": ("ot_matched", 1.0, 1),
}
LABELS = {
    "baseline": "baseline (GPT-2 4x128, LayerNorms)",
    "ot": "OT 3x112, M=5, lambda=1",
    "ot_matched": "OT matched 4x128, M=5, lambda=1",
    "ot_lam0": "OT 3x112, M=5, lambda=0",
    "ot_matched_M1": "OT matched 4x128, M=1 (each block once), lambda=1",
}


def stat(values) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": float("nan"), "std": float("nan"), "n": 0}
    return {
        "mean": statistics.mean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "n": len(values),
    }


def fmt(s: dict, digits: int = 3) -> str:
    if not s["n"]:
        return "n/a"
    text = f"{s['mean']:.{digits}f}"
    return text + (f" ± {s['std']:.{digits}f}" if s["n"] > 1 else "") + ("" if s["n"] == 3 else f" (n={s['n']})")


def _matches(record: dict, model: str, lam, steps, long: bool = False) -> bool:
    job = record["job"]
    same = job["model"] == model and (lam is None or (job["lam"] == lam and job["num_steps"] == steps))
    return same and ("long" in job.get("groups", [])) == long


def core_runs(records: list[dict], long: bool = False) -> dict[str, list[dict]]:
    """The runs of each GROUPS model, by seed: the 500-step runs, or with `long` the LONG ones."""
    return {
        name: sorted((r for r in records if _matches(r, *spec, long=long)), key=lambda r: r["job"]["seed"])
        for name, spec in GROUPS.items()
    }


def _rising_tail(result: dict) -> float:
    """The fraction of training after the best step (the curve's minimum)."""
    steps = result["curve"][-1]["step"]
    return (steps - result["best_step"]) / steps


def _model_row(runs: list[dict]) -> dict:
    """Mean ± std over the seeds of one model: sizes, timing, the curve's best step and losses, and the best and
    final checkpoints' evaluation."""
    res = [r["result"] for r in runs]
    row = {
        "seeds": [r["job"]["seed"] for r in runs],
        "steps": runs[0]["settings"]["steps"],
        "parameters": res[0]["parameters"],
        "s_per_step": stat([x["s_per_step"] for x in res]),
        "wall_s": stat([r["wall_s"] for r in runs]),
        "best_step": stat([x["best_step"] for x in res]),
        "rising_tail": stat([_rising_tail(x) for x in res]),
        "curve_best": stat([x["best_curve_val_loss"] for x in res]),
        "curve_final": stat([x["final_curve_val_loss"] for x in res]),
        "train_final": stat([x["curve"][-1]["train_eval_loss"] for x in res]),
    }
    for point in ("best", "final"):
        row[point] = {
            key: stat([x[point][key] for x in res])
            for key in ("loss", "perplexity", "perplexity_per_sequence_mean", "bleu", "rouge1", "rouge2", "rougeL")
        }
        row[point]["noise"] = {str(r): stat([x[point]["noise"][str(r)] for x in res]) for r in NOISE_RATES}
    return row


def summarize(records: list[dict]) -> dict:
    out: dict = {"core": {}, "long": {}, "lambda": [], "steps": []}
    for section, long in (("core", False), ("long", True)):
        out[section] = {name: _model_row(runs) for name, runs in core_runs(records, long).items() if runs}
    seed = min((r["job"]["seed"] for r in records), default=1)
    for group, values, key in (("lambda", (0.0, *SENS_LAMBDAS), "lam"), ("steps", SENS_STEPS, "num_steps")):
        for value in values:  # the OT size at lambda=1, M=5 but for the one varied, the sensitivity seed
            spec = {"lam": 1.0, "num_steps": 5, key: value}
            runs = [
                r for r in records if r["job"]["seed"] == seed and _matches(r, "ot", spec["lam"], spec["num_steps"])
            ]
            if runs:
                res = runs[0]["result"]
                out[group].append(
                    {
                        key: value,
                        "seed": seed,
                        "best_step": res["best_step"],
                        "best": res["best"]["loss"],
                        "final": res["final"]["loss"],
                        "final_noise_0.2": res["final"]["noise"]["0.2"],
                        "reg_final": res["curve"][-1]["reg"],
                        "s_per_step": res["s_per_step"],
                    }
                )
    return out


def tables(summary: dict) -> str:
    lines = [
        "### Core comparison (mean ± std over seeds)",
        "",
        "Curve = the validation loss every eval_every steps on the first curve_blocks validation blocks (the best step "
        "is chosen on it); best / final = the best and the final weights evaluated on final_blocks validation blocks.",
        "",
        "| model | parameters | best step | curve best | curve final | train loss (final) | s/step | wall (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    core = summary["core"]
    for name, row in core.items():
        lines.append(
            f"| {LABELS[name]} | {row['parameters']:,} | {fmt(row['best_step'], 0)} | {fmt(row['curve_best'])} | "
            f"{fmt(row['curve_final'])} | {fmt(row['train_final'])} | {fmt(row['s_per_step'], 3)} | "
            f"{fmt(row['wall_s'], 0)} |"
        )
    for point in ("best", "final"):
        lines += [
            "",
            f"### {point.capitalize()} checkpoint: validation loss, perplexity, text metrics and input noise",
            "",
            "| model | val loss | perplexity | per-seq. perplexity | BLEU | ROUGE-1 | ROUGE-L | "
            + " | ".join(f"loss at {int(r * 100)}% noise" for r in NOISE_RATES)
            + " |",
            "| --- " * (7 + len(NOISE_RATES)) + "|",
        ]
        for name, row in core.items():
            m = row[point]
            lines.append(
                f"| {LABELS[name]} | {fmt(m['loss'])} | {fmt(m['perplexity'], 2)} | "
                f"{fmt(m['perplexity_per_sequence_mean'], 2)} | {fmt(m['bleu'], 2)} | {fmt(m['rouge1'], 2)} | "
                f"{fmt(m['rougeL'], 2)} | " + " | ".join(fmt(m["noise"][str(r)]) for r in NOISE_RATES) + " |"
            )
    for group, key, title in (("lambda", "lam", "lambda (M = 5)"), ("steps", "num_steps", "M (lambda = 1)")):
        if summary[group]:
            lines += [
                "",
                f"### Sensitivity to {title}, OT 3x112, one seed",
                "",
                f"| {key} | best step | best val loss | final val loss | final, 20% noise | reg (last interval) "
                "| s/step |",
                "| --- | --- | --- | --- | --- | --- | --- |",
            ]
            for p in summary[group]:
                reg = "n/a" if p["reg_final"] is None else f"{p['reg_final']:.4f}"
                lines.append(
                    f"| {p[key]:g} | {p['best_step']} | {p['best']:.4f} | {p['final']:.4f} | "
                    f"{p['final_noise_0.2']:.4f} | {reg} | {p['s_per_step']:.3f} |"
                )
    if summary["long"]:
        lines += [
            "",
            "### Twice the steps on the same subset (mean ± std over seeds)",
            "",
            "| model | steps | best step | val loss, best checkpoint | val loss, final | train loss (final) | "
            "final, 20% noise | wall (s) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, row in summary["long"].items():
            lines.append(
                f"| {LABELS[name]} | {row['steps']} | {fmt(row['best_step'], 0)} | {fmt(row['best']['loss'])} | "
                f"{fmt(row['final']['loss'])} | {fmt(row['train_final'])} | {fmt(row['final']['noise']['0.2'])} | "
                f"{fmt(row['wall_s'], 0)} |"
            )
    return "\n".join(lines) + "\n"


def figures(records: list[dict], summary: dict, folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for long, name in ((False, "overfit_curves.png"), (True, "overfit_long_curves.png")):
        runs_of = core_runs(records, long)
        if not any(runs_of.values()):
            continue
        fig, ax = plt.subplots(figsize=(8, 6))
        for (model, runs), color in zip(runs_of.items(), ("C0", "C1", "C2", "C3", "C4")):
            if not runs:
                continue
            steps = [p["step"] for p in runs[0]["result"]["curve"]]
            for key, style in (("val_loss", "-"), ("train_eval_loss", ":")):
                values = np.array([[p[key] for p in r["result"]["curve"]] for r in runs])
                mean, std = values.mean(0), values.std(0)
                label = f"{LABELS[model]} ({'val' if key == 'val_loss' else 'train'})"
                ax.plot(steps, mean, style, color=color, label=label)
                if key == "val_loss":
                    ax.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("loss (mean token NLL)")
        ax.set_ylim(top=3.6 if long else 3.0)  # the long baseline rises past 3.4
        ax.set_title("Tiny Shakespeare subset: validation (solid, ±1 std over seeds) and training (dotted) loss")
        ax.title.set_fontsize(9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)  # below: no curve hidden
        paths.append(folder / name)
        fig.tight_layout()
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), sharey=True)
    rates = [0.0, *NOISE_RATES]
    for ax, point in zip(axes, ("best", "final")):
        for name, row in summary["core"].items():
            m = row[point]
            means = [m["loss"]["mean"], *(m["noise"][str(r)]["mean"] for r in NOISE_RATES)]
            stds = [m["loss"]["std"], *(m["noise"][str(r)]["std"] for r in NOISE_RATES)]
            ax.errorbar(rates, means, yerr=stds, marker="o", capsize=3, label=LABELS[name])
        ax.set_title(f"{point} checkpoint")
        ax.set_xlabel("fraction of input characters replaced")
    axes[0].set_ylabel("validation loss")
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=7)
    paths.append(folder / "overfit_noise.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    if summary["lambda"] or summary["steps"]:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), sharey=True)
        for ax, (group, key, xlabel) in zip(
            axes, (("lambda", "lam", "lambda (M = 5)"), ("steps", "num_steps", "M (lambda = 1)"))
        ):
            pts = summary[group]
            xs = [p[key] for p in pts]
            ax.plot(xs, [p["best"] for p in pts], "o-", label="best checkpoint")
            ax.plot(xs, [p["final"] for p in pts], "s--", label="final")
            if group == "lambda":  # lambda = 0 on the axis
                ax.set_xscale("symlog", linthresh=0.01)
            else:
                ax.set_xscale("log")
            ax.set_xlabel(xlabel)
            base = summary["core"].get("baseline")
            if base:
                ax.axhline(base["best"]["loss"]["mean"], color="grey", lw=0.8, label="baseline best (mean)")
                ax.axhline(base["final"]["loss"]["mean"], color="grey", ls="--", lw=0.8, label="baseline final (mean)")
        axes[0].set_ylabel("validation loss (OT 3x112, seed 1)")
        axes[0].legend(fontsize=7)
        paths.append(folder / "overfit_sensitivity.png")
        fig.tight_layout()
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def report(out: Path, source: Path | None = None, docs: Path | None = None) -> str:
    """Tables (OUT/tables.md, returned) and figures (OUT/figures, and docs/figures with `docs`) from OUT/raw or a
    combined JSON; with `docs`, also docs/overfit.json (every raw record, the source of the tables)."""
    records = load_records(source or out)
    summary = summarize(records)
    text = tables(summary)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables.md").write_text(text)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    figures(records, summary, out / "figures")
    if docs is not None:
        figures(records, summary, docs / "figures")
        if source is None or source.resolve() != (docs / "overfit.json").resolve():
            runs = sorted(records, key=lambda r: r["job"]["id"])
            (docs / "overfit.json").write_text(json.dumps({"runs": runs}, indent=1))
    return text
