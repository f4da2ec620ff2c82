"""Three studies of what OT buys a user, at CPU scale, 3 seeds each:

1. elasticity: Shakespeare-char OT models (paper mode, no LayerNorms, M=5 Euler) trained with lambda in {0, 0.1, 1},
   evaluated at other M' and solvers (set on model.config, read at every forward): val loss vs field evaluations.
2. finetune: the real MiniLM on SST-2, base fine-tune vs its OT conversion (residual, M in {2, 4}, lambda in
   {0, 0.1, 1}), same optimizer steps: accuracy before and after fine-tuning, under token noise, time per step.
3. matched: (a) baseline, (b) OT (L shared blocks x M, LayerNorms on), (c) compute-matched M*L unshared layers,
   (d) parameter-matched L layers one pass, and (b) without LayerNorms (= the lambda=1 runs of study 1).

    python -m experiments.studies all --out runs/studies          # every run (2 worker processes), then `report`
    python -m experiments.studies run --out runs/studies --workers 2 [--study elasticity ...] [--lm-set k=v]
        [--sst-set k=v]
    python -m experiments.studies report --out runs/studies [--docs docs] [--from docs/studies.json]

Each finished run writes `OUT/raw/<job>.json` at once, and a rerun skips the jobs that have one, so an interrupted
study resumes. Workers claim jobs through `OUT/claims/<job>` folders, so any number of them share one job list.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hf_ot.metrics import accuracy, noisy_ids, predict

CONFIGS = {"ot": "recipes/configs/study_shakespeare_ot.yaml",
           "baseline": "recipes/configs/study_shakespeare_baseline.yaml",
           "sst2": "recipes/configs/study_sst2_minilm.yaml"}
SEEDS = (1, 2, 3)
LAMBDAS = (0.0, 0.1, 1.0)
ELASTIC_STEPS = (1, 2, 3, 5, 10, 20)
ELASTIC_SOLVERS = ("euler", "heun", "rk4")
NOISE_RATES = (0.05, 0.1, 0.2)
SST_STEPS = (2, 4)
STUDIES = ("elasticity", "finetune", "matched")
# SST-2 evaluation cost (MiniLM forwards dominate on CPU): the accuracy after fine-tuning uses all 872 validation
# sentences; the noisy accuracies every 4th one (218, the same for every model); the step-0 accuracies (at M and at
# M=1, the pretrained function) the first 256.
NOISE_SUBSET_EVERY = 4
BEFORE_SENTENCES = 256
# study 3's models (all trained with the same steps and data); the OT shape is the OT config's (3 blocks, 96 dim, M=5)
MATCHED = {
    "baseline": ("baseline", []),  # (a) the docs/results.md baseline: 4 layers, 128 dim
    "ot_ln": ("ot", ["model.ot.block_layer_norms=true"]),  # (b) 3 shared blocks x M=5, LayerNorms kept
    "compute_matched": ("baseline", ["model.scratch.n_layer=15", "model.scratch.n_embd=96"]),  # (c) 3 x 5 layers
    "param_matched": ("baseline", ["model.scratch.n_layer=3", "model.scratch.n_embd=96"]),  # (d) 3 layers, one pass
}


@dataclass
class Job:
    id: str
    kind: str  # "lm" or "sst2"
    config: str
    overrides: list[str]
    seed: int
    studies: list[str]
    elastic: bool = False  # evaluate the M' x solver grid
    before: bool = False  # evaluate before fine-tuning too
    info: dict = field(default_factory=dict)


def lam_tag(lam: float) -> str:
    return f"lam{lam:g}"


def build_jobs(studies=STUDIES, seeds=SEEDS, lm_set=(), sst_set=()) -> list[Job]:
    """Every run of the chosen studies, in the order they run: the Shakespeare-char runs (studies 1 and 3) seed by
    seed, then SST-2 configuration by configuration (see below), so that a study cut short by the clock still has
    whole seeds. The OT no-LayerNorm lambda=1 runs serve study 1 and study 3's "(b) without LayerNorms"."""
    lm, sst = [], []
    for seed in seeds:
        if "elasticity" in studies or "matched" in studies:
            for lam in (LAMBDAS if "elasticity" in studies else (1.0,)):
                used = ["elasticity"] if "elasticity" in studies else []
                if lam == 1.0 and "matched" in studies:
                    used.append("matched")
                lm.append(Job(f"ot_noln_{lam_tag(lam)}_s{seed}", "lm", CONFIGS["ot"],
                              [f"model.ot.lambda={lam}", *lm_set], seed, used, elastic="elasticity" in studies,
                              info={"model": "ot_noln", "lambda": lam}))
        if "matched" in studies:
            for name, (config, overrides) in MATCHED.items():
                lm.append(Job(f"{name}_s{seed}", "lm", CONFIGS[config], [*overrides, *lm_set], seed, ["matched"],
                              info={"model": name}))
    if "finetune" in studies:
        # config by config, all seeds of each, in order of what they tell (base; M=2 without and with the transport
        # cost; M=4; lambda=0.1 last): what the clock allows ends with whole configs of 3 seeds
        grid = [(None, None), (2, 0.0), (2, 1.0), (4, 1.0), (4, 0.0), (2, 0.1), (4, 0.1)]
        grid = [(m, lam) for m, lam in grid if m is None or (m in SST_STEPS and lam in LAMBDAS)]
        measured_before = set()
        for steps, lam in grid:
            # lambda does not change the function at step 0: "before" is measured once per (M, seed)
            before = steps not in measured_before
            measured_before.add(steps)
            for seed in seeds:
                if steps is None:
                    sst.append(Job(f"finetune_base_s{seed}", "sst2", CONFIGS["sst2"], ["model.ot=null", *sst_set],
                                   seed, ["finetune"], before=True, info={"model": "base", "num_steps": 1}))
                    continue
                sst.append(Job(f"finetune_M{steps}_{lam_tag(lam)}_s{seed}", "sst2", CONFIGS["sst2"],
                               [f"model.ot.num_steps={steps}", f"model.ot.lambda={lam}", *sst_set], seed,
                               ["finetune"], before=before, info={"model": "ot", "num_steps": steps, "lambda": lam}))
    return lm + sst


