"""Every table and figure of the pretrained-elasticity study from the raw JSON in results/ (run.py writes the
encoder runs, decoder.py the decoder runs under results/decoder/).

    python experiments/pretrained_elastic/report.py [--figures DIR]

writes experiments/pretrained_elastic/report.md (the tables) and the PNGs into DIR (default
experiments/pretrained_elastic/figures; docs/results.md uses docs/figures).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
STAGES = {"euler": 1, "heun": 2, "rk4": 4}
TOL = 0.5  # points: "within 0.5 points of its own trained setting"


def evals(key: str) -> int:
    solver, steps = key.split(":")
    return STAGES[solver] * int(steps)


def load(results: Path):
    runs, noise = {}, {}
    for p in sorted(results.glob("*.json")):
        d = json.loads(p.read_text())
        if p.name.startswith("noise__"):
            noise.setdefault(d["recipe"], []).append(d)
        else:
            runs.setdefault(d["recipe"], []).append(d)
    return runs, noise


def ms(values, digits=1):
    values = list(values)
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def mean(values):
    return statistics.mean(list(values))


def trained_key(run):
    s, m = run["spec"]["train"]
    return f"{s}:{m}"


def cheapest(grid_mean: dict, target: float):
    """Fewest field evaluations whose accuracy is >= target - TOL (ties: the more accurate)."""
    ok = [(evals(k), -a, k) for k, a in grid_mean.items() if a >= target - TOL]
    e, na, k = min(ok)
    return k, e, -na


def summarize(runs):
    rows = []
    for name, rs in runs.items():
        keys = list(rs[0]["grid"])
        gmean = {k: mean(r["grid"][k] for r in rs) for k in keys}
        tk = trained_key(rs[0])
        own = gmean[tk]
        k, e, a = cheapest(gmean, own)
        per_seed = [cheapest(r["grid"], r["grid"][tk]) for r in rs]
        rows.append(
            dict(
                name=name,
                note=rs[0]["spec"].get("note", ""),
                seeds=[r["seed"] for r in rs],
                key=tk,
                trained_evals=evals(tk) if not rs[0]["spec"].get("sample") else None,
                acc=[r["grid"][tk] for r in rs],
                acc1=[r["grid"]["euler:1"] for r in rs],
                grid=gmean,
                grid_runs={kk: [r["grid"][kk] for r in rs] for kk in keys},
                cheapest=(k, e, a),
                cheapest_seed=[f"{c[0]} ({c[1]})" for c in per_seed],
                reg=[r["val_reg"] for r in rs],
                straight=[r["val_straight"] for r in rs],
                s_step=[r["s_per_step"] for r in rs],
                reg0=rs[0]["reg0"],
                task0=rs[0]["task0"],
            )
        )
    order = [
        "base",
        "ot2_l0.1",
        "ot4_l1",
        "ot4_l0",
        "ot4_l0.1",
        "ot4_ratio0.25",
        "ot4_l1_warm",
        "ot4_l1_d1",
        "ot2_s1",
        "ot4_s1",
        "rd4",
        "rd4_l0.1",
        "rd4_s1",
    ]
    rows.sort(key=lambda r: order.index(r["name"]) if r["name"] in order else 99)
    return rows


def mean_train_evals(run):
    spec = run["spec"]
    if spec.get("sample"):
        return mean(STAGES[s] * m for s, m in spec["sample"])
    return evals(trained_key(run))


def tables(runs, noise, rows) -> str:
    out = []
    base = next((r for r in rows if r["name"] == "base"), None)
    out.append("### Summary\n")
    out.append(
        "| recipe | seeds | trained at (evals/forward) | accuracy at trained setting | accuracy at Euler M'=1 "
        "(1 eval) | cheapest setting within 0.5 pt of own (mean over seeds) | per seed | val reg | val "
        "straightness |"
    )
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        rs = runs[r["name"]]
        train = r["key"].replace(":", " M=") + f" ({evals(r['key'])})"
        if rs[0]["spec"].get("sample"):
            train = (
                "random "
                + "/".join(f"{s[0]} {s[1]}" for s in rs[0]["spec"]["sample"])
                + f" (mean {mean_train_evals(rs[0]):.2f}); read at {r['key'].replace(':', ' M=')}"
            )
        k, e, a = r["cheapest"]
        out.append(
            f"| {r['name']}: {r['note']} | {len(r['seeds'])} | {train} | {ms(r['acc'])} | {ms(r['acc1'])} | "
            f"{k.replace(':', ' M=')} ({e} evals): {a:.1f} | {', '.join(r['cheapest_seed'])} | "
            f"{ms(r['reg'], 3)} | {ms(r['straight'], 3)} |"
        )
    out.append("")
    keys = list(rows[0]["grid"]) if rows else []
    out.append("### Accuracy over the (solver, M') grid (validation, 872 sentences; mean ± std over seeds)\n")
    out.append("| recipe | " + " | ".join(f"{k.replace(':', ' ')} ({evals(k)})" for k in keys) + " |")
    out.append("| --- | " + " | ".join("---" for _ in keys) + " |")
    for r in rows:
        cells = []
        for k in keys:
            c = ms(r["grid_runs"][k])
            cells.append(f"**{c}**" if k == r["key"] else c)
        out.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    out.append("\n(bold: the trained setting; in parentheses: field evaluations per forward = M' x stages.)\n")
    if base:
        out.append("### Against plain fine-tuning (base)\n")
        b = base["acc"]
        out.append(
            f"Base: {ms(b)} over {len(b)} seed(s). Difference of each recipe's trained-setting accuracy and "
            "of its cheapest within-0.5 setting to the base mean:\n"
        )
        out.append("| recipe | trained setting - base | Euler M'=1 - base |")
        out.append("| --- | --- | --- |")
        for r in rows:
            out.append(f"| {r['name']} | {mean(r['acc']) - mean(b):+.1f} | {mean(r['acc1']) - mean(b):+.1f} |")
        out.append("")
    curves = [(r["seed"], r["curve"]) for r in runs.get("base", [])]
    if curves:
        out.append("### Plain fine-tuning: validation accuracy along training (all 872 sentences)\n")
        steps = [s for s, _ in curves[0][1]]
        out.append("| seed | " + " | ".join(f"step {s}" for s in steps) + " |")
        out.append("| --- | " + " | ".join("---" for _ in steps) + " |")
        for seed, c in curves:
            out.append(f"| {seed} | " + " | ".join(f"{a:.1f}" for _, a in c) + " |")
        out.append("")
    out.append("### Training objective at start and end (mean of the first / last 20 steps, seed 1)\n")
    out.append("| recipe | task loss start -> end | reg start -> end | reg0 / task0 at step 0 |")
    out.append("| --- | --- | --- | --- |")
    for r in rows:
        h = next(x for x in runs[r["name"]] if x["seed"] == min(r["seeds"]))["history"]
        a, z = h[:20], h[-20:]
        out.append(
            f"| {r['name']} | {mean(x['task'] for x in a):.3f} -> {mean(x['task'] for x in z):.3f} | "
            f"{mean(x['reg'] for x in a):.3f} -> {mean(x['reg'] for x in z):.3f} | "
            f"{r['reg0']:.3f} / {r['task0']:.3f} |"
        )
    out.append("")
    if noise:
        out.append("### Test-time token noise (all 872 sentences; the same draw for every model)\n")
        out.append("| recipe | setting | seeds | 0% | 5% | 10% | 20% | drop at 20% |")
        out.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for name, ns in noise.items():
            for key in ns[0]["noise"]:
                vals = {rate: [n["noise"][key][rate] for n in ns] for rate in ns[0]["noise"][key]}
                drop = [n["noise"][key]["0.2"] - n["noise"][key]["0.0"] for n in ns]
                out.append(
                    f"| {name} | {key.replace(':', ' M=')} | {len(ns)} | "
                    + " | ".join(ms(vals[r]) for r in ("0.0", "0.05", "0.1", "0.2"))
                    + f" | {ms(drop)} |"
                )
        out.append("")
    return "\n".join(out)


def figures(runs, noise, rows, folder: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    # 1. accuracy against field evaluations, one panel per recipe, one line per solver
    n = len(rows)
    cols = min(4, n)
    nrows = (n + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(3.6 * cols, 2.9 * nrows), squeeze=False, sharey=True)
    base = next((r for r in rows if r["name"] == "base"), None)
    for ax, r in zip(axes.flat, rows):
        for solver, marker in (("euler", "o"), ("heun", "s"), ("rk4", "^")):
            ks = [k for k in r["grid"] if k.startswith(solver + ":")]
            if not ks:
                continue
            xs = [evals(k) for k in ks]
            ys = [r["grid"][k] for k in ks]
            ax.plot(xs, ys, marker=marker, label=solver)
            for k in ks:
                if len(r["grid_runs"][k]) > 1:
                    ax.errorbar(
                        evals(k),
                        r["grid"][k],
                        yerr=statistics.stdev(r["grid_runs"][k]),
                        color="gray",
                        lw=0.8,
                        capsize=2,
                    )
        ax.axhline(mean(r["acc"]), color="k", ls=":", lw=1)
        ax.axhspan(mean(r["acc"]) - TOL, mean(r["acc"]) + TOL, color="k", alpha=0.08)
        if base:
            ax.axhline(mean(base["acc"]), color="tab:red", ls="--", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{r['name']} ({len(r['seeds'])} seed{'s' if len(r['seeds']) > 1 else ''})", fontsize=9)
        ax.set_xlabel("field evaluations / forward")
        ax.set_ylim(max(45, min(min(r["grid"].values()) for r in rows) - 2), None)
    for ax in axes.flat[n:]:
        ax.axis("off")
    axes[0, 0].set_ylabel("val accuracy (%)")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(
        "MiniLM SST-2, accuracy at other (solver, M')\ndotted: own trained setting (band ±0.5 pt); "
        "dashed red: plain fine-tuning",
        fontsize=9,
    )
    fig.tight_layout()
    p = folder / "pretrained_elastic_grid.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    # 2. training curves: task loss and reg (smoothed), base validation curve
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for r in rows:
        h = next(x for x in runs[r["name"]] if x["seed"] == min(r["seeds"]))["history"]
        w = 20
        sm = lambda v, w=w: [mean(v[max(0, i - w + 1) : i + 1]) for i in range(len(v))]  # noqa: E731
        axes[0].plot(sm([x["task"] for x in h]), label=r["name"], lw=1)
        axes[1].plot(sm([x["reg"] for x in h]), label=r["name"], lw=1)
    axes[0].set_title("training task loss (20-step mean, seed 1)", fontsize=9)
    axes[1].set_title("training reg at the step's (solver, M) (20-step mean)", fontsize=9)
    axes[0].legend(fontsize=6)
    for seed_run in runs.get("base", []):
        c = seed_run["curve"]
        axes[2].plot([s for s, _ in c], [a for _, a in c], marker="o", label=f"seed {seed_run['seed']}")
    axes[2].set_title("plain fine-tuning: validation accuracy", fontsize=9)
    axes[2].set_xlabel("optimizer step")
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    p = folder / "pretrained_elastic_training.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    if noise:
        fig, ax = plt.subplots(figsize=(5, 3.4))
        for name, ns in noise.items():
            for key in ns[0]["noise"]:
                rates = ("0.0", "0.05", "0.1", "0.2")
                ys = [mean(n["noise"][key][r] for n in ns) for r in rates]
                ax.plot([float(r) * 100 for r in rates], ys, marker="o", label=f"{name} @ {key}")
        ax.set_xlabel("token noise (%)")
        ax.set_ylabel("val accuracy (%)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        p = folder / "pretrained_elastic_noise.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def decoder_report(figures_dir: Path) -> str:
    """decoder.py's tables (as a section of report.md) and its figure, written into figures_dir."""
    import contextlib
    import io
    import sys

    sys.path.insert(0, str(HERE))
    import decoder

    if not decoder.load()[0]:
        return ""
    decoder.FIGURES = figures_dir
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        decoder.cmd_report(None)
    return buffer.getvalue().replace("# Decoder:", "## Decoder:", 1).replace("\n## ", "\n### ")


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--results", type=Path, default=HERE / "results")
    p.add_argument("--figures", type=Path, default=HERE / "figures")
    p.add_argument("--out", type=Path, default=HERE / "report.md")
    a = p.parse_args(argv)
    runs, noise = load(a.results)
    rows = summarize(runs)
    text = tables(runs, noise, rows)
    paths = figures(runs, noise, rows, a.figures)
    decoder_text = decoder_report(a.figures)
    if decoder_text:
        text += "\n\n" + decoder_text
        paths.append(a.figures / "decoder_grid.png")
    a.out.write_text("# Pretrained elasticity: tables (generated by report.py from results/)\n\n" + text + "\n")
    print(a.out)
    for x in paths:
        print(x)


if __name__ == "__main__":
    main()
