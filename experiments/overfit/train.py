"""One run of the overfitting study: build the model with hf_ot's recipe code, train it with a plain loop (AdamW,
linear warm-up then cosine, gradient clipping; loss = task loss + lambda * reg for OT models) on a fixed training
subset, evaluate the validation loss every `eval_every` steps and keep the best weights, then evaluate the best and
the final model (hf_ot.metrics: teacher-forced loss, perplexity, BLEU/ROUGE, input noise)."""

from __future__ import annotations

import copy
import json
import math
import time
import warnings
from dataclasses import asdict
from pathlib import Path

from .jobs import CONFIGS, MODELS, NOISE_RATES, NORMLESS, SETTINGS, TEXT_METRICS, Job


def recipe(job: Job, settings: dict, train_file: str | None = None):
    """The job's recipe config: the study config with the model's overrides, the training subset and the
    evaluation blocks."""
    from hf_ot.recipes import load_config

    overrides = [
        *job.overrides(),
        f"data.max_train_blocks={settings['train_start'] + settings['train_blocks']}",
        f"data.max_eval_blocks={settings['report_offset'] + settings['final_blocks']}",
        f"training.seed={job.seed}",
    ]
    if train_file:
        overrides.append(f"data.train_file={train_file}")
    return load_config(CONFIGS[MODELS[job.model][0]], overrides)


