"""One run of the study: fine-tune the converted MiniLM on a training slice, evaluate the selection slice every K
steps and keep the best point (early stopping), then evaluate that point on the report set (all 872 validation
sentences) at the trained M and, for M > 1, at Euler M' = 1. The objective is OTTrainer's, task + lambda * reg.

Loading, tokenization, padding and prediction are experiments.pretrained_elastic.run's (the same checkpoint, the
sst2_minilm_elastic recipe's tokenizer and data code)."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import torch

from experiments.pretrained_elastic.run import (
    acc,
    log,
    minilm_path,
    pad,
    predict,
    recipe_config,
    recipe_tokenizer,
    set_res,
)

from .jobs import POOL, RESULTS, SETTINGS, Job, slices

# MiniLM's shape, for the analytic FLOPs: L layers of width D, feed-forward 4D
LAYERS, WIDTH = 6, 384

_DATA: dict = {}


def data(tokenizer) -> dict:
    """{'select': (ids, labels), 'train256': ..., 'train2048': ..., 'report': ...}: the slices (jobs.slices) of the
    recipe's shuffled training pool and the whole validation set, tokenized by the recipe's own code."""
    if "d" in _DATA:
        return _DATA["d"]
    from hf_ot.recipes import classification_datasets

    cfg = recipe_config([f"data.max_train_samples={POOL}", f"data.max_length={SETTINGS['max_length']}"])
    pool, val = classification_datasets(cfg, tokenizer)
    ids, labels = [list(r) for r in pool["input_ids"]], list(pool["label"])
    out = {name: ([ids[i] for i in rows], [labels[i] for i in rows]) for name, rows in slices(pool["text"]).items()}
    out["report"] = ([list(r) for r in val["input_ids"]], list(val["label"]))
    _DATA["d"] = out
    return out


def build(job: Job):
    import hf_ot

    torch.manual_seed(job.seed)  # the head: the same initialisation for every configuration of one seed
    p = job.dropout
    return hf_ot.convert(
        minilm_path(),
        task="sequence-classification",
        num_labels=2,
        ot_num_steps=job.steps,
        ot_solver="euler",
        ot_mode="residual",
        ot_lambda=0.0,  # the loop adds lambda * reg itself
        hidden_dropout_prob=p,
        attention_probs_dropout_prob=p,
    )


@torch.inference_mode()
def evaluate(model, tokenizer, ids, labels, steps: int, batch: int) -> tuple[float, float]:
    """(accuracy %, mean cross-entropy) at Euler M = steps, batches sorted by length (dynamic padding)."""
    model.eval()
    set_res(model, "euler", steps)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    correct, loss = 0, 0.0
    for s in range(0, len(order), batch):
        chunk = order[s : s + batch]
        x, m = pad(tokenizer, [ids[i] for i in chunk])
        y = torch.tensor([labels[i] for i in chunk])
        logits = model(input_ids=x, attention_mask=m).logits
        correct += int((logits.argmax(-1) == y).sum())
        loss += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
    return 100.0 * correct / len(ids), loss / len(ids)


def optimizer(model, lr: float, weight_decay: float):
    """AdamW with decoupled weight decay on the weights, none on biases and LayerNorms (transformers' convention)."""
    decay, rest = [], []
    for name, param in model.named_parameters():
        (rest if name.endswith("bias") or "LayerNorm" in name else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr)


def train_flops(steps: int, tokens: int, tokens_sq: int) -> float:
    """Analytic training FLOPs (3 x forward): per padded token and block application 24 D^2 for the projections and
    feed-forward, 4 T D for attention scores and values (T the batch's length); M applications of the L layers."""
    return 3.0 * steps * LAYERS * (24 * WIDTH * WIDTH * tokens + 4 * WIDTH * tokens_sq)


def run_job(job: Job, settings: dict | None = None, results: Path = RESULTS) -> dict:
    from transformers import get_linear_schedule_with_warmup

    S = {**SETTINGS, **(settings or {})}
    torch.set_num_threads(1)
    tok = recipe_tokenizer()
    d = data(tok)
    tr_ids, tr_y = d[f"train{job.n}"]
    sel_ids, sel_y = d["select"]
    epochs = S["epochs"][job.n] if isinstance(S["epochs"], dict) else S["epochs"]
    every = S["eval_every"][job.n] if isinstance(S["eval_every"], dict) else S["eval_every"]
    per_epoch = -(-len(tr_ids) // S["batch"])
    total = int(S.get("max_steps") or epochs * per_epoch)
    model = build(job)
    opt = optimizer(model, S["lr"], job.weight_decay)
    sched = get_linear_schedule_with_warmup(opt, round(S["warmup_frac"] * total), total)
    g = torch.Generator().manual_seed(job.seed)
    order: list[int] = []
    curve, best, best_state = [], None, None
    tokens = tokens_sq = 0
    train_s = eval_s = 0.0
    for step in range(total):
        t0 = time.time()
        if not order:  # a fresh shuffle every epoch
            order = torch.randperm(len(tr_ids), generator=g).tolist()
        rows, order = order[: S["batch"]], order[S["batch"] :]
        x, m = pad(tok, [tr_ids[i] for i in rows])
        y = torch.tensor([tr_y[i] for i in rows])
        model.train()
        set_res(model, "euler", job.steps)
        out = model(input_ids=x, attention_mask=m, labels=y, output_reg=job.lam > 0)
        loss = out.loss + job.lam * out.reg if job.lam > 0 else out.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), S["clip"])
        opt.step()
        sched.step()
        tokens += x.numel()
        tokens_sq += x.numel() * x.shape[1]
        train_s += time.time() - t0
        if (step + 1) % every == 0 or step + 1 == total:
            t0 = time.time()
            sel_acc, sel_loss = evaluate(model, tok, sel_ids, sel_y, job.steps, S["eval_batch"])
            eval_s += time.time() - t0
            point = dict(
                step=step + 1,
                epoch=(step + 1) / per_epoch,
                select_acc=sel_acc,
                select_loss=sel_loss,
                train_loss=out.loss.item(),
                train_s=train_s,
                train_flops=train_flops(job.steps, tokens, tokens_sq),
            )
            curve.append(point)
            if best is None or (-sel_acc, sel_loss) < (-best["select_acc"], best["select_loss"]):
                best = point
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            log(job.id, point)
    assert best is not None and best_state is not None
    model.load_state_dict(best_state)
    t0 = time.time()
    rep_ids, rep_y = d["report"]
    report = {f"euler:{job.steps}": acc(predict(model, tok, rep_ids, "euler", job.steps), rep_y)}
    if job.steps > 1:  # the OT model at fewer field evaluations (a side column)
        report["euler:1"] = acc(predict(model, tok, rep_ids, "euler", 1), rep_y)
    report_s = time.time() - t0
    return dict(
        job=dict(
            id=job.id,
            n=job.n,
            family=job.family,
            config=job.config,
            seed=job.seed,
            steps=job.steps,
            lam=job.lam,
            dropout=job.dropout,
            weight_decay=job.weight_decay,
            groups=list(job.groups),
        ),
        settings={**S, "epochs": epochs, "eval_every": every, "total_steps": total},
        sizes={name: len(v[0]) for name, v in d.items()},
        best=best,
        curve=curve,
        report=report,
        report_acc=report[f"euler:{job.steps}"],
        train_s=train_s,
        select_eval_s=eval_s,
        report_s=report_s,
        s_per_step=train_s / total,
        machine=dict(
            python=platform.python_version(),
            torch=torch.__version__,
            transformers=__import__("transformers").__version__,
            threads=torch.get_num_threads(),
            load=os.getloadavg(),
            finished=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        ),
    )


def run_and_save(job: Job, settings: dict | None = None, results: Path = RESULTS) -> dict:
    t0 = time.time()
    record = run_job(job, settings, results)
    record["wall_s"] = time.time() - t0
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{job.id}.json").write_text(json.dumps(record, indent=1) + "\n")
    return record
