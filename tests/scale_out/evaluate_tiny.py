"""Evaluation of tiny saved OT models on one process or under torchrun (tests/test_distributed_evaluation.py): every
task in one launch, each process writing (WORK/resultRANK.json) what it returned and how many rows it handled.

    python evaluate_tiny.py WORK          (WORK: the folder make_work() filled)
    torchrun --nproc_per_node 2 evaluate_tiny.py WORK

Tasks: translation (generated texts; BLEU, ROUGE, BERTScore clean and under noise, through evaluate_folder),
classification (logits and accuracy, clean and under noise), calibrate's solver x M' grid (calibrate_folder on the
translator: losses), the recipe's evaluation after training (evaluate_trained, elasticity_after_training on a
Trainer), then `hf-ot robustness` through the CLI (last: the CLI leaves the process group). Rows are counted where
the models see them: generate() calls, the classifier's forwards, bert_score's pairs.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections import Counter
from pathlib import Path

import torch

SOURCES = [
    "ein mann fährt fahrrad",
    "zwei hunde spielen im schnee am fluss",
    "eine frau liest ein buch",
    "kinder spielen fußball auf der straße vor dem haus",
    "ein hund",
    "der mann trägt einen roten hut und eine blaue jacke",
    "eine gruppe von menschen steht vor einem gebäude",
    "ein junge springt",
    "eine katze schläft auf dem sofa",
    "zwei männer arbeiten an einem auto in der garage",
    "ein mädchen malt ein bild",
]
TARGETS = [
    "a man rides a bike",
    "two dogs play in the snow by the river",
    "a woman reads a book",
    "children play football on the street in front of the house",
    "a dog",
    "the man wears a red hat and a blue jacket",
    "a group of people stands in front of a building",
    "a boy jumps",
    "a cat sleeps on the sofa",
    "two men work on a car in the garage",
    "a girl paints a picture",
]


def make_work(work: Path) -> None:
    """Tiny data files and two tiny saved OT models (a T5 translator, a BERT classifier) sharing a BPE tokenizer."""
    from transformers import BertConfig, BertForSequenceClassification, T5Config, T5ForConditionalGeneration

    import hf_ot
    from hf_ot.hub import save_model
    from hf_ot.recipes.tokenizer import build_subword_tokenizer

    work.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val"):
        (work / f"{split}.de").write_text("\n".join(SOURCES) + "\n")
        (work / f"{split}.en").write_text("\n".join(TARGETS) + "\n")
    rows = [f"{t}\t{i % 2}" for i, t in enumerate(TARGETS + SOURCES)] * 2
    for split in ("train", "validation"):
        (work / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    tok = build_subword_tokenizer(SOURCES + TARGETS, 300)
    special = dict(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, vocab_size=len(tok))
    torch.manual_seed(0)
    t5 = T5ForConditionalGeneration(
        T5Config(
            num_layers=1,
            d_model=32,
            d_kv=8,
            num_heads=4,
            d_ff=48,
            dropout_rate=0.0,
            decoder_start_token_id=0,
            **special,
        )
    )
    save_model(hf_ot.convert(t5, ot_num_steps=2), work / "t5", tokenizer=tok)
    bert = BertForSequenceClassification(
        BertConfig(
            num_hidden_layers=1,
            hidden_size=32,
            num_attention_heads=4,
            intermediate_size=48,
            max_position_embeddings=64,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            num_labels=2,
            **special,
        )
    )
    save_model(hf_ot.convert(bert, ot_num_steps=2), work / "bert", tokenizer=tok)


def translation_settings(work: Path) -> list[str]:
    files = {"train": "train", "validation": "val", "test": "val"}
    paths = [
        f"data.{s}_{side}={work / f'{f}.{lang}'}"
        for s, f in files.items()
        for side, lang in (("source", "de"), ("target", "en"))
    ]
    return [
        *paths,
        "evaluation.generate_samples=11",
        "evaluation.max_new_tokens=6",
        "data.max_eval_samples=11",
        "evaluation.batch_size=4",
    ]


def classification_settings(work: Path) -> list[str]:
    return [
        f"data.train_file={work / 'train.tsv'}",
        f"data.validation_file={work / 'validation.tsv'}",
        "data.max_eval_samples=null",
        "evaluation.batch_size=4",
    ]


@contextlib.contextmanager
def counting(counts: Counter):
    """Count the rows the models see: generate() calls, the classifier's forwards, bert_score's pairs, and the pairs
    BLEU and ROUGE score."""
    import bert_score

    import hf_ot.metrics

    patched = []

    def wrap(owner, name, key, rows):
        original = getattr(owner, name)

        @functools.wraps(original)  # the signature stays (Trainer keeps the columns forward() names)
        def counted(*args, **kwargs):
            counts[key] += rows(*args, **kwargs)
            return original(*args, **kwargs)

        patched.append((owner, name, original))
        setattr(owner, name, counted)

    wrap(hf_ot.OTT5ForConditionalGeneration, "generate", "generated", lambda self, **kw: int(kw["input_ids"].shape[0]))
    classifier = hf_ot.OTBertForSequenceClassification
    wrap(classifier, "forward", "classified", lambda self, input_ids=None, **kw: int(input_ids.shape[0]))
    wrap(bert_score, "score", "bertscored", lambda cands, refs, **kw: len(cands))
    for metric in ("bleu", "rouge"):
        wrap(hf_ot.metrics, metric, f"{metric}_scored", lambda predictions, references, **kw: len(predictions))
    try:
        yield
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)


def run(work: Path, accelerator) -> dict:
    """Every task on this process; returns the results and the rows this process handled per task."""
    from transformers import DataCollatorWithPadding, TrainingArguments

    import hf_ot
    from hf_ot import metrics as ev
    from hf_ot.recipes import load_config
    from hf_ot.recipes.evaluate import (
        calibrate_folder,
        elasticity_after_training,
        evaluate_folder,
        evaluate_trained,
        load_for_eval,
    )

    out: dict = {"world_size": accelerator.num_processes, "rank": accelerator.process_index, "rows": {}}
    counts: Counter = Counter()

    def phase(name, fn):
        before = Counter(counts)
        out[name] = fn()
        out["rows"][name] = dict(counts - before)

    with counting(counts):
        t5, bert = str(work / "t5"), str(work / "bert")
        translation = translation_settings(work)
        phase(
            "translation",
            lambda: evaluate_folder(
                t5,
                "translation_t5",
                overrides=translation,
                noise_rates=[0.3],
                metrics=["bleu", "rouge", "bertscore"],
                accelerator=accelerator,
            )["runs"],
        )
        model, tok = load_for_eval(t5, task="translation")
        phase(
            "texts",
            lambda: ev.generate_texts(
                model, tok, SOURCES, batch_size=3, accelerator=accelerator, max_new_tokens=6, do_sample=False
            ),
        )
        classification = classification_settings(work)
        phase(
            "classification",
            lambda: evaluate_folder(
                bert, "sst2_minilm", overrides=classification, noise_rates=[0.2], accelerator=accelerator
            )["runs"],
        )
        classifier, tok = load_for_eval(bert, task="sequence-classification")
        ids = tok(TARGETS + SOURCES, truncation=True)["input_ids"]
        phase("logits", lambda: ev.predict(classifier, tok, ids, batch_size=4, accelerator=accelerator).tolist())
        phase("grid", lambda: calibrate_folder(t5, "translation_t5", overrides=translation, accelerator=accelerator))
        for row in out["grid"]["rows"] + [out["grid"]["trained"], out["grid"]["choice"]]:
            row.pop("seconds_per_batch")  # a time: differs from run to run
        # the recipe's evaluation after training, on a Trainer of the trained classifier
        cfg = load_config("sst2_minilm", [*classification, "evaluation.elasticity_max_steps=2"])
        eval_ds = hf_ot.recipes.splits.classification_datasets(cfg, tok)[1]
        args = TrainingArguments(
            output_dir=str(work / f"trainer{accelerator.process_index}"),
            use_cpu=True,
            per_device_eval_batch_size=4,
            report_to="none",
            disable_tqdm=True,
        )
        trainer = hf_ot.OTTrainer(
            model=classifier, args=args, eval_dataset=eval_ds, data_collator=DataCollatorWithPadding(tok)
        )
        phase("after_training", lambda: evaluate_trained(cfg, trainer, tok, eval_ds)["accuracy"])
        phase(
            "elasticity",
            lambda: [[r.solver, r.num_steps, r.metric] for r in elasticity_after_training(cfg, trainer, tok).rows],
        )
        # the CLI under the launcher: one robustness table, written by the main process only
        from hf_ot.cli import main

        cli = ["robustness", "--models", f"bert={bert}", "--config", "sst2_minilm", "--rates", "0.2"]
        cli += ["--out", str(work / f"robustness{accelerator.num_processes}"), "--json"]
        for setting in classification:
            cli += ["--set", setting]
        phase("cli_exit_code", lambda: main(cli))
    return out


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from hf_ot.metrics import launch_accelerator

    result = run(Path(sys.argv[1]), launch_accelerator())
    # a file per process: two processes printing long lines into one pipe can interleave them
    (Path(sys.argv[1]) / f"result{result['rank']}.json").write_text(json.dumps(result))
