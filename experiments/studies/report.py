"""The report: statistics over seeds, markdown tables and figures from the raw results."""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
from pathlib import Path

from .jobs import (
    BEFORE_SENTENCES,
    ELASTIC_SOLVERS,
    ELASTIC_STEPS,
    LAMBDAS,
    NOISE_RATES,
    NOISE_SUBSET_EVERY,
    SST_STEPS,
    field_evaluations,
    lam_tag,
)


def load_records(source: Path) -> list[dict]:
    if source.is_file():
        return json.loads(source.read_text())["runs"]
    return [json.loads(p.read_text()) for p in sorted((source / "raw").glob("*.json"))]


def stat(values) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": float("nan"), "std": float("nan"), "n": 0, "values": []}
    return {
        "mean": statistics.mean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "n": len(values),
        "values": values,
    }


def fmt(s: dict, digits: int = 3, scale: float = 1.0) -> str:
    if not s["n"]:
        return "n/a"
    text = f"{s['mean'] * scale:.{digits}f}"
    return (
        text + (f" ± {s['std'] * scale:.{digits}f}" if s["n"] > 1 else "") + ("" if s["n"] == 3 else f" (n={s['n']})")
    )


def summarize(records: list[dict]) -> dict:
    by_id = {r["job"]["id"].rsplit("_s", 1)[0]: [] for r in records}
    for r in records:
        by_id[r["job"]["id"].rsplit("_s", 1)[0]].append(r)
    summary = {"elasticity": {}, "finetune": {}, "matched": {}}
    for lam in LAMBDAS:
        runs = by_id.get(f"ot_noln_{lam_tag(lam)}", [])
        runs = [r for r in runs if "elastic" in r["result"]]
        if not runs:
            continue
        cells = {}
        for r in runs:
            for e in r["result"]["elastic"]:
                cells.setdefault((e["solver"], e["num_steps"]), []).append((r["job"]["seed"], e["loss"]))
        summary["elasticity"][str(lam)] = {
            f"{solver}/{steps}": {
                "field_evaluations": field_evaluations(steps, solver),
                "loss": stat([v for _, v in sorted(vals)]),
                "seeds": [s for s, _ in sorted(vals)],
            }
            for (solver, steps), vals in sorted(cells.items())
        }
        summary["elasticity"][str(lam)]["_reg"] = stat([r["result"]["eval_reg"] for r in runs])
    for key, runs in by_id.items():
        if not key.startswith("finetune_"):
            continue
        res = [r["result"] for r in runs]
        summary["finetune"][key[len("finetune_") :]] = {
            "accuracy": stat([x["accuracy"] for x in res]),
            "accuracy_noise_subset": stat([x.get("accuracy_noise_subset") for x in res]),
            "noise": {str(rate): stat([x["noise"][str(rate)] for x in res]) for rate in NOISE_RATES},
            "s_per_step": stat([x["s_per_step"] for x in res]),
            "parameters": res[0]["parameters"],
            **{
                k: stat([x.get(k) for x in res])
                for k in (
                    "accuracy_before",
                    "accuracy_before_at_M1",
                    "before_agreement_with_M1",
                    "before_logit_change_vs_M1",
                )
            },
        }
    names = {
        "baseline": "baseline",
        "ot_ln": "ot_ln",
        "compute_matched": "compute_matched",
        "param_matched": "param_matched",
        "ot_noln_lam1": "ot_noln",
    }
    for key, name in names.items():
        res = [r["result"] for r in by_id.get(key, [])]
        if not res:
            continue
        summary["matched"][name] = {
            "parameters": res[0]["parameters"],
            "block_applications": res[0]["block_applications"],
            "loss": stat([x["loss"] for x in res]),
            "s_per_step": stat([x["s_per_step"] for x in res]),
            "noise": {str(rate): stat([x["noise"][str(rate)] for x in res]) for rate in NOISE_RATES},
            "drop": {str(rate): stat([x["noise"][str(rate)] - x["loss"] for x in res]) for rate in NOISE_RATES},
        }
    return summary


MATCHED_LABELS = {
    "baseline": "(a) baseline, 4 layers x 128 dim",
    "ot_ln": "(b) OT, 3 shared blocks x M=5, LN",
    "compute_matched": "(c) compute-matched, 15 layers x 96 dim",
    "param_matched": "(d) parameter-matched, 3 layers x 96 dim, one pass",
    "ot_noln": "(b') OT without LayerNorms (study 1, lambda=1)",
}