def data_order(n_blocks: int, steps: int, batch: int, seed: int):
    """Block indices of every step: shuffled epochs drawn from `seed` alone, so every model of one seed sees the same
    batches in the same order."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    order = torch.cat([torch.randperm(n_blocks, generator=gen) for _ in range(math.ceil(steps * batch / n_blocks))])
    return order[: steps * batch].view(steps, batch)


def mean_loss(model, ids, batch: int) -> float:
    """Mean token cross-entropy of teacher-forced next-token prediction over the rows of `ids` (equal lengths)."""
    import torch

    model.eval()
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(ids), batch):
            rows = ids[start : start + batch]
            logits = model(input_ids=rows[:, :-1]).logits.float()
            total += torch.nn.functional.cross_entropy(logits.transpose(1, 2), rows[:, 1:], reduction="sum").item()
    model.train()
    return total / (len(ids) * (ids.shape[1] - 1))


def evaluate(model, val, tokenizer, settings: dict) -> dict:
    """The official evaluate.py protocol (hf_ot.metrics.teacher_forced_lm) on `final_blocks` validation blocks from
    `report_offset`: loss, perplexity (exp of the mean token NLL), per-sequence perplexity, BLEU/ROUGE of the argmax
    predictions, and (unless `noise` is 0) the loss with 5/10/20% of the input characters replaced at random."""
    from hf_ot import metrics

    offset = settings["report_offset"]
    val = val.select(range(offset, offset + settings["final_blocks"])) if offset else val

    def run(rate):
        return metrics.teacher_forced_lm(
            model, val, tokenizer, batch_size=settings["eval_batch"], noise_rate=rate, progress=False
        )

    clean = run(0.0)
    return {
        "loss": clean.loss,
        "perplexity": clean.perplexity,
        "perplexity_per_sequence_mean": clean.perplexity_per_sequence_mean,
        "blocks": clean.samples,
        **metrics.text_metrics(clean.predictions, clean.references, TEXT_METRICS),
        "noise": {str(rate): run(rate).loss for rate in NOISE_RATES} if settings["noise"] else {},
    }


def train_and_evaluate(job: Job, settings: dict, train_file: str | None = None) -> dict:
    import torch
    from transformers import get_cosine_schedule_with_warmup

    from hf_ot import RegNotTrainedWarning
    from hf_ot.recipes import build_model, causal_lm_datasets

    offset = settings["report_offset"]
    if offset and settings["curve_blocks"] > offset:
        raise ValueError(
            f"curve_blocks={settings['curve_blocks']} overlaps the report split from report_offset={offset}: "
            "the selection blocks must end before the report blocks start; raise report_offset."
        )
    cfg = recipe(job, settings, train_file)
    tokenizer, train, val = causal_lm_datasets(cfg)
    warnings.filterwarnings("ignore", category=RegNotTrainedWarning)  # this loop adds lambda * reg itself
    torch.manual_seed(job.seed)  # the same initialisation for every model of one seed and shape
    model = build_model(cfg.model, cfg.task, tokenizer)
    if job.model in NORMLESS:
        from hf_ot.models.ot_flow import _remove_norms

        _remove_norms(model)  # the same modules OT's paper mode removes: every block's and the final norm
    lam = job.lam if cfg.is_ot else 0.0
    train_ids = torch.tensor(train["input_ids"], dtype=torch.long)[settings["train_start"] :]
    val_ids = torch.tensor(val["input_ids"], dtype=torch.long)
    curve_val = val_ids[: settings["curve_blocks"]]
    curve_train = train_ids[: settings["curve_train_blocks"]]
    curve_report = val_ids[offset : offset + settings["report_curve_blocks"]]
    steps, batch = settings["steps"], settings["batch"]
    order = data_order(len(train_ids), steps, batch, job.seed)
    # nanoGPT's rule: weight decay on matrices and embeddings, not on biases and norm gains
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": settings["weight_decay"]}, {"params": other, "weight_decay": 0.0}],
        lr=settings["lr"],
    )
    schedule = get_cosine_schedule_with_warmup(optimizer, settings["warmup"], steps)
    curve: list[dict] = []
    best = {"val_loss": math.inf, "step": 0}
    best_state = None
    task_sum = reg_sum = 0.0
    seen = 0
    train_time = 0.0
    model.train()

    def checkpoint(step):
        nonlocal best_state, task_sum, reg_sum, seen
        val_loss = mean_loss(model, curve_val, settings["eval_batch"])
        point = {
            "step": step,
            "val_loss": val_loss,
            "train_eval_loss": mean_loss(model, curve_train, settings["eval_batch"]),
            "train_loss": task_sum / seen if seen else None,
            "reg": reg_sum / seen if seen and cfg.is_ot else None,
        }
        if len(curve_report):
            point["report_loss"] = mean_loss(model, curve_report, settings["eval_batch"])
        curve.append(point)
        print(f"  {job.id} step {step}: val {val_loss:.4f} train {point['train_eval_loss']:.4f}", flush=True)
        task_sum = reg_sum = 0.0
        seen = 0
        if val_loss < best["val_loss"]:
            best.update(val_loss=val_loss, step=step)
            best_state = copy.deepcopy(model.state_dict())

    checkpoint(0)
    for step in range(1, steps + 1):
        started = time.perf_counter()
        rows = train_ids[order[step - 1]]
        out = model(input_ids=rows, labels=rows)
        reg = getattr(out, "reg", None)
        loss = out.loss + lam * reg if reg is not None else out.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        train_time += time.perf_counter() - started
        task_sum += out.loss.item()
        reg_sum += reg.item() if reg is not None else 0.0
        seen += 1
        if step % settings["eval_every"] == 0 or step == steps:
            checkpoint(step)
            if settings["patience"] and step - best["step"] >= settings["patience"] * settings["eval_every"]:
                break  # early stopping: the "final" model is the one at this step
    final = evaluate(model, val, tokenizer, settings)
    model.load_state_dict(best_state)
    at_best = evaluate(model, val, tokenizer, settings)
    calibration = None
    if settings["calibrate"] and cfg.is_ot:
        report_ids = val_ids[offset : offset + settings["final_blocks"]]
        calibration = calibrated(model, curve_val, report_ids, settings["eval_batch"])
    return {
        "parameters": model.num_parameters(),
        "train_s": train_time,
        "s_per_step": train_time / step,
        "steps_run": step,
        "train_blocks": len(train_ids),
        "train_characters": len(train_ids) * train_ids.shape[1],
        "curve": curve,
        "best_step": best["step"],
        "best_curve_val_loss": best["val_loss"],
        "final_curve_val_loss": curve[-1]["val_loss"],
        "final": final,
        "best": at_best,
        "config": cfg.to_dict(),
        **({"calibration": calibration} if calibration else {}),
    }


def calibrated(model, select_ids, report_ids, batch: int) -> dict:
    """`hf-ot calibrate`'s choice for the trained model, made on the selection blocks (the fewest field evaluations
    within the default tolerance of the trained setting's loss), and every grid point's loss on the report blocks."""
    from hf_ot.calibration import calibrate

    def batches(ids):
        return [{"input_ids": ids[i : i + batch], "labels": ids[i : i + batch]} for i in range(0, len(ids), batch)]

    on_select = calibrate(model, batches(select_ids), progress=False)
    on_report = calibrate(model, batches(report_ids), progress=False)
    report_loss = {(r.solver, r.num_steps): r.metric for r in on_report.rows}
    rows = [
        {
            "solver": r.solver,
            "num_steps": r.num_steps,
            "field_evaluations": r.field_evaluations,
            "select_loss": r.metric,
            "report_loss": report_loss[(r.solver, r.num_steps)],
        }
        for r in on_select.rows
    ]
    choice = on_select.choice

    def key(r):
        return {"solver": r.solver, "num_steps": r.num_steps, "field_evaluations": r.field_evaluations}

    return {
        "tolerance": on_select.tolerance,
        "trained": key(on_select.trained),
        "choice": {**key(choice), "report_loss": report_loss[(choice.solver, choice.num_steps)]},
        "message": on_select.message,
        "rows": rows,
    }


def run_job(job: Job, out: Path, settings: dict | None = None, train_file: str | None = None) -> dict:
    """Train and evaluate one job and write OUT/raw/<job>.json at once (complete or absent)."""
    settings = {**SETTINGS, **job.settings, **(settings or {})}  # explicit settings win (a smoke run's steps)
    started = time.time()
    result = train_and_evaluate(job, settings, train_file)
    record = {
        "job": asdict(job),
        "settings": settings,
        "result": result,
        "wall_s": time.time() - started,
        "finished_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }
    (out / "raw").mkdir(parents=True, exist_ok=True)
    tmp = out / "raw" / f"{job.id}.json.tmp"
    tmp.write_text(json.dumps(record, indent=1, default=str))
    tmp.replace(out / "raw" / f"{job.id}.json")
    return record


def timing(out: Path) -> dict:
    """Seconds per optimizer step of every model of the study, measured back to back in this process (one thread;
    experiments.studies' time_steps: the median of 8 steps after 2), so the ratios are comparable on a shared
    machine, unlike the s/step of runs that ran at different loads. Writes OUT/timing.json."""
    import torch

    from experiments.studies.runs import time_steps

    torch.set_num_threads(1)
    models = {
        "baseline": Job("t", "baseline", 1.0, 5, 1),
        **{f"ot M={m}": Job("t", "ot", 1.0, m, 1) for m in (1, 2, 5, 10)},
        **{f"ot_matched M={m}": Job("t", "ot_matched", 1.0, m, 1) for m in (1, 5)},
    }
    result = {name: time_steps(recipe(job, SETTINGS)) for name, job in models.items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "timing.json").write_text(json.dumps(result, indent=1))
    return result
