"""Experiments: evaluation of saved models (optionally under test-time noise), seeds, lambda / M sweeps, plots, and
the paper's Shakespeare-char comparison (`hf-ot paper`)."""

from __future__ import annotations

import copy
import json
import statistics
from pathlib import Path

from . import evaluation as ev
from .outputs import write_json
from .recipes import load_config, run_recipe, text_blocks

# ------------------------------------------------------------------------------------------- evaluate a folder


def load_for_eval(folder: str, trust_remote_code: bool = False):
    """Load a saved model and its tokenizer. hf_ot's own types load with hf_ot's installed code; a folder whose code
    is not hf_ot's (its config's auto_map points at its own Python files) runs that code only with
    trust_remote_code=True, as in transformers."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    model = auto.from_pretrained(folder, trust_remote_code=trust_remote_code).eval()
    return model, AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)


def lm_eval_dataset(cfg: dict, tokenizer):
    """The recipe's validation blocks, tokenized with the saved model's tokenizer."""
    from .data import load_text

    _, val_text = load_text(cfg["data"])
    return text_blocks(val_text, tokenizer, cfg["data"], cfg["data"].get("max_eval_blocks"))


def evaluate_folder(folder: str, config: str, overrides=None, noise_rates=(), metrics=None, accelerator=None,
                    trust_remote_code: bool = False) -> dict:
    """Evaluate a saved model on a recipe's validation data: causal LM teacher-forced (loss, perplexity, text
    metrics of the argmax predictions), translation generation-based (BLEU, ROUGE, BERTScore); each noise rate adds a
    run with that fraction of input tokens randomly replaced, and its drop from clean."""
    cfg = load_config(config, overrides)
    spec = cfg.get("evaluation") or {}
    metrics = ev.check_metric_names(metrics if metrics is not None else spec.get("metrics", ("bleu", "rouge")))
    rates = [ev.check_noise_rate(r) for r in noise_rates]  # before any model is loaded
    model, tokenizer = load_for_eval(folder, trust_remote_code)
    results = {"model": folder, "task": cfg["task"], "runs": []}
    for rate in (0.0, *[r for r in rates if r > 0]):
        if cfg["task"] == "causal-lm":
            res = ev.teacher_forced_lm(model, lm_eval_dataset(cfg, tokenizer), tokenizer,
                                       batch_size=int(spec.get("batch_size", 16)), noise_rate=rate,
                                       accelerator=accelerator)
            run = {"noise_rate": rate, "loss": res.loss, "perplexity": res.perplexity, "samples": res.samples}
            if metrics:
                run.update(ev.text_metrics(res.predictions, res.references, metrics))
        elif cfg["task"] == "translation":
            from .data import load_translation

            raw = load_translation(cfg["data"])["validation"]
            n = int(spec.get("generate_samples", 100))
            prefix = cfg["data"].get("source_prefix", "")
            hyps = ev.generate_texts(model, tokenizer, [prefix + s for s in raw["source"][:n]], noise_rate=rate,
                                     max_new_tokens=int(spec.get("max_new_tokens", 48)), do_sample=False,
                                     num_beams=int(spec.get("num_beams", 1)))
            run = {"noise_rate": rate, "samples": len(hyps), **ev.text_metrics(hyps, list(raw["target"][:n]),
                                                                                metrics)}
        else:
            raise ValueError(f"evaluate supports causal-lm and translation recipes, got {cfg['task']!r}.")
        results["runs"].append(run)
    clean = results["runs"][0]
    for run in results["runs"][1:]:
        run["drop"] = {k: run[k] - clean[k] for k in run if k not in ("noise_rate", "samples") and
                       isinstance(run[k], (int, float))}
    return results


# ------------------------------------------------------------------------------------------------------ sweeps


def set_key(cfg: dict, dotted: str, value) -> dict:
    cfg = copy.deepcopy(cfg)
    node = cfg
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return cfg


def run_grid(cfg: dict, out_dir: Path, param: str | None, values, seeds, overwrite=True) -> list[dict]:
    """One recipe run per (value, seed); returns their results with the learning curves."""
    rows = []
    for value in (values if param else [None]):
        for seed in seeds:
            run_cfg = set_key(cfg, "training.seed", int(seed))
            tag = f"seed{seed}"
            if param:
                run_cfg = set_key(run_cfg, param, value)
                tag = f"{param.rsplit('.', 1)[-1]}={value}_{tag}"
            run_cfg["output_dir"] = str(out_dir / tag)
            results = run_recipe(run_cfg, overwrite=overwrite)
            history = json.loads((out_dir / tag / "log_history.json").read_text())
            rows.append({"param": param, "value": value, "seed": seed, "dir": str(out_dir / tag),
                         "results": results, "curve": [(h["step"], h["loss"]) for h in history if "loss" in h
                                                       and "step" in h]})
    return rows


def summarize(rows: list[dict], key: str = "loss") -> dict:
    """mean and sample std over seeds of `key`, per swept value."""
    groups: dict = {}
    for row in rows:
        groups.setdefault(str(row["value"]), []).append(row["results"].get(key))
    return {v: {"mean": statistics.mean(x), "std": statistics.stdev(x) if len(x) > 1 else 0.0, "n": len(x)}
            for v, x in groups.items() if all(isinstance(i, (int, float)) for i in x)}


# -------------------------------------------------------------------------------------------------------- plots


def _axes():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(6, 4))


def _finish(fig, ax, path: Path, xlabel: str, ylabel: str, title: str) -> Path:
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_curves(groups: dict[str, list[list[tuple[int, float]]]], path: Path, title: str) -> Path:
    """Learning curves: one line per group (mean over its runs), the band is min..max over runs."""
    fig, ax = _axes()
    for label, curves in groups.items():
        steps = [s for s, _ in curves[0]]
        values = [[v for _, v in c][: len(steps)] for c in curves]
        mean = [statistics.mean(col) for col in zip(*values)]
        ax.plot(steps[: len(mean)], mean, label=label)
        if len(values) > 1:
            ax.fill_between(steps[: len(mean)], [min(c) for c in zip(*values)], [max(c) for c in zip(*values)],
                            alpha=0.2)
    return _finish(fig, ax, path, "optimizer step", "training loss (task + lambda * reg)", title)


def plot_xy(series: dict[str, list[tuple[float, float, float]]], path: Path, xlabel: str, ylabel: str, title: str,
            logx: bool = False) -> Path:
    """Lines with error bars: series name -> [(x, mean, std)]."""
    fig, ax = _axes()
    for label, points in series.items():
        xs, ys, es = zip(*points)
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=label)
    if logx:
        ax.set_xscale("symlog", linthresh=0.01)
    return _finish(fig, ax, path, xlabel, ylabel, title)


# ----------------------------------------------------------------------------------------------- commands


def sweep(config: str, param: str, values, seeds=(1,), overrides=None, out_dir="runs/sweep") -> dict:
    cfg = load_config(config, overrides)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = run_grid(cfg, out, param, values, seeds)
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
    return summary


def robustness(models: dict[str, str], config: str, rates, overrides=None, out_dir="runs/robustness",
               trust_remote_code: bool = False) -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = {name: evaluate_folder(folder, config, overrides, noise_rates=rates, metrics=(),
                                   trust_remote_code=trust_remote_code)["runs"]
             for name, folder in models.items()}
    write_json(out / "robustness.json", table, indent=1)
    series = {name: [(r["noise_rate"], r["loss"], 0.0) for r in runs] for name, runs in table.items()}
    plot_xy(series, out / "robustness.png", "fraction of input tokens replaced", "validation loss",
            "robustness to test-time noise")
    return table


PAPER_FULL = {  # the official nanoGPT Shakespeare-char settings (DESIGN.md): GPU only
    "ot": ["model.scratch.n_layer=5", "model.scratch.n_head=5", "model.scratch.n_embd=320",
           "model.scratch.n_positions=256", "data.block_size=256", "model.scratch.resid_pdrop=0.2",
           "model.scratch.embd_pdrop=0.2", "model.scratch.attn_pdrop=0.2", "training.max_steps=5000",
           "training.per_device_train_batch_size=64", "training.gradient_accumulation_steps=4",
           "data.max_eval_blocks=null", "training.warmup_steps=100"],
    "baseline": ["model.scratch.n_layer=6", "model.scratch.n_head=6", "model.scratch.n_embd=384",
                 "model.scratch.n_positions=256", "data.block_size=256", "model.scratch.resid_pdrop=0.2",
                 "model.scratch.embd_pdrop=0.2", "model.scratch.attn_pdrop=0.2", "training.max_steps=5000",
                 "training.per_device_train_batch_size=64", "training.gradient_accumulation_steps=4",
                 "data.max_eval_blocks=null", "training.warmup_steps=100"],
}


def paper(out_dir="runs/paper", scale="cpu", seeds=(1, 2, 3), lambdas=(0.0, 0.1, 1.0, 10.0), steps=(1, 2, 5, 10),
          noise_rates=(0.05, 0.1, 0.2), extra=None, sweep_overrides=None) -> dict:
    """The paper's Shakespeare-char comparison: baseline GPT vs OT GPT (paper mode, fewer parameters), `seeds` each;
    the noise test on the seed-1 models; lambda and M sensitivity (seed 1). scale='full' uses the official sizes."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    configs = {"ot": "recipes/configs/causal_lm_shakespeare_char.yaml",
               "baseline": "recipes/configs/causal_lm_shakespeare_char_baseline.yaml"}
    rows = {}
    for name, path in configs.items():
        overrides = [*(PAPER_FULL[name] if scale == "full" else []), *(extra or [])]
        rows[name] = run_grid(load_config(path, overrides), out / name, None, None, seeds)
    summary = {name: {key: summarize(r, key).get("None") for key in ("loss", "perplexity", "bleu",
                                                                     "rouge1", "rougeL")}
               for name, r in rows.items()}
    for name, r in rows.items():
        summary[name]["parameters"] = r[0]["results"]["parameters"]
        summary[name]["train_runtime_s"] = statistics.mean(x["results"]["train_runtime_s"] for x in r)
    plot_curves({name: [x["curve"] for x in r] for name, r in rows.items()}, out / "curves.png",
                "Shakespeare-char: OT vs baseline (mean, min-max)")
    models = {name: f"{r[0]['dir']}/model" for name, r in rows.items()}
    noise = robustness(models, configs["ot"], noise_rates, overrides=extra, out_dir=out / "robustness")
    ot_overrides = [*(PAPER_FULL["ot"] if scale == "full" else []), *(extra or []), *(sweep_overrides or [])]
    sweeps = {
        "lambda": sweep(configs["ot"], "model.ot.lambda", lambdas, seeds[:1], ot_overrides, out / "sweep_lambda"),
        "num_steps": sweep(configs["ot"], "model.ot.num_steps", steps, seeds[:1], ot_overrides, out / "sweep_steps"),
    }
    report = {"scale": scale, "seeds": list(seeds), "summary": summary, "robustness": noise, "sweeps": sweeps}
    write_json(out / "paper.json", report, indent=1)
    (out / "results.md").write_text(report_markdown(report))
    return report