# ------------------------------------------------------------------------------------------------ causal LM runs


def field_evaluations(num_steps: int, solver: str) -> int:
    from hf_ot.models import num_stages

    return num_steps * num_stages(solver)


def load_lm(folder):
    """A saved model and its tokenizer: hf_ot's own types with the installed code (no folder code is run), the
    tokenizer checked."""
    from hf_ot.recipes.evaluate import load_for_eval

    return load_for_eval(folder)


def lm_losses(model, cfg, tokenizer, noise_rates=(), grid=None) -> dict:
    """Teacher-forced validation loss (clean and under input noise); with `grid` = (steps, solvers), the clean loss
    at every M' x solver, set on model.config (the model reads it at every forward)."""
    from hf_ot import metrics as ev
    from hf_ot.recipes.evaluate import lm_eval_dataset

    data = lm_eval_dataset(cfg, tokenizer)
    batch = int(cfg.evaluation.batch_size or 32)

    def loss(rate=0.0):
        return ev.teacher_forced_lm(model, data, tokenizer, batch_size=batch, noise_rate=rate).loss

    out = {"loss": loss(), "noise": {str(r): loss(r) for r in noise_rates}}
    if grid:
        trained = (model.config.ot_num_steps, model.config.ot_solver)
        out["elastic"] = []
        for solver in grid[1]:
            for steps in grid[0]:
                model.config.ot_num_steps, model.config.ot_solver = steps, solver
                out["elastic"].append({"num_steps": steps, "solver": solver,
                                       "field_evaluations": field_evaluations(steps, solver), "loss": loss()})
        model.config.ot_num_steps, model.config.ot_solver = trained
    return out


