"""The paper's Shakespeare-char comparison (`hf-ot paper`): OT vs baseline over seeds, noise, lambda and M."""

from __future__ import annotations

import statistics
from functools import partial
from pathlib import Path

from ..run_folders import check_outputs_replaceable, lock_outputs, write_json, write_text_atomic, writing_outputs
from .config import load_config
from .evaluate import ROBUSTNESS_FILES, TEACHER_FORCED, robustness
from .sweep import run_variants, summarize, sweep

_FULL_SHARED = [
    *"model.scratch.n_positions=256 data.block_size=256 training.max_steps=5000 training.warmup_steps=100".split(),
    *"training.per_device_train_batch_size=64 training.gradient_accumulation_steps=4 data.max_eval_blocks=null".split(),
    *(f"model.scratch.{name}_pdrop=0.2" for name in ("resid", "embd", "attn")),
]
PAPER_FILES = ("paper.json", "results.md", "curves.png")  # what `hf-ot paper` writes into --out besides its runs
KEYS = ("loss", "perplexity", "bleu", "rouge1", "rougeL")  # summarized over seeds (the report's main table)
# the OT-Transformer paper code's nanoGPT settings (GPU only): OT 5/5/320, baseline 6/6/384 (layers/heads/width)
PAPER_FULL = {
    name: [f"model.scratch.n_layer={n}", f"model.scratch.n_head={n}", f"model.scratch.n_embd={width}", *_FULL_SHARED]
    for name, n, width in (("ot", 5, 320), ("baseline", 6, 384))
}


def paper(
    out_dir="runs/paper",
    scale="cpu",
    seeds=(1, 2, 3),
    lambdas=(0.0, 0.1, 1.0, 10.0),
    steps=(1, 2, 5, 10),
    noise_rates=(0.05, 0.1, 0.2),
    extra=None,
    sweep_overrides=None,
    overwrite: bool = False,
) -> dict:
    """Baseline vs OT GPT over `seeds`, the noise test and lambda / M sweeps (seed 1); scale='full': official sizes."""
    out = Path(out_dir)
    with lock_outputs(out, "hf-ot paper"):
        check_outputs_replaceable(out, PAPER_FILES)
        check_outputs_replaceable(out / "robustness", ROBUSTNESS_FILES)
        configs = {"ot": "causal_lm_shakespeare_char", "baseline": "causal_lm_shakespeare_char_baseline"}  # packaged
        full = PAPER_FULL if scale == "full" else dict.fromkeys(PAPER_FULL, [])
        variants = {name: load_config(path, [*full[name], *(extra or [])]) for name, path in configs.items()}
        ot_sets = [*full["ot"], *(extra or []), *(sweep_overrides or [])]
        sweeps = {  # lambda and M, seed 1
            key: partial(
                sweep, configs["ot"], f"model.ot.ot_{key}", values, seeds[:1], ot_sets, out / folder, overwrite
            )
            for key, values, folder in (("lambda", lambdas, "sweep_lambda"), ("num_steps", steps, "sweep_steps"))
        }
        for planned in sweeps.values():  # every run folder and output checked before the first run, not hours later
            planned(check_only=True)
        title = "Shakespeare-char: OT vs baseline (mean, min-max)"
        runs = run_variants(variants, out, seeds, "{}/seed{}", title, overwrite)
        summary = {name: {key: summarize(r, key) for key in KEYS} for name, r in runs.items()}
        for name, r in runs.items():
            summary[name]["parameters"] = r[0]["results"]["parameters"]
            summary[name]["train_runtime_s"] = statistics.mean(x["results"]["train_runtime_s"] for x in r)
        models = {name: f"{r[0]['dir']}/model" for name, r in runs.items()}
        cut = variants["ot"].data.max_eval_blocks  # (the recipe's validation cut, as after training: said)
        cuts = [f"data.max_eval_blocks={'null' if cut is None else cut}", *(extra or [])]
        noise = robustness(models, configs["ot"], noise_rates, overrides=cuts, out_dir=out / "robustness")
        report = {"scale": scale, "seeds": list(seeds), "summary": summary, "robustness": noise}
        report["sweeps"] = {key: run() for key, run in sweeps.items()}
        with writing_outputs(out, PAPER_FILES):
            write_json(out / "paper.json", report, indent=1)
            write_text_atomic(out / "results.md", report_markdown(report))
        return report


def _fmt(stat) -> str:  # mean ± std over the seeds
    return "n/a" if not stat else f"{stat['mean']:.4f}" + (f" ± {stat['std']:.4f}" if stat.get("n", 1) > 1 else "")


def _table(header: list[str], rows: list[list]) -> list[str]:  # a markdown table, a blank line before it
    return ["", *("| " + " | ".join(map(str, row)) + " |" for row in [header, ["---"] * len(header), *rows])]


def report_markdown(report: dict) -> str:
    """The tables of a `paper` run, as markdown (figures: curves.png, robustness/robustness.png, sweep_*/...)."""
    s, noise = report["summary"], report["robustness"]
    model = lambda n: [n, f"{s[n]['parameters']:,}", *(_fmt(s[n][k]) for k in KEYS), f"{s[n]['train_runtime_s']:.0f}"]
    noisy = lambda r: f"{r['loss']:.4f} ({r.get('drop', {}).get('loss', 0.0):+.4f})"  # loss (drop)
    lines = [
        f"Seeds {report['seeds']}, scale `{report['scale']}`; mean ± sample std over seeds. Perplexity is from "
        f"the task loss; BLEU and ROUGE are {TEACHER_FORCED}.",
        *_table(
            ["model", "parameters", "val loss", "perplexity", "BLEU", "ROUGE-1", "ROUGE-L", "train time (s)"],
            [model("baseline"), model("ot")],
        ),
        "",
        "Test-time noise (fraction of input tokens replaced at random; seed-1 models):",
        *_table(  # a row per rate: every model's run at it
            ["noise rate", *(f"{n} loss (drop)" for n in noise)],
            [[runs[0]["noise_rate"], *map(noisy, runs)] for runs in zip(*noise.values())],
        ),
    ]
    for key, label in (("lambda", "lambda"), ("num_steps", "M")):
        sw = report["sweeps"][key]
        rows = [[v, *(_fmt(sw[k].get(str(v))) for k in ("loss", "perplexity", "eval_reg"))] for v in sw["values"]]
        lines += ["", f"Sensitivity to {label} (OT, seed {sw['seeds'][0]}):"]
        lines += _table([label, "val loss", "perplexity", "reg"], rows)
    return "\n".join(lines) + "\n"