def _fmt(stat) -> str:
    if not stat:
        return "n/a"
    return f"{stat['mean']:.4f} ± {stat['std']:.4f}" if stat.get("n", 1) > 1 else f"{stat['mean']:.4f}"


def report_markdown(report: dict) -> str:
    """The tables of a `paper` run, as markdown (figures: curves.png, robustness/robustness.png, sweep_*/...)."""
    s = report["summary"]
    lines = [f"Seeds {report['seeds']}, scale `{report['scale']}`; mean ± sample std over seeds.", "",
             "| model | parameters | val loss | perplexity | BLEU | ROUGE-1 | ROUGE-L | train time (s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in ("baseline", "ot"):
        r = s[name]
        lines.append(f"| {name} | {r['parameters']:,} | {_fmt(r['loss'])} | {_fmt(r['perplexity'])} | "
                     f"{_fmt(r['bleu'])} | {_fmt(r['rouge1'])} | {_fmt(r['rougeL'])} | {r['train_runtime_s']:.0f} |")
    lines += ["", "Test-time noise (fraction of input tokens replaced at random; seed-1 models):", "",
              "| noise rate | " + " | ".join(f"{n} loss (drop)" for n in report["robustness"]) + " |",
              "| --- | " + " | ".join("---" for _ in report["robustness"]) + " |"]
    names = list(report["robustness"])
    for i, run in enumerate(report["robustness"][names[0]]):
        cells = []
        for n in names:
            r = report["robustness"][n][i]
            cells.append(f"{r['loss']:.4f} ({r.get('drop', {}).get('loss', 0.0):+.4f})")
        lines.append(f"| {run['noise_rate']} | " + " | ".join(cells) + " |")
    for key, label in (("lambda", "lambda"), ("num_steps", "M")):
        sw = report["sweeps"][key]
        lines += ["", f"Sensitivity to {label} (OT, seed {sw['seeds'][0]}):", "",
                  f"| {label} | val loss | perplexity | reg |", "| --- | --- | --- | --- |"]
        for v in sw["values"]:
            lines.append(f"| {v} | {_fmt(sw['loss'].get(str(v)))} | {_fmt(sw['perplexity'].get(str(v)))} | "
                         f"{_fmt(sw['eval_reg'].get(str(v)))} |")
    return "\n".join(lines) + "\n"