def run_lm(job: Job, out: Path, grid) -> dict:
    from hf_ot.recipes import load_config, run_recipe

    cfg = load_config(job.config, [*job.overrides, f"training.seed={job.seed}"])
    cfg.output_dir = str(out / "runs" / job.id)
    results = run_recipe(cfg, overwrite=True)
    history = json.loads((out / "runs" / job.id / "log_history.json").read_text())
    model, tokenizer = load_lm(out / "runs" / job.id / "model")  # the saved model, as a user loads it
    losses = lm_losses(model, cfg, tokenizer, NOISE_RATES, grid if job.elastic else None)
    steps = int(cfg.training["max_steps"])
    scratch = cfg.model.scratch
    ot = cfg.model.ot
    return {"parameters": results["parameters"], "train_runtime_s": results["train_runtime_s"],
            "s_per_step": results["train_runtime_s"] / steps, "eval_reg": results.get("eval_reg"),
            "recipe_loss": results.get("loss"), **losses,
            "block_applications": scratch["n_layer"] * (field_evaluations(ot["num_steps"], ot["solver"]) if ot else 1),
            "curve": [(h["step"], h.get("task_loss", h["loss"])) for h in history if "loss" in h and "step" in h],
            "config": cfg.to_dict()}


# ------------------------------------------------------------------------------------------------ SST-2 runs


def encode_validation(cfg, tokenizer):
    """All validation sentences (data.max_eval_samples does not apply here), tokenized, with their labels."""
    from hf_ot.recipes.data import load_classification

    val = load_classification(cfg.data)["validation"]
    enc = tokenizer(list(val["text"]), truncation=True, max_length=int(cfg.data.max_length or 64),
                    return_special_tokens_mask=True)
    return enc["input_ids"], enc["special_tokens_mask"], list(val["label"])


def run_sst2(job: Job, out: Path) -> dict:
    from transformers import DataCollatorWithPadding, Trainer, set_seed

    from hf_ot.recipes import build_model, classification_datasets, load_config, recipe_tokenizer, training_arguments
    from hf_ot.training import OTTrainer

    cfg = load_config(job.config, [*job.overrides, f"training.seed={job.seed}"])
    is_ot = cfg.is_ot
    set_seed(job.seed)  # the same head initialisation for every lambda of one (M, seed)
    tokenizer = recipe_tokenizer(cfg.tokenizer, cfg.model)
    train_ds, _ = classification_datasets(cfg, tokenizer)
    model = build_model(cfg.model, cfg.task, tokenizer, num_labels=int(cfg.data.num_labels or 2))
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    ids, special, labels = encode_validation(cfg, tokenizer)
    batch = int(cfg.evaluation.batch_size or 64)
    result = {"parameters": model.num_parameters(), "validation_sentences": len(labels)}
    if job.before:  # random classifier head: near chance; what matters is how far M moves the function from M=1
        first = slice(0, BEFORE_SENTENCES)
        logits = predict(model, tokenizer, ids[first], batch)
        result["before_sentences"] = len(labels[first])
        result["accuracy_before"] = accuracy(logits, labels[first])
        if is_ot:
            steps = model.config.ot_num_steps
            model.config.ot_num_steps = 1
            pretrained = predict(model, tokenizer, ids[first], batch)
            model.config.ot_num_steps = steps
            result["accuracy_before_at_M1"] = accuracy(pretrained, labels[first])
            result["before_agreement_with_M1"] = (logits.argmax(-1) == pretrained.argmax(-1)).float().mean().item()
            result["before_logit_change_vs_M1"] = ((logits - pretrained).norm() / pretrained.norm()).item()
    run_dir = out / "runs" / job.id
    args = training_arguments(cfg, str(run_dir), is_ot)
    trainer = (OTTrainer if is_ot else Trainer)(model=model, args=args, train_dataset=train_ds,
                                                data_collator=DataCollatorWithPadding(tokenizer),
                                                processing_class=tokenizer)
    train_out = trainer.train()
    steps = int(cfg.training["max_steps"])
    result.update(train_runtime_s=train_out.metrics["train_runtime"],
                  s_per_step=train_out.metrics["train_runtime"] / steps,
                  curve=[(h["step"], h.get("task_loss", h["loss"])) for h in trainer.state.log_history
                         if "loss" in h and "step" in h])
    model = trainer.accelerator.unwrap_model(trainer.model)
    logits_after = predict(model, tokenizer, ids, batch)
    result["accuracy"] = accuracy(logits_after, labels)
    subset = slice(0, None, NOISE_SUBSET_EVERY)
    sub_ids, sub_special, sub_labels = ids[subset], special[subset], labels[subset]
    result["noise_sentences"] = len(sub_labels)
    result["accuracy_noise_subset"] = accuracy(logits_after[subset], sub_labels)  # the 0% point of the noise curve
    result["noise"] = {str(rate): accuracy(predict(model, tokenizer, noisy_ids(sub_ids, sub_special, rate,
                                                                                model.config.vocab_size), batch),
                                           sub_labels) for rate in NOISE_RATES}
    shutil.rmtree(run_dir, ignore_errors=True)  # trainer scratch only; the fine-tuned MiniLMs are not kept
    result["config"] = cfg.to_dict()
    return result


