"""Peak memory of a causal LM's data path on a text of one line (50 MB by default, no newline), read from a file or
streamed, with data.max_train_blocks / max_eval_blocks (and, streamed, data.validation_rows) set: memory and time
follow those settings, not the file's size.

    python benchmarks/one_line_memory.py [--mb 50] [--stream]

Prints the peak RSS of this process (ru_maxrss) after the imports and at the end, and the seconds taken. The datasets
cache goes to a fresh folder, so nothing is read from an earlier run's cache.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=50, help="the line's size in MB")
    parser.add_argument("--stream", action="store_true", help="data.streaming: true, data.validation_rows: 1")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hf_ot_one_line_"))
    os.environ["HF_DATASETS_CACHE"] = str(work / "cache")
    from hf_ot.recipes import data as data_lib
    from hf_ot.recipes.tokenizer import build_char_tokenizer

    path, rng, words = work / "one_line.txt", random.Random(0), "alpha beta gamma delta epsilon zeta eta theta".split()
    with path.open("w") as f:  # words and spaces, no newline
        for _ in range(0, args.mb * 1_000_000, 60_000):
            f.write(" ".join(rng.choice(words) for _ in range(10_000)) + " ")
    peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # noqa: E731 (MB on Linux)
    imports, start = peak(), time.perf_counter()
    data = {"train_file": str(path), "block_size": 128, "max_train_blocks": 64, "max_eval_blocks": 64}
    data |= {"streaming": True, "validation_rows": 1} if args.stream else {}
    splits = data_lib.text_splits(data)
    train, validation = data_lib.lm_datasets(data, build_char_tokenizer("".join(sorted(set(" ".join(words))))), splits)
    blocks = sum(1 for _ in train)
    print(
        f"{'streamed' if args.stream else 'file'}: {path.stat().st_size / 1e6:.0f} MB of one line, {blocks} train / "
        f"{len(validation)} validation blocks: peak RSS {peak():.0f} MB (after imports {imports:.0f} MB), "
        f"{time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    main()
