"""Scale-out settings for OT models: FSDP's wrap policy is the family's block class, the class of the blocks in the
model's depth flows (what the solver applies M x stages times), so each block is one FSDP unit. The FSDP / DeepSpeed
config files ship with the package (recipes/scale_out/ in the repository, `hf_ot.scale_out_configs` installed):
`config_file("ds_zero2.json")` gives the path."""

from __future__ import annotations

from typing import Any


def block_class_names(model: Any) -> list[str]:
    """The class names of the blocks the model's depth flows integrate (e.g. ['GPT2Block'], T5: ['T5Block'])."""
    from .models.ot_flow import DepthFlow

    get_base = getattr(model, "get_base_model", None)  # a PEFT model
    if callable(get_base):
        model = get_base()
    names = sorted({type(block).__name__ for m in model.modules() if isinstance(m, DepthFlow) for block in m})
    if not names:
        raise ValueError(f"{type(model).__name__} has no depth flow: hf_ot.scale_out applies to hf_ot OT models.")
    return names


def fsdp_arguments(model: Any, version: int = 2, shard: str = "full_shard") -> dict[str, Any]:
    """TrainingArguments keywords that shard `model` with FSDP (`TrainingArguments(**fsdp_arguments(model), ...)`):
    auto wrap by the family's block class. In the form transformers 5.17 to 5.24 read without a deprecation warning:
    `fsdp=True` and everything in `fsdp_config` (a string such as "full_shard auto_wrap" is deprecated). `shard`:
    "full_shard" (parameters resharded after the forward) or "shard_grad_op" (kept gathered until the backward)."""
    if shard not in ("full_shard", "shard_grad_op"):
        raise ValueError(f"shard must be 'full_shard' or 'shard_grad_op', got {shard!r}.")
    return {
        "fsdp": True,
        "fsdp_config": {
            "version": version,
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "transformer_layer_cls_to_wrap": block_class_names(model),
            # FSDP2 takes a bool; FSDP1 (deprecated in transformers) the strategy's name
            "reshard_after_forward": shard == "full_shard" if version == 2 else shard,
        },
    }


def requested_engine(args: Any) -> str | None:
    """The sharding engine asked for, through TrainingArguments or an `accelerate launch` flag / config file:
    'fsdp', 'deepspeed' or None."""
    import os

    if getattr(args, "fsdp", None) or os.environ.get("ACCELERATE_USE_FSDP", "false").lower() in ("1", "true"):
        return "fsdp"
    if getattr(args, "deepspeed", None) or os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() in ("1", "true"):
        return "deepspeed"
    return None


def check_engine(trainer: Any) -> None:
    """A sharding engine that was asked for runs, or training stops here with the reason: accelerate turns FSDP on
    only for accelerator devices (GPU, XPU, NPU, HPU...); its CPU multi-process mode is DDP, which would train
    unsharded without this check."""
    engine = requested_engine(trainer.args)
    if engine == "fsdp" and not getattr(trainer, "is_fsdp_enabled", False):
        state = trainer.accelerator.state
        raise ValueError(
            f"FSDP was asked for (training.fsdp / accelerate launch --use_fsdp / an FSDP accelerate config) but "
            f"accelerate runs {state.distributed_type.value} on {state.device}: it enables FSDP only on accelerator "
            "devices (CUDA, XPU, NPU, HPU), not on CPU. On CPU, drop the FSDP setting (multi-process CPU training "
            "is DDP: torchrun --nproc_per_node N, or accelerate launch --multi_gpu with use_cpu); on GPUs, "
            "launch with one process per GPU."
        )
    if engine == "deepspeed" and not getattr(trainer, "is_deepspeed_enabled", False):
        raise ValueError(
            "DeepSpeed was asked for but accelerate did not enable it: is the deepspeed package installed "
            f"({DEEPSPEED_INSTALL})?"
        )


def init_deepspeed_process_group() -> None:
    """Start DeepSpeed's process group now, as its engine would at the start of train(). Launched (torchrun,
    accelerate, deepspeed) it exists already. In one process started without a launcher (`python script.py`,
    `hf-ot train`) it does not, and DeepSpeed would look for MPI (mpi4py) to find its rank: give it the environment
    `torchrun --nproc_per_node 1` gives (rank 0 of 1, a free local port), as transformers' docs do in notebooks, so
    that the run trains and barriers before train() (accelerator.wait_for_everyone) work. A no-op where the group
    exists."""
    import os
    import socket

    import torch.distributed

    if not torch.distributed.is_available() or torch.distributed.is_initialized():
        return
    import deepspeed

    launcher_env = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    if not any(name in os.environ for name in launcher_env):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    deepspeed.init_distributed()  # the backend of DeepSpeed's accelerator: gloo on CPU


# deepspeed builds its ops when they are first used: installed without them it takes ~20 s (an sdist); it runs on
# GPUs and, with torch's gloo backend, on CPU (ZeRO-2 and ZeRO-3, tested with 2 processes: tests/test_scale_out.py)
DEEPSPEED_INSTALL = 'pip install --no-build-isolation "hf-ot[deepspeed]"'

CPU_REASON = (
    "accelerate enables FSDP only on accelerator devices (CUDA, XPU, NPU, HPU), not on CPU. On CPU, drop the "
    "setting (multi-process CPU training is DDP: torchrun --nproc_per_node N, or accelerate launch --multi_gpu with "
    "use_cpu) or use DeepSpeed (training.deepspeed, which runs on CPU too); on GPUs, launch with one process per GPU."
)


def check_engine_before_running(args: Any) -> None:
    """Before any data is prepared: FSDP asked for on a CPU run is refused with the reason (accelerate would run DDP).
    DeepSpeed runs on CPU as on GPUs (check_engine_settings checks its package)."""
    from .errors import UsageError

    if requested_engine(args) == "fsdp" and str(args.device).startswith("cpu"):
        raise UsageError(f"FSDP was asked for on a CPU run: {CPU_REASON}")


def check_engine_settings(training: dict[str, Any]) -> None:
    """A recipe's `training` section, before TrainingArguments is built: DeepSpeed needs its package."""
    import importlib.util

    from .errors import UsageError

    if training.get("deepspeed") and importlib.util.find_spec("deepspeed") is None:
        raise UsageError(
            f"training.deepspeed needs the deepspeed package ({DEEPSPEED_INSTALL}): it is not installed here. "
            "Without it, drop the setting: multi-process training is then DDP (torchrun --nproc_per_node N)."
        )


def config_file(name: str) -> str:
    """The path of a scale-out config shipped with hf_ot ('ds_zero2.json', 'ds_zero3.json', 'accelerate_fsdp.yaml',
    'accelerate_two_processes.yaml'), for `training.deepspeed=...` or `accelerate launch --config_file ...` from any
    folder: `python -c "import hf_ot.scale_out as s; print(s.config_file('ds_zero2.json'))"`."""
    from importlib import resources
    from pathlib import Path

    try:
        folder: Any = resources.files("hf_ot.scale_out_configs")
    except ModuleNotFoundError:  # an editable install made before the configs were packaged: the checkout's folder
        folder = Path(__file__).resolve().parents[1] / "recipes" / "scale_out"
    path = folder / name
    if not path.is_file():
        names = sorted(p.name for p in folder.iterdir() if p.name.endswith((".json", ".yaml")))
        raise FileNotFoundError(f"No scale-out config {name!r} in hf_ot: the shipped ones are {names}.")
    return str(path)