# ------------------------------------------------------------------------------------------------ timing


def time_steps(cfg, steps: int = 8, warmup: int = 2) -> float:
    """Seconds per optimizer step (forward, backward, AdamW; task loss + lambda * reg for OT models), measured back
    to back in this process for every model, so the ratios are comparable on a shared machine; the medians of
    `steps` steps after `warmup`."""
    import torch
    from transformers import DataCollatorWithPadding, default_data_collator, set_seed

    from hf_ot.recipes import build_model, causal_lm_datasets, classification_datasets, recipe_tokenizer

    set_seed(1)
    if cfg.task == "causal-lm":
        tokenizer, train_ds, _ = causal_lm_datasets(cfg)
        model, collate = build_model(cfg.model, cfg.task, tokenizer), default_data_collator
    else:
        tokenizer = recipe_tokenizer(cfg.tokenizer, cfg.model)
        train_ds, _ = classification_datasets(cfg, tokenizer)
        model = build_model(cfg.model, cfg.task, tokenizer, num_labels=2)
        collate = DataCollatorWithPadding(tokenizer)
    columns = [c for c in train_ds.column_names if c in ("input_ids", "attention_mask", "labels", "label")]
    train_ds = train_ds.select_columns(columns)
    batch_size = int(cfg.training["per_device_train_batch_size"])
    lam = float((cfg.model.ot or {}).get("lambda", 0.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    times = []
    for i in range(warmup + steps):
        batch = collate([train_ds[j] for j in range(i * batch_size, (i + 1) * batch_size)])
        if "label" in batch:
            batch["labels"] = batch.pop("label")
        start = time.perf_counter()
        out = model(**batch)
        loss = out.loss + lam * out.reg if getattr(out, "reg", None) is not None else out.loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return statistics.median(times[warmup:])


def timing(out: Path) -> dict:
    """s/step of every study model, back to back in one process (one thread)."""
    from hf_ot.recipes import load_config

    models = {"ot_noln (lambda=1)": (CONFIGS["ot"], []), **{name: (CONFIGS[c], o) for name, (c, o) in MATCHED.items()},
              "sst2 base": (CONFIGS["sst2"], ["model.ot=null"]),
              **{f"sst2 M={m}": (CONFIGS["sst2"], [f"model.ot.num_steps={m}"]) for m in SST_STEPS}}
    result = {name: time_steps(load_config(config, overrides)) for name, (config, overrides) in models.items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "timing.json").write_text(json.dumps(result, indent=1))
    return result


# ------------------------------------------------------------------------------------------------ running


def run_job(job: Job, out: Path, grid=(ELASTIC_STEPS, ELASTIC_SOLVERS)) -> dict:
    started = time.time()
    result = run_lm(job, out, grid) if job.kind == "lm" else run_sst2(job, out)
    record = {"job": asdict(job), "result": result, "wall_s": time.time() - started,
              "finished_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    (out / "raw").mkdir(parents=True, exist_ok=True)
    tmp = out / "raw" / f"{job.id}.json.tmp"
    tmp.write_text(json.dumps(record, indent=1, default=str))
    tmp.replace(out / "raw" / f"{job.id}.json")  # complete or absent, never half written
    return record


def _claim(out: Path, job: Job) -> bool:
    """Atomic: a folder only one process can create. A claim whose owner died (and left no result) is taken over."""
    claims = out / "claims"
    claims.mkdir(parents=True, exist_ok=True)
    folder = claims / job.id
    try:
        folder.mkdir()
    except FileExistsError:
        try:
            pid = int((folder / "pid").read_text())
            os.kill(pid, 0)
            return False  # its owner is alive
        except (OSError, ValueError):
            shutil.rmtree(folder, ignore_errors=True)
            return _claim(out, job)
    (folder / "pid").write_text(str(os.getpid()))
    return True


def work(jobs: list[Job], out: Path, grid=(ELASTIC_STEPS, ELASTIC_SOLVERS)) -> None:
    """Run every job that has no result yet and that no other live worker has claimed."""
    import torch

    torch.set_num_threads(1)
    for job in jobs:
        if (out / "raw" / f"{job.id}.json").exists() or not _claim(out, job):
            continue
        print(f"[{time.strftime('%H:%M:%S')}] {job.id} started", flush=True)
        record = run_job(job, out, grid)
        print(f"[{time.strftime('%H:%M:%S')}] {job.id} done in {record['wall_s']:.0f}s", flush=True)


def run(out: Path, workers: int, studies, seeds, lm_set, sst_set) -> None:
    """`workers` processes (one thread each) over the job list; each writes its log to OUT/logs/."""
    out.mkdir(parents=True, exist_ok=True)
    if workers <= 1:
        work(build_jobs(studies, seeds, lm_set, sst_set), out)
        return
    (out / "logs").mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "experiments.studies", "run", "--out", str(out), "--workers", "1",
           "--study", *studies, "--seeds", *map(str, seeds)]
    cmd += [f"--lm-set={s}" for s in lm_set] + [f"--sst-set={s}" for s in sst_set]
    procs = []
    for i in range(workers):
        log = open(out / "logs" / f"worker{i}.log", "a")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
        time.sleep(2)  # distinct first claims
    codes = [p.wait() for p in procs]
    if any(codes):
        raise RuntimeError(f"study workers exited with {codes}; see {out / 'logs'}")


# ------------------------------------------------------------------------------------------------ report


def load_records(source: Path) -> list[dict]:
    if source.is_file():
        return json.loads(source.read_text())["runs"]
    return [json.loads(p.read_text()) for p in sorted((source / "raw").glob("*.json"))]


def stat(values) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": float("nan"), "std": float("nan"), "n": 0, "values": []}
    return {"mean": statistics.mean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values), "values": values}


def fmt(s: dict, digits: int = 3, scale: float = 1.0) -> str:
    if not s["n"]:
        return "n/a"
    text = f"{s['mean'] * scale:.{digits}f}"
    return text + (f" ± {s['std'] * scale:.{digits}f}" if s["n"] > 1 else "") + ("" if s["n"] == 3 else
                                                                                    f" (n={s['n']})")


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
            f"{solver}/{steps}": {"field_evaluations": field_evaluations(steps, solver),
                                  "loss": stat([v for _, v in sorted(vals)]),
                                  "seeds": [s for s, _ in sorted(vals)]}
            for (solver, steps), vals in sorted(cells.items())}
        summary["elasticity"][str(lam)]["_reg"] = stat([r["result"]["eval_reg"] for r in runs])
    for key, runs in by_id.items():
        if not key.startswith("finetune_"):
            continue
        res = [r["result"] for r in runs]
        summary["finetune"][key[len("finetune_"):]] = {
            "accuracy": stat([x["accuracy"] for x in res]),
            "accuracy_noise_subset": stat([x.get("accuracy_noise_subset") for x in res]),
            "noise": {str(rate): stat([x["noise"][str(rate)] for x in res]) for rate in NOISE_RATES},
            "s_per_step": stat([x["s_per_step"] for x in res]),
            "parameters": res[0]["parameters"],
            **{k: stat([x.get(k) for x in res]) for k in ("accuracy_before", "accuracy_before_at_M1",
                                                          "before_agreement_with_M1",
                                                          "before_logit_change_vs_M1")}}
    names = {"baseline": "baseline", "ot_ln": "ot_ln", "compute_matched": "compute_matched",
             "param_matched": "param_matched", "ot_noln_lam1": "ot_noln"}
    for key, name in names.items():
        res = [r["result"] for r in by_id.get(key, [])]
        if not res:
            continue
        summary["matched"][name] = {
            "parameters": res[0]["parameters"], "block_applications": res[0]["block_applications"],
            "loss": stat([x["loss"] for x in res]), "s_per_step": stat([x["s_per_step"] for x in res]),
            "noise": {str(rate): stat([x["noise"][str(rate)] for x in res]) for rate in NOISE_RATES},
            "drop": {str(rate): stat([x["noise"][str(rate)] - x["loss"] for x in res]) for rate in NOISE_RATES}}
    return summary


