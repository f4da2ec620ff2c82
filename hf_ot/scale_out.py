"""Scale-out settings for OT models: FSDP's wrap policy is the family's block class, the class of the blocks in the
model's depth flows (what the solver applies M x stages times), so each block is one FSDP unit."""

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
    auto wrap by the family's block class."""
    return {
        "fsdp": f"{shard} auto_wrap",
        "fsdp_config": {
            "version": version,
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "transformer_layer_cls_to_wrap": block_class_names(model),
            "reshard_after_forward": True,
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
    only for accelerator devices (GPU, XPU, NPU, HPU...); its CPU multi-process mode is DDP, and it used to run that
    silently when FSDP was asked for."""
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
            "DeepSpeed was asked for but accelerate did not enable it (is the deepspeed package "
            "installed, and are the processes on accelerator devices?)."
        )


CPU_REASON = (
    "accelerate enables FSDP and DeepSpeed only on accelerator devices (CUDA, XPU, NPU, HPU), not on CPU. On CPU, "
    "drop the setting (multi-process CPU training is DDP: torchrun --nproc_per_node N, or accelerate launch "
    "--multi_gpu with use_cpu); on GPUs, launch with one process per GPU."
)


def check_engine_before_running(args: Any) -> None:
    """Before any data is prepared: FSDP / DeepSpeed asked for on a CPU run is refused with the reason."""
    from .errors import UsageError

    engine = requested_engine(args)
    if engine is not None and str(args.device).startswith("cpu"):
        what = "FSDP" if engine == "fsdp" else "DeepSpeed"
        raise UsageError(f"{what} was asked for on a CPU run: {CPU_REASON}")


def check_engine_settings(training: dict[str, Any]) -> None:
    """A recipe's `training` section, before TrainingArguments is built: DeepSpeed needs its package."""
    import importlib.util

    from .errors import UsageError

    if training.get("deepspeed") and importlib.util.find_spec("deepspeed") is None:
        raise UsageError(
            "training.deepspeed needs the deepspeed package (pip install deepspeed; it runs on GPUs): "
            f"it is not installed here. {CPU_REASON}"
        )
