"""Evaluate a saved model folder on a recipe's validation data, optionally under test-time token noise."""

from __future__ import annotations

from .. import evaluation as ev
from ..errors import UsageError
from ..recipes import load_config


def load_for_eval(folder: str, trust_remote_code: bool = False):
    """Load a saved model and its tokenizer. hf_ot's own types load with hf_ot's installed code; a folder whose code
    is not hf_ot's (its config's auto_map points at its own Python files) runs that code only with
    trust_remote_code=True, as in transformers."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    from ..checkpoints import check_model_files
    from ..hub import load_tokenizer

    check_model_files(folder)  # a corrupt config, an auto_map out of the folder, a cut-short shard: named first
    config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    model = auto.from_pretrained(folder, trust_remote_code=trust_remote_code).eval()
    return model, load_tokenizer(folder, trust_remote_code=trust_remote_code)


def lm_eval_dataset(cfg: dict, tokenizer):
    """The recipe's validation blocks, tokenized with the saved model's tokenizer (the validation split only: the
    training text is not tokenized)."""
    from datasets import Dataset, IterableDataset

    from ..data import check_datasets, lm_blocks, text_splits

    data = cfg["data"]
    blocks = lm_blocks(text_splits(data)["validation"], tokenizer, int(data.get("block_size", 128)),
                       data.get("stride"), num_proc=data.get("num_proc"), limit=data.get("max_eval_blocks"))
    check_datasets(None, blocks, task="causal-lm", data=data)
    return Dataset.from_list(list(blocks)) if isinstance(blocks, IterableDataset) else blocks


def set_solver(model, num_steps: int | None = None, solver: str | None = None) -> None:
    """Evaluate a trained OT model at another M or solver: set on its config (read at every forward), checked."""
    if num_steps is None and solver is None:
        return
    config = model.config
    if not hasattr(config, "ot_num_steps"):
        raise UsageError(f"--steps / --solver apply to hf_ot OT models; {type(model).__name__} is not one.")
    if num_steps is not None:
        config.ot_num_steps = num_steps
        if getattr(config, "ot_decoder_num_steps", None) is not None:
            config.ot_decoder_num_steps = num_steps
    if solver is not None:
        config.ot_solver = solver
    config.validate_ot_settings()


def evaluate_folder(folder: str, config: str, overrides=None, noise_rates=(), metrics=None, accelerator=None,
                    trust_remote_code: bool = False, num_steps: int | None = None, solver: str | None = None) -> dict:
    """Evaluate a saved model on a recipe's validation data: causal LM teacher-forced (loss, perplexity, text
    metrics of the argmax predictions), translation generation-based (BLEU, ROUGE, BERTScore); each noise rate adds a
    run with that fraction of input tokens randomly replaced, and its `drop`: noisy minus clean, per metric."""
    cfg = load_config(config, overrides)
    if cfg["task"] not in ("causal-lm", "translation"):  # before any model is loaded
        raise UsageError(f"evaluate supports causal-lm and translation recipes, got {cfg['task']!r} (a "
                         "sequence-classification run reports its accuracy in results.json).")
    spec = cfg.get("evaluation") or {}
    metrics = ev.check_metric_names(metrics if metrics is not None else spec.get("metrics", ("bleu", "rouge")))
    rates = [ev.check_noise_rate(r) for r in noise_rates]  # before any model is loaded
    if len(set(rates)) < len(rates):
        raise UsageError(f"--noise: the rate {next(r for r in rates if rates.count(r) > 1)} is given more than once: "
                         "give each rate once.")
    model, tokenizer = load_for_eval(folder, trust_remote_code)
    set_solver(model, num_steps, solver)
    results = {"model": folder, "task": cfg["task"], "runs": []}
    if metrics:
        results["text_metrics_protocol"] = (
            "teacher-forced: the argmax next token given the true prefix (official evaluate.py); it rewards copying "
            "the input, it does not score generated text" if cfg["task"] == "causal-lm" else
            "generated text vs references")
    if hasattr(model.config, "ot_num_steps"):
        results.update(num_steps=model.config.ot_num_steps, solver=model.config.ot_solver)
    for rate in (0.0, *[r for r in rates if r > 0]):
        if cfg["task"] == "causal-lm":
            res = ev.teacher_forced_lm(model, lm_eval_dataset(cfg, tokenizer), tokenizer,
                                       batch_size=int(spec.get("batch_size", 16)), noise_rate=rate,
                                       accelerator=accelerator)
            run = {"noise_rate": rate, "loss": res.loss, "perplexity": res.perplexity, "samples": res.samples}
            if metrics:
                run.update(ev.text_metrics(res.predictions, res.references, metrics))
        else:  # translation
            from .data import load_translation

            raw = load_translation(cfg["data"])["validation"]
            n = int(spec.get("generate_samples", 100))
            prefix = cfg["data"].get("source_prefix", "")
            hyps = ev.generate_texts(model, tokenizer, [prefix + s for s in raw["source"][:n]], noise_rate=rate,
                                     max_new_tokens=int(spec.get("max_new_tokens", 48)), do_sample=False,
                                     num_beams=int(spec.get("num_beams", 1)))
            run = {"noise_rate": rate, "samples": len(hyps), **ev.text_metrics(hyps, list(raw["target"][:n]),
                                                                                metrics)}
        results["runs"].append(run)
    clean = results["runs"][0]
    for run in results["runs"][1:]:
        run["drop"] = {k: run[k] - clean[k] for k in run if k not in ("noise_rate", "samples") and
                       isinstance(run[k], (int, float))}
    return results
