"""Every table and figure of the pretrained-elasticity study from the raw JSON in results/ (run.py writes the
encoder runs, `run.py recipe` the packaged recipe's runs as recipe__sS.json, decoder.py the decoder runs under
results/decoder/).

    python experiments/pretrained_elastic/report.py [--figures DIR]

writes experiments/pretrained_elastic/report.md (the tables) and the PNGs into DIR (default
experiments/pretrained_elastic/figures; docs/results/pretrained-elastic.md uses docs/figures).
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


RECIPE_ROW = "sst2_minilm_elastic"  # the packaged recipe's own runs (recipe__sS.json), not the study's loop
STUDY_POOL = "study's own (predates)"  # random.Random(0) over train.tsv, before run.py took the recipe's splits
RECIPE_POOL = "recipe's"


def load(results: Path):
    """(study runs by objective, noise runs by objective, recipe runs) from the raw JSON."""
    runs, noise, recipe = {}, {}, []
    for p in sorted(results.glob("*.json")):
        d = json.loads(p.read_text())
        if p.name.startswith("noise__"):
            noise.setdefault(d["recipe"], []).append(d)
        elif p.name.startswith("recipe__"):
            recipe.append(d)
        else:
            runs.setdefault(d["recipe"], []).append(d)
    return runs, noise, sorted(recipe, key=lambda r: r["seed"])


def pool_of(run) -> str:
    """Which training pool a study run used: run.py records the recipe's data preparation in protocol['data']."""
    return RECIPE_POOL if "data" in run["protocol"] else STUDY_POOL


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
                pool=sorted({pool_of(r) for r in rs}),
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


