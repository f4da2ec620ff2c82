"""The fair study's report: the tuning tables (selection split), the selected configurations with 3 seeds (report
split), the best loss reachable within a compute budget, the ablations and the long run, from OUT/raw (or a combined
JSON); figures of the learning curves against training FLOPs."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.studies.report import fmt as _fmt
from experiments.studies.report import load_records, stat

from .flops import BLOCK, analytic
from .jobs import SEEDS, SELECT_SEED, selection


def fmt(s: dict, digits: int = 3) -> str:
    """mean ± std over seeds; a single run as its value."""
    return f"{s['mean']:.{digits}f}" if s["n"] == 1 else _fmt(s, digits)


VOCAB = 65  # Tiny Shakespeare's characters
BUDGETS_TFLOP = (0.25, 0.5, 1.0, 1.5, 3.0)  # training compute budgets (1e12 FLOPs)


def ot_setting(ot: dict, name: str):
    """A recipe's `model.ot` setting, as recorded under its name (`ot_num_steps`) or its earlier one (`num_steps`)."""
    return ot[f"ot_{name}"] if f"ot_{name}" in ot else ot[name]


def _analytic(record: dict, field_evaluations: int, tokens: int) -> dict:
    """experiments.fair.flops' analytic count for the record's model, its blocks applied `field_evaluations` times."""
    scratch = record["result"]["config"]["model"]["scratch"]
    n_layer, d = scratch["n_layer"], scratch["n_embd"]
    return analytic(n_layer, d, n_layer * field_evaluations, VOCAB, tokens)


def flops_per_step(record: dict) -> float:
    """Analytic training FLOPs of one optimizer step of the record's model (at its trained M)."""
    ot = record["result"]["config"]["model"].get("ot")
    steps = ot_setting(ot, "num_steps") if ot else 1
    return _analytic(record, steps, record["settings"]["batch"] * BLOCK)["train_per_step"]


def label(record: dict) -> str:
    job, model = record["job"], record["result"]["config"]["model"]
    if not model.get("ot"):
        scratch = model["scratch"]
        norms = ", no LayerNorms" if job["model"] == "baseline_noln" else ""
        return f"baseline, dropout {scratch['resid_pdrop']:g}, wd {record['settings']['weight_decay']:g}{norms}"
    ot = model["ot"]
    norms = " + LayerNorms" if ot_setting(ot, "block_layer_norms") else ""
    kind = "residual" if ot_setting(ot, "mode") == "residual" else "paper" + norms
    return f"OT {kind}, lambda {ot_setting(ot, 'lambda'):g}, M={ot_setting(ot, 'num_steps')}"


def base_id(job_id: str) -> str:
    return job_id.rsplit("_s", 1)[0]


def budget_point(record: dict, budget: float) -> dict | None:
    """The curve point with the lowest selection-split loss among those reached within `budget` training FLOPs, and
    its report-split loss (early stopping within the budget)."""
    per_step = flops_per_step(record)
    points = [p for p in record["result"]["curve"] if p["step"] * per_step <= budget and p["step"] > 0]
    if not points:
        return None
    best = min(points, key=lambda p: p["val_loss"])
    return {"step": best["step"], "select": best["val_loss"], "report": best.get("report_loss")}


def _row(runs: list[dict]) -> dict:
    res = [r["result"] for r in runs]
    per_step = flops_per_step(runs[0])
    return {
        "label": label(runs[0]),
        "seeds": [r["job"]["seed"] for r in runs],
        "parameters": res[0]["parameters"],
        "train_gflop_per_step": per_step / 1e9,
        "best_step": stat([x["best_step"] for x in res]),
        "steps_run": stat([x.get("steps_run", x["curve"][-1]["step"]) for x in res]),
        "select_best": stat([x["best_curve_val_loss"] for x in res]),
        "report_best": stat([x["best"]["loss"] for x in res]),
        "report_final": stat([x["final"]["loss"] for x in res]),
        "train_at_stop": stat([x["curve"][-1]["train_eval_loss"] for x in res]),
        "tflop_to_best": stat([x["best_step"] * per_step / 1e12 for x in res]),
        "tflop_spent": stat([x.get("steps_run", x["curve"][-1]["step"]) * per_step / 1e12 for x in res]),
        "wall_s": stat([r["wall_s"] for r in runs]),
    }


