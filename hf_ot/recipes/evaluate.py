"""The recipe's evaluation after training: task loss and reg, and the task's metrics.

`eval_loss` from OTTrainer is the training objective, task loss + lambda * reg; exp(eval_loss) is not a perplexity.
Perplexity comes from the task loss alone (`eval_perplexity`, and the official per-sequence `perplexity` of causal
LMs). A causal LM's BLEU / ROUGE are teacher-forced (the official evaluate.py: the argmax next token against the
shifted text), which rewards a model that copies its input; seq2seq recipes score generated text."""

from __future__ import annotations

import math


def task_is_token_level(task: str) -> bool:
    """Tasks whose task loss is a per-token cross-entropy (so exp of it is a perplexity)."""
    return task in ("causal-lm", "translation")


def evaluate_recipe(cfg: dict, trainer, tokenizer, eval_ds, raw=None) -> dict:
    """Task loss and reg on the validation split, plus the task's metrics (evaluation section of the config)."""
    from .. import metrics as ev

    spec = cfg.get("evaluation") or {}
    metrics = trainer.evaluate()
    out = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    if "eval_task_loss" in out and task_is_token_level(cfg["task"]):
        out["eval_perplexity"] = math.exp(min(out["eval_task_loss"], 700.0))  # from the task loss, not eval_loss
    model = trainer.accelerator.unwrap_model(trainer.model)
    task = cfg["task"]
    text_metrics = tuple(spec.get("metrics", ("bleu", "rouge")))
    if task == "causal-lm":
        res = ev.teacher_forced_lm(model, eval_ds, tokenizer, batch_size=int(spec.get("batch_size", 16)),
                                   accelerator=trainer.accelerator, max_batches=spec.get("max_batches"))
        out.update(loss=res.loss, perplexity=res.perplexity, eval_samples=res.samples)
        if text_metrics and trainer.is_world_process_zero():
            out.update(ev.text_metrics(res.predictions, res.references, text_metrics))
            out["text_metrics_protocol"] = ("teacher-forced: the argmax next token given the true prefix (official "
                                            "evaluate.py); it rewards copying the input, it does not score "
                                            "generated text")
    elif task == "sequence-classification":
        pred = trainer.predict(eval_ds)
        out["accuracy"] = float((pred.predictions.argmax(-1) == pred.label_ids).mean())
    else:
        n = int(spec.get("generate_samples", 100))
        sources = [cfg["data"].get("source_prefix", "") + s for s in raw["validation"]["source"][:n]]
        refs = list(raw["validation"]["target"][:n])
        if trainer.is_world_process_zero():
            hyps = ev.generate_texts(model, tokenizer, sources, max_new_tokens=int(spec.get("max_new_tokens", 48)),
                                     num_beams=int(spec.get("num_beams", 1)), do_sample=False)
            out.update(ev.text_metrics(hyps, refs, text_metrics))
            out["text_metrics_protocol"] = f"generated (greedy / {int(spec.get('num_beams', 1))} beams) vs references"
            out["examples"] = [{"source": s, "prediction": h, "reference": r}
                               for s, h, r in list(zip(sources, hyps, refs))[:3]]
    return out
