"""One study run: train a recipe, then evaluate the saved model (Shakespeare-char LM or SST-2), and the timing of
every study model."""

from __future__ import annotations

import json
import shutil
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from hf_ot.metrics import accuracy, noisy_ids, predict

from .jobs import (
    BEFORE_SENTENCES,
    CONFIGS,
    ELASTIC_SOLVERS,
    ELASTIC_STEPS,
    MATCHED,
    NOISE_RATES,
    NOISE_SUBSET_EVERY,
    SST_STEPS,
    Job,
    field_evaluations,
)


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
                out["elastic"].append(
                    {
                        "num_steps": steps,
                        "solver": solver,
                        "field_evaluations": field_evaluations(steps, solver),
                        "loss": loss(),
                    }
                )
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
    evaluations = field_evaluations(ot["ot_num_steps"], ot["ot_solver"]) if ot else 1
    return {
        "parameters": results["parameters"],
        "train_runtime_s": results["train_runtime_s"],
        "s_per_step": results["train_runtime_s"] / steps,
        "eval_reg": results.get("eval_reg"),
        "recipe_loss": results.get("loss"),
        **losses,
        "block_applications": scratch["n_layer"] * evaluations,
        "curve": [(h["step"], h.get("task_loss", h["loss"])) for h in history if "loss" in h and "step" in h],
        "config": cfg.to_dict(),
    }


def encode_validation(cfg, tokenizer):
    """All validation sentences (data.max_eval_samples does not apply here), tokenized, with their labels."""
    from hf_ot.recipes.data import load_classification

    val = load_classification(cfg.data)["validation"]
    enc = tokenizer(
        list(val["text"]), truncation=True, max_length=int(cfg.data.max_length or 64), return_special_tokens_mask=True
    )
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
    trainer = (OTTrainer if is_ot else Trainer)(
        model=model,
        args=args,
        train_dataset=train_ds,
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
    )
    train_out = trainer.train()
    steps = int(cfg.training["max_steps"])
    result.update(
        train_runtime_s=train_out.metrics["train_runtime"],
        s_per_step=train_out.metrics["train_runtime"] / steps,
        curve=[
            (h["step"], h.get("task_loss", h["loss"])) for h in trainer.state.log_history if "loss" in h and "step" in h
        ],
    )
    model = trainer.accelerator.unwrap_model(trainer.model)
    logits_after = predict(model, tokenizer, ids, batch)
    result["accuracy"] = accuracy(logits_after, labels)
    subset = slice(0, None, NOISE_SUBSET_EVERY)
    sub_ids, sub_special, sub_labels = ids[subset], special[subset], labels[subset]
    result["noise_sentences"] = len(sub_labels)
    result["accuracy_noise_subset"] = accuracy(logits_after[subset], sub_labels)  # the 0% point of the noise curve
    result["noise"] = {
        str(rate): accuracy(
            predict(model, tokenizer, noisy_ids(sub_ids, sub_special, rate, model.config.vocab_size), batch), sub_labels
        )
        for rate in NOISE_RATES
    }
    shutil.rmtree(run_dir, ignore_errors=True)  # trainer scratch only; the fine-tuned MiniLMs are not kept
    result["config"] = cfg.to_dict()
    return result


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
    lam = float((cfg.model.ot or {}).get("ot_lambda", 0.0))
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

    models = {
        "ot_noln (lambda=1)": (CONFIGS["ot"], []),
        **{name: (CONFIGS[c], o) for name, (c, o) in MATCHED.items()},
        "sst2 base": (CONFIGS["sst2"], ["model.ot=null"]),
        **{f"sst2 M={m}": (CONFIGS["sst2"], [f"model.ot.ot_num_steps={m}"]) for m in SST_STEPS},
    }
    result = {name: time_steps(load_config(config, overrides)) for name, (config, overrides) in models.items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "timing.json").write_text(json.dumps(result, indent=1))
    return result


def run_job(job: Job, out: Path, grid=(ELASTIC_STEPS, ELASTIC_SOLVERS)) -> dict:
    started = time.time()
    result = run_lm(job, out, grid) if job.kind == "lm" else run_sst2(job, out)
    record = {
        "job": asdict(job),
        "result": result,
        "wall_s": time.time() - started,
        "finished_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }
    (out / "raw").mkdir(parents=True, exist_ok=True)
    tmp = out / "raw" / f"{job.id}.json.tmp"
    tmp.write_text(json.dumps(record, indent=1, default=str))
    tmp.replace(out / "raw" / f"{job.id}.json")  # complete or absent, never half written
    return record