def summarize(records: list[dict]) -> dict:
    by_id = {r["job"]["id"]: r for r in records}
    out: dict = {"selection": {}, "selected": {}, "paired": {}, "budgets": {}, "ablations": [], "long": [], "extra": []}
    for family, jobs in selection().items():
        done = [by_id[j.id] for j in jobs if j.id in by_id]
        out["selection"][family] = [{"id": base_id(r["job"]["id"]), **_row([r])} for r in done]
        if len(done) < len(jobs):
            continue
        best = min(done, key=lambda r: r["result"]["best_curve_val_loss"])
        runs = [
            by_id[f"{base_id(best['job']['id'])}_s{s}"] for s in SEEDS if f"{base_id(best['job']['id'])}_s{s}" in by_id
        ]
        out["selected"][family] = {"id": base_id(best["job"]["id"]), **_row(runs)}
        out["budgets"][family] = {}
        for budget in BUDGETS_TFLOP:
            points = [budget_point(r, budget * 1e12) for r in runs]
            # the family's best configuration within the budget, chosen on the selection split (seed 1)
            tuned = [(budget_point(r, budget * 1e12), r) for r in done]
            tuned = [(p, r) for p, r in tuned if p]
            pick = min(tuned, key=lambda pr: pr[0]["select"]) if tuned else None
            out["budgets"][family][str(budget)] = {
                "selected_config": stat([p["report"] for p in points if p]),
                "best_config_seed1": {"config": label(pick[1]), **pick[0]} if pick else None,
            }
    if {"baseline", "ot"} <= set(out["selected"]):
        base, ot = (out["selected"][f] for f in ("baseline", "ot"))
        pairs = {}
        for key in ("report_best", "report_final"):
            seeds = sorted(set(base["seeds"]) & set(ot["seeds"]))
            diffs = [
                by_id[f"{ot['id']}_s{s}"]["result"][key.split("_")[1]]["loss"]
                - by_id[f"{base['id']}_s{s}"]["result"][key.split("_")[1]]["loss"]
                for s in seeds
            ]
            pairs[key] = stat(diffs)
        out["paired"] = pairs
    # runs outside the tuning, with every seed of their configuration (a seed-1 selection run included)
    for key in sorted({base_id(r["job"]["id"]) for r in records if r["job"]["groups"] == ["extra"]}):
        runs = sorted((r for r in records if base_id(r["job"]["id"]) == key), key=lambda r: r["job"]["seed"])
        row = {"id": key, **_row(runs)}
        row["budgets"] = {
            str(b): stat([p["report"] for p in (budget_point(r, b * 1e12) for r in runs) if p]) for b in BUDGETS_TFLOP
        }
        out["extra"].append(row)
    for r in records:
        if r["job"]["groups"] == ["ablation"]:
            out["ablations"].append({"id": r["job"]["id"], **_row([r])})
        if r["job"]["groups"] == ["long"]:
            out["long"].append({"id": r["job"]["id"], **_row([r])})
    return out


CMD = "python -m experiments.fair report --out runs/fair --docs docs/results"


def _line(row: dict, extra: str = "") -> str:
    return (
        f"| {row['label']} | {row['parameters']:,} | {row['train_gflop_per_step']:.2f} | {fmt(row['best_step'], 0)} "
        f"| {fmt(row['steps_run'], 0)} | {fmt(row['select_best'])} | {fmt(row['report_best'])} "
        f"| {fmt(row['report_final'])} | {fmt(row['train_at_stop'])} | {fmt(row['tflop_to_best'], 2)}{extra} |"
    )