def tables(runs, noise, rows, recipe=()) -> str:
    out = []
    base = next((r for r in rows if r["name"] == "base"), None)
    shipped = [r for r in recipe if r["as_shipped"]]
    out.append("### Summary\n")
    out.append(
        "Rows from the study's loop (run.py run) trained on the training pool in the last column: \"study's own "
        "(predates)\" is the loop's earlier pool (random.Random(0) over train.tsv), from before the loop took the "
        f"recipe's data preparation. The row {RECIPE_ROW} is the packaged recipe itself (`hf-ot train`, ingested by "
        "`run.py recipe`): the measured figure for ot4_l0.1's setting.\n"
    )
    out.append(
        "| recipe | seeds | trained at (evals/forward) | accuracy at trained setting | accuracy at Euler M'=1 "
        "(1 eval) | cheapest setting within 0.5 pt of own (mean over seeds) | per seed | val reg | val "
        "straightness | training pool |"
    )
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
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
            f"{ms(r['reg'], 3)} | {ms(r['straight'], 3)} | {'; '.join(r['pool'])} |"
        )
    if shipped:
        grid = recipe_grid_mean(shipped)
        k, e, a = cheapest(grid, grid[shipped[0]["trained"]["key"]])
        per_seed = [cheapest(r["grid"], r["trained"]["accuracy"]) for r in shipped]
        out.append(
            f"| {RECIPE_ROW}: the packaged recipe as shipped (hf-ot train) | {len(shipped)} | "
            f"{shipped[0]['trained']['key'].replace(':', ' M=')} ({shipped[0]['trained']['field_evaluations']}) | "
            f"{ms(r['trained']['accuracy'] for r in shipped)} | {ms(r['grid']['euler:1'] for r in shipped)} | "
            f"{k.replace(':', ' M=')} ({e} evals): {a:.1f} | {', '.join(f'{c[0]} ({c[1]})' for c in per_seed)} | "
            f"– | – | {RECIPE_POOL} |"
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
    if shipped:
        cells = []
        for k in keys:
            c = ms(r["grid"][k] for r in shipped) if k in shipped[0]["grid"] else "–"
            cells.append(f"**{c}**" if k == shipped[0]["trained"]["key"] else c)
        out.append(f"| {RECIPE_ROW} (recipe) | " + " | ".join(cells) + " |")
    out.append(
        "\n(bold: the trained setting; in parentheses: field evaluations per forward = M' x stages; –: not in that "
        "grid. The recipe's whole grid is in its own section.)\n"
    )
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


SOLVER_ORDER = {"euler": 0, "heun": 1, "rk4": 2}


def grid_keys(run) -> list[str]:
    return sorted(run["grid"], key=lambda k: (SOLVER_ORDER[k.split(":")[0]], int(k.split(":")[1])))


def recipe_grid_mean(shipped) -> dict:
    return {k: mean(r["grid"][k] for r in shipped) for k in shipped[0]["grid"]}


def within(value: float, trained: float) -> bool:
    """The recipe's calibration rule (hf_ot.calibrate): at most TOL points below the trained setting."""
    return value >= trained - TOL - 1e-9


def setting(key: str) -> str:
    solver, steps = key.split(":")
    return f"{solver} M'={steps}"


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def recipe_section(recipe) -> str:
    """The packaged recipe as shipped: per seed and mean ± std, its trained setting and every grid point with its
    field evaluations, and whether a 2-evaluation setting is within TOL points of the trained one."""
    shipped = [r for r in recipe if r["as_shipped"]]
    left_out = [r for r in recipe if not r["as_shipped"]]
    if not shipped:
        return ""
    n = len(shipped)
    out = [f"### {RECIPE_ROW} as shipped, {n} seed{'s' if n > 1 else ''}\n"]
    out.append(
        f"The packaged recipe run as a user runs it, one run per seed: `OMP_NUM_THREADS=1 hf-ot train {RECIPE_ROW} "
        "--set output_dir=DIR --set training.seed=S` (200 steps of 32 from its 6,400-sentence pool, then its "
        "solver x M' grid on all 872 validation sentences), on a 2-core CPU shared with other jobs. Regenerate: "
        "`python experiments/pretrained_elastic/run.py recipe --from-runs DIR [DIR ...]` (or `--seeds S [S ...]` to "
        "train them) writes results/recipe__sS.json (raw, with each run's whole results.json), then "
        "`python experiments/pretrained_elastic/report.py`.\n"
    )
    out.append(
        "| seed | run folder | finished | training time | accuracy (results.json) | the recipe's calibration picks |"
    )
    out.append("| --- | --- | --- | --- | --- | --- |")
    for r in shipped:
        t = r.get("train_runtime_s")
        out.append(
            f"| {r['seed']} | `{r['folder']}` | {r['finished']} | {'–' if t is None else f'{t / 60:.1f} min'} | "
            f"{r['accuracy']:.1f} | {setting(r['choice'])} ({evals(r['choice'])} evaluations) |"
        )
    out.append("")
    trained = shipped[0]["trained"]["key"]
    seeds = " | ".join(f"seed {r['seed']}" for r in shipped)
    out.append(
        f"| setting | field evaluations | {seeds} | mean ± std | within {TOL} of trained (mean) | within (per seed) |"
    )
    out.append("| --- | --- | " + " | ".join("---" for _ in shipped) + " | --- | --- | --- |")
    trained_mean = mean(r["trained"]["accuracy"] for r in shipped)
    for k in [trained] + [k for k in grid_keys(shipped[0]) if k != trained]:
        values = [r["grid"][k] for r in shipped]
        label = setting(k) + (" (trained)" if k == trained else "")
        per_seed = ", ".join(yes(within(r["grid"][k], r["trained"]["accuracy"])) for r in shipped)
        out.append(
            f"| {label} | {evals(k)} | "
            + " | ".join(f"{v:.1f}" for v in values)
            + f" | {ms(values)} | {yes(within(mean(values), trained_mean))} | {per_seed} |"
        )
    out.append("")
    two = [k for k in grid_keys(shipped[0]) if evals(k) == 2]
    verdicts = []
    for k in two:
        m = mean(r["grid"][k] for r in shipped)
        verdicts.append(
            f"{setting(k)} {m:.1f} ({m - trained_mean:+.1f} against the trained {trained_mean:.1f}): "
            f"{'within' if within(m, trained_mean) else 'not within'} {TOL} points on the mean; per seed "
            + ", ".join(yes(within(r["grid"][k], r["trained"]["accuracy"])) for r in shipped)
        )
    out.append("At 2 field evaluations: " + "; ".join(verdicts) + ".\n")
    if left_out:
        out.append(
            "Left out (not as shipped): "
            + "; ".join(f"seed {r['seed']} ({', '.join(r['overrides'])})" for r in left_out)
            + ".\n"
        )
    return "\n".join(out)


DIFFERENCES = """### What still differs between the study's loop and the recipe

The recipe's row above is the recipe itself. The study's other objectives run on run.py's own loop, which now takes
the recipe's data preparation (hf_ot.recipes.classification_datasets on the recipe config: the same 6,400-sentence
pool, the recipe's tokenizer, max length 64) and its optimiser settings (read from the recipe config: AdamW lr 1e-4,
linear schedule with 20 warm-up steps, weight decay 0, gradient clipping 1.0, 200 steps of 32). What still differs:

- the objective itself (the point of the study: random depth, straightness, distillation, scaled or scheduled lambda);
- seeding and data order: the loop seeds the classifier head with torch.manual_seed(seed) and orders the pool by
  torch.randperm(seed); the recipe calls transformers' set_seed(training.seed) (default 1337) and Trainer's
  RandomSampler (both see every sentence once in 200 steps of 32);
- the recipe's Trainer also evaluates the validation loss 5 times during training and saves checkpoints (its
  defaults; no effect on the weights);
- evaluation: the loop evaluates in batches of 128 sorted by length over the grid Euler 1/2/4/8, Heun 1/2, RK4 1;
  the recipe evaluates its trained setting in batches of 64 sorted by length and its grid (every solver at M' = 1-4)
  in batches of 16 in file order (padding only: the same sentences and settings);
- the loop's runs in results/ other than recipe__*.json predate the shared data preparation: they trained on the
  loop's earlier pool (random.Random(0) over train.tsv, another 6,400 sentences), as the Summary's last column says;
  they were not rerun.
"""


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
    runs, noise, recipe = load(a.results)
    rows = summarize(runs)
    text = "\n".join(part for part in (recipe_section(recipe), tables(runs, noise, rows, recipe), DIFFERENCES) if part)
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
