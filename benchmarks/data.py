"""The causal-LM data path at scale: a generated text file (500 MB by default) through hf_ot.recipes.data
(text_splits: the file into Arrow rows and the 90/10 character split; lm_datasets: tokenize + group into blocks in one
cached `Dataset.map(batched=True, num_proc=...)`), with a small byte-level BPE tokenizer.

Memory stays bounded by design, not by the corpus size: the text is read into large Arrow record batches and blocks
are written in batches of up to 1000 (a memory-mapped stream of small batches gets every page mapped when opened);
with --num-proc, datasets' own Dataset.map workers each tokenize one contiguous shard of the text.

Reports peak memory (the whole process tree, this process plus the map workers, as summed PSS; and the largest
single process's RSS; sampled every 100 ms) and throughput in MB of text per second. Target: both under 2 GB.
Throughput depends on the machine's load (recorded as load_average_1min_at_end). The datasets cache goes to a fresh
folder under --workdir, so nothing is read from an earlier run's cache.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

TARGET_PEAK_RSS_MB = 2048


class PeakMemory:
    """Peaks, sampled in a thread, of (a) the memory of the whole process tree (this process and the map workers):
    the sum of PSS, which counts pages the forked workers share with this process once, and (b) the RSS of the
    largest single process."""

    def __init__(self, interval: float = 0.1):
        self.interval, self.tree_pss, self.process_rss, self._stop = interval, 0, 0, threading.Event()
        self.main_anon = 0  # this process's anonymous memory (heap; not pages of memory-mapped Arrow files)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        me = psutil.Process()
        while not self._stop.is_set():
            pss = 0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    info = proc.memory_full_info()
                except psutil.Error:  # a worker that just ended
                    continue
                pss += info.pss
                self.process_rss = max(self.process_rss, info.rss)
            self.tree_pss = max(self.tree_pss, pss)
            with open("/proc/self/status") as f:
                anon = next(int(line.split()[1]) for line in f if line.startswith("RssAnon")) * 1024
            self.main_anon = max(self.main_anon, anon)
            time.sleep(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def write_corpus(path: Path, megabytes: int) -> int:
    """English-like text: CPython's reference manual (pydoc_data.topics) repeated, each copy numbered."""
    from hf_ot.recipes.data import embedded_text

    base = embedded_text()
    target = megabytes * 1_000_000
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        copy = 0
        while written < target:
            chunk = f"== copy {copy} ==\n{base}\n"
            f.write(chunk)
            written += len(chunk.encode("utf-8"))
            copy += 1
    return path.stat().st_size


def small_bpe(vocab_size: int):
    """A byte-level BPE trained on the embedded text (seconds), as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from hf_ot.recipes.data import embedded_text

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "<unk>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([embedded_text()], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--megabytes", type=int, default=500)
    p.add_argument("--block-size", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--num-proc", type=int, default=2)
    p.add_argument(
        "--workdir",
        default=None,
        help="where the text file and the datasets cache go (default: a temp folder, removed afterwards)",
    )
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "data.json"))
    args = p.parse_args(argv)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="hf_ot_data_bench_"))
    workdir.mkdir(parents=True, exist_ok=True)
    cache = workdir / "hf_datasets_cache"
    shutil.rmtree(cache, ignore_errors=True)
    os.environ["HF_DATASETS_CACHE"] = str(cache)  # read by datasets at import: a fresh cache, no earlier results
    import datasets

    from hf_ot.recipes import data as data_lib

    datasets.disable_progress_bars()
    corpus = workdir / "corpus.txt"
    t0 = time.perf_counter()
    size = write_corpus(corpus, args.megabytes)
    tokenizer = small_bpe(args.vocab)
    prepare_s = time.perf_counter() - t0

    data = {
        "source": "file",
        "train_file": str(corpus),
        "val_fraction": 0.1,
        "block_size": args.block_size,
        "num_proc": args.num_proc,
    }
    with PeakMemory() as memory:
        t0 = time.perf_counter()
        splits = data_lib.text_splits(data)
        t_split = time.perf_counter() - t0
        train, val = data_lib.lm_datasets(data, tokenizer, splits=splits)
        total_s = time.perf_counter() - t0
    blocks = len(train) + len(val)
    # a spot check: the first block is the first block_size ids of the first rows, tokenized one by one
    head = [
        i
        for row in splits["train"].select(range(500))["text"]
        for i in tokenizer(row, add_special_tokens=False)["input_ids"]
    ][: args.block_size]
    assert train[0]["input_ids"] == head and train[0]["labels"] == head
    cache_bytes = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())

    result = {
        "python": platform.python_version(),
        "datasets": datasets.__version__,
        "cpus": os.cpu_count(),
        "config": {
            "megabytes": args.megabytes,
            "file_bytes": size,
            "block_size": args.block_size,
            "tokenizer": f"byte-level BPE, vocab {len(tokenizer)}",
            "num_proc": args.num_proc,
            "group_bytes": data_lib.GROUP_BYTES,
            "text_writer_batch_rows": data_lib.TEXT_WRITER_BATCH_ROWS,
        },
        "rows_train": len(splits["train"]),
        "rows_validation": len(splits["validation"]),
        "blocks_train": len(train),
        "blocks_validation": len(val),
        "tokens_in_blocks": blocks * args.block_size,
        "prepare_s (file + tokenizer, not timed below)": round(prepare_s, 1),
        "split_s": round(t_split, 1),
        "total_s": round(total_s, 1),
        "mb_per_s": round(size / 1e6 / total_s, 2),
        "peak_pss_mb_process_tree": round(memory.tree_pss / 2**20, 1),
        "peak_rss_mb_largest_process": round(memory.process_rss / 2**20, 1),
        "peak_anonymous_mb_main_process (RssAnon: without mapped Arrow pages)": round(memory.main_anon / 2**20, 1),
        "peak_rss_mb_main_process (getrusage)": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_rss_mb_largest_worker (getrusage)": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1
        ),
        "load_average_1min_at_end": round(os.getloadavg()[0], 1),
        "disk_cache_mb": round(cache_bytes / 2**20, 1),
        "target_peak_rss_mb": TARGET_PEAK_RSS_MB,
        "meets_target": max(memory.tree_pss, memory.process_rss) / 2**20 < TARGET_PEAK_RSS_MB,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if result["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