HEAD = (
    "| configuration | parameters | train GFLOP/step | best step | steps run | selection loss (best) "
    "| report loss, early-stopped | report loss, at stop | train loss at stop | TFLOP to best |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def tables(summary: dict) -> str:
    parts = [f"Produced by `{CMD}`.", ""]
    parts += ["### Tuning (seed 1; the selection split decides)", "", HEAD]
    for family in ("baseline", "ot"):
        chosen = summary["selected"].get(family, {}).get("id")
        for row in summary["selection"].get(family, []):
            parts.append(_line({**row, "label": ("**" + row["label"] + "**") if row["id"] == chosen else row["label"]}))
    parts += ["", "### The selected configuration of each family (seeds 1-3; report split)", "", HEAD]
    for family in ("baseline", "ot"):
        if family in summary["selected"]:
            parts.append(_line(summary["selected"][family]))
    if summary["paired"]:
        p = summary["paired"]
        parts += [
            "",
            f"Paired by seed, OT minus baseline: early-stopped {fmt(p['report_best'])} "
            f"(per seed {', '.join(f'{v:+.3f}' for v in p['report_best']['values'])}); "
            f"at stop {fmt(p['report_final'])}.",
        ]
    if summary["budgets"]:
        parts += ["", "### Best loss reachable within a training budget (report split, 128 blocks)", ""]
        fams = [f for f in ("baseline", "ot") if f in summary["budgets"]]
        parts.append(
            "| budget (TFLOP) | "
            + " | ".join(f"{f}: selected config, 3 seeds | {f}: best config within budget (seed 1)" for f in fams)
            + " |"
        )
        parts.append("| --- |" + " --- | --- |" * len(fams))
        for budget in BUDGETS_TFLOP:
            cells = []
            for f in fams:
                b = summary["budgets"][f][str(budget)]
                pick = b["best_config_seed1"]
                cells += [
                    fmt(b["selected_config"]),
                    f"{pick['report']:.3f} ({pick['config']}, step {pick['step']})" if pick else "n/a",
                ]
            parts.append(f"| {budget:g} | " + " | ".join(cells) + " |")
    titles = {
        "ablations": "Ablations (seed 1)",
        "long": "Long run (seed 1): the selected OT configuration, 2,000 steps",
        "extra": "Outside the tuning: the cheapest OT configuration with 3 seeds, and the paper's M = 5",
    }
    for name, title in titles.items():
        if summary.get(name):
            parts += ["", f"### {title}", "", HEAD]
            parts += [_line(row) for row in summary[name]]
    for row in summary.get("extra", []):
        if row["report_best"]["n"] > 1:
            cells = ", ".join(f"{b} TFLOP {fmt(s)}" for b, s in row["budgets"].items() if s["n"])
            parts += ["", f"{row['label']} within a budget (report split, 128 blocks): {cells}."]
    return "\n".join(parts)


def flops_lines(table: dict) -> str:
    base = table["baseline 4x128"]["train_per_step"]
    lines = [
        "| model | block applications per token | forward MFLOP per token (analytic) | training GFLOP per step "
        "(analytic) | counted by torch | x baseline |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in table.items():
        lines.append(
            f"| {name} | {row['block_applications']} | {row['forward_per_token'] / 1e6:.2f} "
            f"| {row['train_per_step'] / 1e9:.2f} | {row['counted_train_per_step'] / 1e9:.2f} "
            f"| {row['train_per_step'] / base:.2f} |"
        )
    return "\n".join(lines)


def figures(records: list[dict], summary: dict, folder: Path, prefix: str = "fair") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 5))
    colours = {"baseline": "tab:blue", "ot": "tab:red"}
    chosen = {summary["selected"][f]["id"]: f for f in summary["selected"]}
    for r in records:
        if r["job"]["groups"] not in (["select"], ["report"], ["long"]):
            continue
        family = "baseline" if r["job"]["model"] == "baseline" else "ot"
        per_step = flops_per_step(r)
        curve = [p for p in r["result"]["curve"] if p["step"] > 0 and "report_loss" in p]
        strong = base_id(r["job"]["id"]) in chosen or r["job"]["groups"] == ["long"]
        ax.plot(
            [p["step"] * per_step / 1e12 for p in curve],
            [p["report_loss"] for p in curve],
            color=colours[family],
            alpha=0.9 if strong else 0.25,
            lw=1.5 if strong else 0.8,
            label=(label(r) + (", 2,000 steps" if r["job"]["groups"] == ["long"] else ""))
            if strong and r["job"]["seed"] == SELECT_SEED
            else None,
        )
    ax.set_xlabel("training compute (TFLOP, analytic)")
    ax.set_ylabel("validation loss, report split (128 blocks)")
    ax.set_ylim(2.5, 3.0)
    ax.set_title("Tuned baseline vs tuned OT: loss against training compute (faint: other configurations)")
    ax.legend(fontsize=8)
    path = folder / f"{prefix}_curves_flops.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def forward_mflop_per_token(record: dict, field_evaluations: int) -> float:
    """Analytic forward MFLOP per token of the record's model at `field_evaluations` applications of its blocks."""
    return _analytic(record, field_evaluations, BLOCK)["forward_per_token"] / 1e6


