"""The small-data study's page: the tuning table per N (seed 1, selection slice), the selected configuration of each
family with 3 seeds on the report set, the paired difference; docs/results/pretrained-small-data.{md,json}."""

from __future__ import annotations

import json
import math
from pathlib import Path

from experiments.studies.report import fmt, stat

from .jobs import PLAIN_GRID, SEEDS, SELECT_SEED, SETTINGS, SIZES, TUNED_AT, Job, rank_key, selection

PAGE = "pretrained-small-data"
N_REPORT = 872


def binomial_se(p_percent: float, n: int = N_REPORT) -> float:
    p = p_percent / 100
    return 100 * math.sqrt(p * (1 - p) / n)


def label(job: dict) -> str:
    if job["family"] == "plain":
        return f"plain, dropout {job['dropout']:g}, weight decay {job['weight_decay']:g}"
    return f"OT, M = {job['steps']}, lambda {job['lam']:g}"


def load(results: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("N*_s*.json"))}


def tera(record: dict, key: str) -> float:
    point = record["best"] if key == "best" else record["curve"][-1]
    return point["train_flops"] / 1e12


def summarize(runs: dict[str, dict]) -> dict:
    out: dict = {"settings": SETTINGS, "plain_grid": PLAIN_GRID, "sizes": {}}
    for n in SIZES:
        sel = selection(TUNED_AT[n])
        tuning, chosen = [], {}
        for family, jobs in sel.items():
            done = [(job, runs.get(job.id)) for job in jobs]
            for job, rec in done if TUNED_AT[n] == n else ():
                if rec is None:
                    tuning.append({"id": job.id, "label": label(rec_job(job)), "missing": True})
                    continue
                tuning.append(
                    {
                        "id": job.id,
                        "label": label(rec["job"]),
                        "select_acc": rec["best"]["select_acc"],
                        "select_loss": rec["best"]["select_loss"],
                        "best_step": rec["best"]["step"],
                        "steps": rec["settings"]["total_steps"],
                        "report": rec["report"],
                        "tflop_best": tera(rec, "best"),
                        "tflop_total": tera(rec, "last"),
                        "s_per_step": rec["s_per_step"],
                    }
                )
            if all(rec is not None for _, rec in done):
                chosen[family] = min(done, key=lambda pair: rank_key(pair[1]))[0]  # type: ignore[arg-type]
        families = {}
        for family, job in chosen.items():
            at_n = Job(n, job.family, 1, job.steps, job.lam, job.dropout, job.weight_decay)
            recs = [runs.get(at_n.id.rsplit("_s", 1)[0] + f"_s{seed}") for seed in SEEDS]
            recs = [r for r in recs if r is not None]
            if not recs:
                continue
            row = {
                "label": label(recs[0]["job"]),
                "config": job.config,
                "seeds": [r["job"]["seed"] for r in recs],
                "report_acc": stat([r["report_acc"] for r in recs]),
                "select_acc": stat([r["best"]["select_acc"] for r in recs]),
                "best_step": stat([r["best"]["step"] for r in recs]),
                "tflop_best": stat([tera(r, "best") for r in recs]),
                "tflop_total": stat([tera(r, "last") for r in recs]),
                "train_s": stat([r["train_s"] for r in recs]),
                "s_per_step": stat([r["s_per_step"] for r in recs]),
            }
            if job.steps > 1:
                row["report_acc_euler1"] = stat([r["report"]["euler:1"] for r in recs])
            families[family] = row
        entry = {"tuned_at": TUNED_AT[n], "tuning": tuning, "selected": families}
        if len(families) == 2:
            plain, ot = families["plain"], families["ot"]
            paired = [s for s in plain["seeds"] if s in ot["seeds"]]
            diffs = [
                ot["report_acc"]["values"][ot["seeds"].index(s)]
                - plain["report_acc"]["values"][plain["seeds"].index(s)]
                for s in paired
            ]
            entry["ot_minus_plain"] = {"seeds": paired, **stat(diffs)}
        out["sizes"][str(n)] = entry
    return out


def rec_job(job) -> dict:
    return {
        "family": job.family,
        "dropout": job.dropout,
        "weight_decay": job.weight_decay,
        "steps": job.steps,
        "lam": job.lam,
    }


def pm(s: dict, digits: int = 1) -> str:
    return fmt(s, digits) if s["n"] != 1 else f"{s['mean']:.{digits}f} (n=1)"


def verdict(d: dict, plain: dict) -> str:
    """Clear only when every paired seed agrees and the mean exceeds one accuracy's binomial standard error."""
    se = binomial_se(plain["report_acc"]["mean"])
    values = d["values"]
    if d["n"] >= 2 and all(v > 0 for v in values) and d["mean"] > se:
        return "OT ahead beyond seed noise"
    if d["n"] >= 2 and all(v < 0 for v in values) and -d["mean"] > se:
        return "plain fine-tuning ahead beyond seed noise"
    return f"no difference shown (within seed noise; one accuracy's binomial s.e. is {se:.1f} points)"