def tables(summary: dict) -> str:
    lines = ["### Depth elasticity: validation loss at M' x solver (trained at M=5 Euler)", ""]
    steps_cols = ELASTIC_STEPS
    lines += [
        "| lambda | solver | " + " | ".join(f"M'={m}" for m in steps_cols) + " |",
        "| --- | --- | " + " | ".join("---" for _ in steps_cols) + " |",
    ]
    for lam, cells in summary["elasticity"].items():
        for solver in ELASTIC_SOLVERS:
            row = [fmt(cells[f"{solver}/{m}"]["loss"]) if f"{solver}/{m}" in cells else "n/a" for m in steps_cols]
            lines.append(f"| {lam} | {solver} | " + " | ".join(row) + " |")
    lines += [
        "",
        "Field evaluations = M' x stages (Euler 1, Heun 2, RK4 4). Transport cost reg at the training "
        "setting: " + ", ".join(f"lambda={lam}: {fmt(c['_reg'], 4)}" for lam, c in summary["elasticity"].items()),
        "",
    ]
    lines += [
        "### MiniLM on SST-2: accuracy (%) on all 872 validation sentences",
        "",
        "| model | before fine-tuning | after | after, noise subset: 0% | 5% | 10% | 20% | s/step |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    order = ["base"] + [f"M{m}_{lam_tag(lam)}" for m in SST_STEPS for lam in LAMBDAS]
    for key in order:
        s = summary["finetune"].get(key)
        if not s:
            continue
        before = fmt(s["accuracy_before"], 1, 100) if s["accuracy_before"]["n"] else "(same M, other lambda)"
        label = "base fine-tune" if key == "base" else f"OT M={key[1]}, lambda={key.split('lam')[1]}"
        lines.append(
            f"| {label} | {before} | {fmt(s['accuracy'], 1, 100)} | "
            f"{fmt(s['accuracy_noise_subset'], 1, 100)} | "
            + " | ".join(fmt(s["noise"][str(r)], 1, 100) for r in NOISE_RATES)
            + f" | {fmt(s['s_per_step'], 2)} |"
        )
    lines += [
        "",
        f"Before fine-tuning: the first {BEFORE_SENTENCES} validation sentences; after: all 872; noise "
        f"columns: every {NOISE_SUBSET_EVERY}th sentence (218). At step 0 (random classifier head, the same "
        "at M and at M=1):",
        "",
    ]
    for m in SST_STEPS:
        s = next(
            (x for k, x in summary["finetune"].items() if k.startswith(f"M{m}_") and x["accuracy_before"]["n"]), None
        )
        if s:
            lines.append(
                f"- M={m}: accuracy {fmt(s['accuracy_before'], 1, 100)} vs "
                f"{fmt(s['accuracy_before_at_M1'], 1, 100)}"
                f" at M=1 (the pretrained encoder); predictions agree with M=1 on "
                f"{fmt(s['before_agreement_with_M1'], 1, 100)}%; relative logit change "
                f"{fmt(s['before_logit_change_vs_M1'], 3)}"
            )
    lines += [
        "",
        "### Matched comparison on Shakespeare-char",
        "",
        "| model | parameters | block applications / token | val loss | loss at 5% / 10% / 20% noise "
        "(drop at 20%) | s/step |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, label in MATCHED_LABELS.items():
        s = summary["matched"].get(name)
        if not s:
            continue
        noise = " / ".join(fmt(s["noise"][str(r)]) for r in NOISE_RATES)
        lines.append(
            f"| {label} | {s['parameters']:,} | {s['block_applications']} | {fmt(s['loss'])} | {noise} "
            f"(+{fmt(s['drop']['0.2'])}) | {fmt(s['s_per_step'], 2)} |"
        )
    return "\n".join(lines) + "\n"


def figures(records: list[dict], summary: dict, folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    colors = {"euler": "C0", "heun": "C1", "rk4": "C2"}
    # 1. loss vs field evaluations, one panel per lambda, thin lines = seeds
    lams = list(summary["elasticity"])
    if lams:
        fig, axes = plt.subplots(1, len(lams), figsize=(5 * len(lams), 4), sharey=True, squeeze=False)
        for ax, lam in zip(axes[0], lams):
            for r in records:
                if r["job"]["id"].startswith(f"ot_noln_{lam_tag(float(lam))}_s") and "elastic" in r["result"]:
                    for solver in ELASTIC_SOLVERS:
                        pts = [
                            (e["field_evaluations"], e["loss"]) for e in r["result"]["elastic"] if e["solver"] == solver
                        ]
                        ax.plot(*zip(*pts), color=colors[solver], alpha=0.25, lw=0.8)
            for solver in ELASTIC_SOLVERS:
                cells = [
                    (c["field_evaluations"], c["loss"]["mean"])
                    for k, c in summary["elasticity"][lam].items()
                    if k.startswith(solver + "/")
                ]
                cells.sort()
                ax.plot(*zip(*cells), marker="o", color=colors[solver], label=f"{solver} (mean of seeds)")
            ax.axvline(5, color="grey", ls=":", lw=1)
            ax.set_xscale("log")
            ax.set_title(f"trained with lambda={lam} (M=5 Euler, dotted)")
            ax.set_xlabel("field evaluations per forward (M' x stages)")
            ax.set_ylim(top=min(ax.get_ylim()[1], 4.5))
        axes[0][0].set_ylabel("validation loss")
        axes[0][0].legend()
        fig.tight_layout()
        paths.append(folder / "study_elasticity.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
        # 1b. the change from the training setting, Euler, per lambda
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, lam in enumerate(lams):
            runs = [
                r
                for r in records
                if r["job"]["id"].startswith(f"ot_noln_{lam_tag(float(lam))}_s") and "elastic" in r["result"]
            ]
            deltas = {}
            for r in runs:
                ref = next(e["loss"] for e in r["result"]["elastic"] if e["solver"] == "euler" and e["num_steps"] == 5)
                for e in r["result"]["elastic"]:
                    if e["solver"] == "euler":
                        deltas.setdefault(e["num_steps"], []).append(e["loss"] - ref)
            xs = sorted(deltas)
            ax.errorbar(
                xs,
                [statistics.mean(deltas[x]) for x in xs],
                yerr=[statistics.stdev(deltas[x]) if len(deltas[x]) > 1 else 0 for x in xs],
                marker="o",
                capsize=3,
                label=f"lambda={lam}",
                color=f"C{i}",
            )
        ax.set_xscale("log")
        ax.set_xlabel("Euler steps M' at evaluation (trained at 5)")
        ax.set_ylabel("val loss(M') - val loss(5)")
        ax.set_title("loss change when M changes at inference (mean ± std over seeds)")
        ax.set_yscale("symlog", linthresh=0.05)
        ax.legend()
        fig.tight_layout()
        paths.append(folder / "study_elasticity_delta.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    # 2. SST-2 accuracy under noise, 3. matched comparison: loss under noise (lines with error bars)
    from hf_ot.recipes.plots import plot_xy

    def noise_series(stats_of, scale=1.0):
        return [(x, scale * st["mean"], scale * st["std"]) for x, st in zip([0.0, *NOISE_RATES], stats_of)]

    if summary["finetune"]:
        series = {
            key: noise_series([s["accuracy_noise_subset"], *[s["noise"][str(r)] for r in NOISE_RATES]], 100)
            for key, s in summary["finetune"].items()
        }
        paths.append(folder / "study_sst2_noise.png")
        plot_xy(
            series,
            paths[-1],
            "fraction of input tokens replaced",
            "SST-2 validation accuracy (%)",
            "MiniLM fine-tuned on SST-2 (mean ± std over seeds)",
        )
    if summary["matched"]:
        series = {
            MATCHED_LABELS[name]: noise_series([s["loss"], *[s["noise"][str(r)] for r in NOISE_RATES]])
            for name, s in summary["matched"].items()
        }
        paths.append(folder / "study_matched_noise.png")
        plot_xy(
            series,
            paths[-1],
            "fraction of input characters replaced",
            "validation loss",
            "Shakespeare-char, same optimizer steps (mean ± std over seeds)",
        )
    return paths


def report(out: Path, source: Path | None = None, docs: Path | None = None) -> dict:
    """Tables (OUT/tables.md), figures (OUT/figures/) and the combined JSON (OUT/studies.json) from the raw runs
    (or from a combined JSON given as `source`); `docs` also gets the JSON and the figures."""
    records = load_records(source or out)
    # a combined JSON keeps the machine its runs were measured on
    measured_on = json.loads(source.read_text())["machine"] if source and source.is_file() else machine()
    if not records:
        raise FileNotFoundError(
            f"No study results under {source or out}: run `python -m experiments.studies run` first."
        )
    summary = summarize(records)
    out.mkdir(parents=True, exist_ok=True)
    combined = {"machine": measured_on, "summary": summary, "runs": records}
    (out / "studies.json").write_text(json.dumps(combined, indent=1, default=str))
    (out / "tables.md").write_text(tables(summary))
    paths = figures(records, summary, out / "figures")
    if docs:
        (docs / "figures").mkdir(parents=True, exist_ok=True)
        (docs / "studies.json").write_text(json.dumps(combined, indent=1, default=str))
        for p in paths:
            shutil.copy(p, docs / "figures" / p.name)
    return summary


def machine() -> dict:
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
    }