def inference(records: list[dict], summary: dict) -> dict:
    """The calibrated OT runs (group "infer"): every solver x M' point's report loss (3 seeds) and inference cost, the
    setting `hf-ot calibrate` chose on the selection split, against the selected baseline at its one depth."""
    runs = sorted((r for r in records if r["job"]["groups"] == ["infer"]), key=lambda r: r["job"]["seed"])
    base = summary["selected"].get("baseline")
    if not runs or not base:
        return {}
    by_id = {r["job"]["id"]: r for r in records}
    base_runs = [by_id[f"{base['id']}_s{s}"] for s in base["seeds"]]
    points: dict[tuple[str, int], list[dict]] = {}
    for r in runs:
        for row in r["result"]["calibration"]["rows"]:
            points.setdefault((row["solver"], row["num_steps"]), []).append(row)
    rows = []
    for (solver, steps), found in sorted(points.items(), key=lambda kv: (kv[1][0]["field_evaluations"], kv[0])):
        evaluations = found[0]["field_evaluations"]
        rows.append(
            {
                "solver": solver,
                "num_steps": steps,
                "field_evaluations": evaluations,
                "mflop_per_token": forward_mflop_per_token(runs[0], evaluations),
                "select": stat([x["select_loss"] for x in found]),
                "report": stat([x["report_loss"] for x in found]),
            }
        )
    return {
        "label": label(runs[0]),
        "seeds": [r["job"]["seed"] for r in runs],
        "tolerance": runs[0]["result"]["calibration"]["tolerance"],
        "report_blocks": runs[0]["settings"]["final_blocks"],
        "trained": runs[0]["result"]["calibration"]["trained"],
        "choices": [r["result"]["calibration"]["choice"] for r in runs],
        "rows": rows,
        "baseline": {
            "label": base["label"],
            "mflop_per_token": forward_mflop_per_token(base_runs[0], 1),
            "report": stat([r["result"]["best"]["loss"] for r in base_runs]),
        },
    }


def inference_table(inf: dict) -> str:
    if not inf:
        return ""
    base = inf["baseline"]
    chosen = {(c["solver"], c["num_steps"]) for c in inf["choices"]}
    lines = [
        f"### Inference at the calibrated M' ({inf['label']}, seeds {', '.join(map(str, inf['seeds']))}; "
        f"report split, {inf['report_blocks']} blocks)",
        "",
        "| setting | field evaluations | forward MFLOP per token | x baseline | selection loss | report loss "
        "| report loss - baseline's |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {base['label']} (one pass) | - | {base['mflop_per_token']:.2f} | 1.00 | - | {fmt(base['report'])} | - |",
    ]
    trained = (inf["trained"]["solver"], inf["trained"]["num_steps"])
    for row in inf["rows"]:
        key = (row["solver"], row["num_steps"])
        name = f"{row['solver']} M'={row['num_steps']}"
        name += " (trained)" if key == trained else ""
        name = f"**{name}** (chosen)" if key in chosen else name
        lines.append(
            f"| {name} | {row['field_evaluations']} | {row['mflop_per_token']:.2f} "
            f"| {row['mflop_per_token'] / base['mflop_per_token']:.2f} | {fmt(row['select'])} | {fmt(row['report'])} "
            f"| {row['report']['mean'] - base['report']['mean']:+.3f} |"
        )
    picks = "; ".join(f"seed {s}: {c['solver']} M'={c['num_steps']}" for s, c in zip(inf["seeds"], inf["choices"]))
    lines += ["", f"`hf-ot calibrate`'s choice on the selection split (tolerance {inf['tolerance']:g}): {picks}."]
    return "\n".join(lines)


def report(out: Path, source: Path | None = None, docs: Path | None = None, name: str = "fair-comparison") -> str:
    """The tables as Markdown; with `docs`, also DOCS/NAME.json (every raw record) and the figure."""
    records = load_records(source or out)
    summary = summarize(records)
    text = tables(summary)
    inf = inference(records, summary)
    if inf:
        text += "\n\n" + inference_table(inf)
    extra = {}
    if source is not None:
        extra = {k: v for k, v in json.loads(source.read_text()).items() if k == "flops"}
    elif (out / "flops.json").exists():
        extra["flops"] = json.loads((out / "flops.json").read_text())
    if "flops" in extra:
        text += "\n\n### FLOPs per step (`python -m experiments.fair flops`)\n\n" + flops_lines(extra["flops"])
    if docs:
        docs.mkdir(parents=True, exist_ok=True)
        if source is None:
            (docs / f"{name}.json").write_text(json.dumps({"runs": records, **extra}, indent=1))
        figures(records, summary, docs / "figures", "fair" if name == "fair-comparison" else name)
    return text