MATCHED_LABELS = {"baseline": "(a) baseline, 4 layers x 128 dim", "ot_ln": "(b) OT, 3 shared blocks x M=5, LN",
                  "compute_matched": "(c) compute-matched, 15 layers x 96 dim",
                  "param_matched": "(d) parameter-matched, 3 layers x 96 dim, one pass",
                  "ot_noln": "(b') OT without LayerNorms (study 1, lambda=1)"}


def tables(summary: dict) -> str:
    lines = ["### Depth elasticity: validation loss at M' x solver (trained at M=5 Euler)", ""]
    steps_cols = ELASTIC_STEPS
    lines += ["| lambda | solver | " + " | ".join(f"M'={m}" for m in steps_cols) + " |",
              "| --- | --- | " + " | ".join("---" for _ in steps_cols) + " |"]
    for lam, cells in summary["elasticity"].items():
        for solver in ELASTIC_SOLVERS:
            row = [fmt(cells[f"{solver}/{m}"]["loss"]) if f"{solver}/{m}" in cells else "n/a" for m in steps_cols]
            lines.append(f"| {lam} | {solver} | " + " | ".join(row) + " |")
    lines += ["", "Field evaluations = M' x stages (Euler 1, Heun 2, RK4 4). Transport cost reg at the training "
              "setting: " + ", ".join(f"lambda={lam}: {fmt(c['_reg'], 4)}" for lam, c in
                                      summary["elasticity"].items()), ""]
    lines += ["### MiniLM on SST-2: accuracy (%) on all 872 validation sentences", "",
              "| model | before fine-tuning | after | after, noise subset: 0% | 5% | 10% | 20% | s/step |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    order = ["base"] + [f"M{m}_{lam_tag(lam)}" for m in SST_STEPS for lam in LAMBDAS]
    for key in order:
        s = summary["finetune"].get(key)
        if not s:
            continue
        before = fmt(s["accuracy_before"], 1, 100) if s["accuracy_before"]["n"] else "(same M, other lambda)"
        label = "base fine-tune" if key == "base" else f"OT M={key[1]}, lambda={key.split('lam')[1]}"
        lines.append(f"| {label} | {before} | {fmt(s['accuracy'], 1, 100)} | "
                     f"{fmt(s['accuracy_noise_subset'], 1, 100)} | " +
                     " | ".join(fmt(s["noise"][str(r)], 1, 100) for r in NOISE_RATES) +
                     f" | {fmt(s['s_per_step'], 2)} |")
    lines += ["", f"Before fine-tuning: the first {BEFORE_SENTENCES} validation sentences; after: all 872; noise "
              f"columns: every {NOISE_SUBSET_EVERY}th sentence (218). At step 0 (random classifier head, the same "
              "at M and at M=1):", ""]
    for m in SST_STEPS:
        s = next((x for k, x in summary["finetune"].items() if k.startswith(f"M{m}_") and x["accuracy_before"]["n"]),
                 None)
        if s:
            lines.append(f"- M={m}: accuracy {fmt(s['accuracy_before'], 1, 100)} vs "
                         f"{fmt(s['accuracy_before_at_M1'], 1, 100)}"
                         f" at M=1 (the pretrained encoder); predictions agree with M=1 on "
                         f"{fmt(s['before_agreement_with_M1'], 1, 100)}%; relative logit change "
                         f"{fmt(s['before_logit_change_vs_M1'], 3)}")
    lines += ["", "### Matched comparison on Shakespeare-char", "",
              "| model | parameters | block applications / token | val loss | loss at 5% / 10% / 20% noise "
              "(drop at 20%) | s/step |", "| --- | --- | --- | --- | --- | --- |"]
    for name, label in MATCHED_LABELS.items():
        s = summary["matched"].get(name)
        if not s:
            continue
        noise = " / ".join(fmt(s["noise"][str(r)]) for r in NOISE_RATES)
        lines.append(f"| {label} | {s['parameters']:,} | {s['block_applications']} | {fmt(s['loss'])} | {noise} "
                     f"(+{fmt(s['drop']['0.2'])}) | {fmt(s['s_per_step'], 2)} |")
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
                        pts = [(e["field_evaluations"], e["loss"]) for e in r["result"]["elastic"]
                               if e["solver"] == solver]
                        ax.plot(*zip(*pts), color=colors[solver], alpha=0.25, lw=0.8)
            for solver in ELASTIC_SOLVERS:
                cells = [(c["field_evaluations"], c["loss"]["mean"]) for k, c in summary["elasticity"][lam].items()
                         if k.startswith(solver + "/")]
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
            runs = [r for r in records if r["job"]["id"].startswith(f"ot_noln_{lam_tag(float(lam))}_s")
                    and "elastic" in r["result"]]
            deltas = {}
            for r in runs:
                ref = next(e["loss"] for e in r["result"]["elastic"] if e["solver"] == "euler" and e["num_steps"] == 5)
                for e in r["result"]["elastic"]:
                    if e["solver"] == "euler":
                        deltas.setdefault(e["num_steps"], []).append(e["loss"] - ref)
            xs = sorted(deltas)
            ax.errorbar(xs, [statistics.mean(deltas[x]) for x in xs],
                        yerr=[statistics.stdev(deltas[x]) if len(deltas[x]) > 1 else 0 for x in xs],
                        marker="o", capsize=3, label=f"lambda={lam}", color=f"C{i}")
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
        series = {key: noise_series([s["accuracy_noise_subset"], *[s["noise"][str(r)] for r in NOISE_RATES]], 100)
                  for key, s in summary["finetune"].items()}
        paths.append(plot_xy(series, folder / "study_sst2_noise.png", "fraction of input tokens replaced",
                             "SST-2 validation accuracy (%)", "MiniLM fine-tuned on SST-2 (mean ± std over seeds)"))
    if summary["matched"]:
        series = {MATCHED_LABELS[name]: noise_series([s["loss"], *[s["noise"][str(r)] for r in NOISE_RATES]])
                  for name, s in summary["matched"].items()}
        paths.append(plot_xy(series, folder / "study_matched_noise.png", "fraction of input characters replaced",
                             "validation loss", "Shakespeare-char, same optimizer steps (mean ± std over seeds)"))
    return paths


def report(out: Path, source: Path | None = None, docs: Path | None = None) -> dict:
    """Tables (OUT/tables.md), figures (OUT/figures/) and the combined JSON (OUT/studies.json) from the raw runs
    (or from a combined JSON given as `source`); `docs` also gets the JSON and the figures."""
    records = load_records(source or out)
    if not records:
        raise FileNotFoundError(f"No study results under {source or out}: run `python -m experiments.studies run` "
                                "first.")
    summary = summarize(records)
    out.mkdir(parents=True, exist_ok=True)
    combined = {"machine": machine(), "summary": summary, "runs": records}
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

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.studies", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "all"):
        p = sub.add_parser(name, help="train and evaluate every run" + (" then report" if name == "all" else ""))
        p.add_argument("--out", default="runs/studies")
        p.add_argument("--workers", type=int, default=2, help="processes, one thread each")
        p.add_argument("--study", nargs="+", default=list(STUDIES), choices=STUDIES)
        p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
        p.add_argument("--lm-set", action="append", default=[], metavar="KEY=VALUE",
                       help="override for every Shakespeare-char run, e.g. training.max_steps=200")
        p.add_argument("--sst-set", action="append", default=[], metavar="KEY=VALUE",
                       help="override for every SST-2 run")
        if name == "all":
            p.add_argument("--docs", default=None, help="also write the JSON and figures here (e.g. docs)")
    p = sub.add_parser("timing", help="s/step of every study model, back to back in one process")
    p.add_argument("--out", default="runs/studies")
    p = sub.add_parser("report", help="tables and figures from the raw results")
    p.add_argument("--out", default="runs/studies")
    p.add_argument("--from", dest="source", default=None, help="a combined studies.json instead of OUT/raw")
    p.add_argument("--docs", default=None, help="also write the JSON and figures here (e.g. docs)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.command == "timing":
        print(json.dumps(timing(out), indent=1))
        return 0
    if args.command in ("run", "all"):
        run(out, args.workers, args.study, args.seeds, args.lm_set, args.sst_set)
    if args.command in ("report", "all"):
        report(out, Path(args.source) if getattr(args, "source", None) else None,
               Path(args.docs) if args.docs else None)
        print((out / "tables.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