def answer_lines(summary: dict) -> list[str]:
    lines = []
    for n, entry in summary["sizes"].items():
        sel = entry["selected"]
        if "ot_minus_plain" not in entry:
            lines.append(f"- **N = {int(n):,}**: not measured to the end (see below for what finished).")
            continue
        plain, ot, d = sel["plain"], sel["ot"], entry["ot_minus_plain"]
        ratio = ot["tflop_best"]["mean"] / plain["tflop_best"]["mean"]
        cheap = (
            f"; the OT model run at Euler M' = 1 (1 field evaluation) {pm(ot['report_acc_euler1'])}"
            if "report_acc_euler1" in ot
            else ""
        )
        lines.append(
            f"- **N = {int(n):,}: {verdict(d, plain)}.** Report accuracy (%) of tuned OT ({ot['label'][4:]}) "
            f"{pm(ot['report_acc'])} against tuned plain fine-tuning ({plain['label'][7:]}) {pm(plain['report_acc'])}: "
            "OT - plain "
            f"{d['mean']:+.1f} ± {d['std']:.1f} points paired by seed ({', '.join(f'{v:+.1f}' for v in d['values'])}), "
            f"at {ratio:.1f}x the training FLOPs to the kept point ({ot['tflop_best']['mean']:.1f} against "
            f"{plain['tflop_best']['mean']:.1f} TFLOP){cheap}."
        )
    return lines


def tables(summary: dict) -> list[str]:
    out = []
    for n, entry in summary["sizes"].items():
        n_int = int(n)
        out += [f"### N = {n_int:,} training sentences", ""]
        sel = entry["selected"]
        where = "" if entry["tuned_at"] == n_int else f", as selected at N = {entry['tuned_at']:,} (not re-tuned)"
        if sel:
            out += [
                f"Selected configuration of each family{where}, seeds {', '.join(map(str, SEEDS))} (report set: all "
                "872 validation sentences; mean ± std over seeds):",
                "",
                "| family: selected configuration | report accuracy % | per seed | selection accuracy % | kept step "
                "| TFLOP to kept point / in all | train s/step (1 thread, shared) | at Euler M' = 1 |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |",
            ]
            for row in sel.values():
                out.append(
                    f"| {row['label']} | **{pm(row['report_acc'])}** | "
                    f"{' / '.join(f'{v:.1f}' for v in row['report_acc']['values'])} | {pm(row['select_acc'])} | "
                    f"{pm(row['best_step'], 0)} | {row['tflop_best']['mean']:.1f} / {row['tflop_total']['mean']:.1f} | "
                    f"{row['s_per_step']['mean']:.2f} | "
                    f"{pm(row['report_acc_euler1']) if 'report_acc_euler1' in row else '(is M = 1)'} |"
                )
            if "ot_minus_plain" in entry:
                d = entry["ot_minus_plain"]
                out += [
                    "",
                    f"OT - plain, paired by seed: **{d['mean']:+.1f} ± {d['std']:.1f}** points "
                    f"({', '.join(f'{v:+.1f}' for v in d['values'])}; seeds {d['seeds']}).",
                ]
            out.append("")
        if entry["tuned_at"] != n_int:
            out += [] if sel else ["No run finished.", ""]
            continue
        out += [
            f"Tuning, seed {SELECT_SEED} (the choice reads the selection slice only: best selection accuracy at the "
            "kept point, lower selection loss on a tie; the report column is shown, never used):",
            "",
            "| configuration | selection accuracy % (kept point) | selection loss | kept step / steps | report "
            "accuracy % | at Euler M' = 1 | TFLOP to kept point / in all | train s/step |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        chosen = {row["label"] for row in sel.values()}
        for row in entry["tuning"]:
            if row.get("missing"):
                out.append(f"| {row['label']} | not finished | | | | | | |")
                continue
            mark = " (selected)" if row["label"] in chosen else ""
            rep = row["report"]
            key = [k for k in rep if k != "euler:1"] or ["euler:1"]
            out.append(
                f"| {row['label']}{mark} | {row['select_acc']:.1f} | {row['select_loss']:.3f} | {row['best_step']} / "
                f"{row['steps']} | {rep[key[0]]:.1f} | {rep['euler:1']:.1f}"
                f"{'' if len(rep) > 1 else ' (same)'} | {row['tflop_best']:.1f} / {row['tflop_total']:.1f} | "
                f"{row['s_per_step']:.2f} |"
            )
        out.append("")
    return out


def report(results: Path, docs: Path) -> str:
    runs = load(results)
    summary = summarize(runs)
    summary["runs"] = sorted(runs)
    summary["cpu_hours"] = sum(r["wall_s"] for r in runs.values()) / 3600
    summary["machine"] = next(iter(runs.values()))["machine"] if runs else {}
    docs.mkdir(parents=True, exist_ok=True)
    (docs / f"{PAGE}.json").write_text(json.dumps(summary, indent=1) + "\n")
    template = (Path(__file__).parent / "page.md").read_text()
    page = template.format(
        answer="\n".join(answer_lines(summary)),
        tables="\n".join(tables(summary)).rstrip(),
        runs=len(runs),
        cpu_hours=f"{summary['cpu_hours']:.1f}",
        lr=SETTINGS["lr"],
        batch=SETTINGS["batch"],
        epochs256=SETTINGS["epochs"][256],
        epochs2048=SETTINGS["epochs"][2048],
        torch=summary["machine"].get("torch", "?"),
        transformers=summary["machine"].get("transformers", "?"),
    )
    (docs / f"{PAGE}.md").write_text(page)
    return page
