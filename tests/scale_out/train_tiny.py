"""A few OTTrainer steps on a tiny OT GPT-2 with fixed data; prints the logged losses as JSON on the main process.
Run on one process, or under torchrun / accelerate launch (tests/test_scale_out.py): the losses must agree.

    python train_tiny.py OUT [--fsdp | --deepspeed CONFIG]
      --fsdp: FSDP through TrainingArguments, hf_ot.scale_out's wrap policy
      --deepspeed CONFIG: DeepSpeed through TrainingArguments (recipes/scale_out/ds_zero2.json, ds_zero3.json)
"""

import json
import sys

import torch
from datasets import Dataset
from transformers import GPT2Config, GPT2LMHeadModel

import hf_ot
from hf_ot.scale_out import fsdp_arguments

out, options = sys.argv[1], sys.argv[2:]
torch.manual_seed(0)
base = GPT2LMHeadModel(
    GPT2Config(
        vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
)
model = hf_ot.convert(base, ot_num_steps=2, ot_solver="heun", ot_lambda=0.5)
ids = torch.randint(0, 64, (16, 12), generator=torch.Generator().manual_seed(1))
data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
extra = fsdp_arguments(model) if "--fsdp" in options else {}
if "--deepspeed" in options:
    extra = {"deepspeed": options[options.index("--deepspeed") + 1]}
args = hf_ot.OTTrainingArguments(
    output_dir=out,
    max_steps=4,
    per_device_train_batch_size=8 // int(__import__("os").environ.get("WORLD_SIZE", 1)),
    learning_rate=1e-2,
    logging_steps=1,
    report_to="none",
    use_cpu=True,
    save_strategy="no",
    disable_tqdm=True,
    seed=0,
    data_seed=0,
    ddp_find_unused_parameters=False,
    **extra,
)
trainer = hf_ot.OTTrainer(model=model, args=args, train_dataset=data)
trainer.train()
engine = (
    "fsdp"
    if trainer.is_fsdp_enabled
    else "deepspeed"
    if trainer.is_deepspeed_enabled
    else "ddp"
    if args.world_size > 1
    else "single"
)
if trainer.is_world_process_zero():
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    regs = [h["reg"] for h in trainer.state.log_history if "reg" in h]
    print("RESULT" + json.dumps({"engine": engine, "world_size": args.world_size, "losses": losses, "regs": regs}))
trainer.accelerator.end_training()
