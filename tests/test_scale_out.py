"""Scale-out through the engines users run, on CPU: DDP through torchrun, an accelerate config file and a two-"node"
torchrun launch (both nodes on 127.0.0.1, c10d rendezvous on a local port) give the losses of one process; FSDP asked
for on CPU (TrainingArguments, accelerate config file) stops with the reason instead of running DDP silently; the FSDP
wrap policy is the family's block class."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_base

import hf_ot
from hf_ot.scale_out import block_class_names, fsdp_arguments

HERE = Path(__file__).parent
SCRIPT = str(HERE / "scale_out" / "train_tiny.py")
CONFIGS = HERE.parent / "recipes" / "scale_out"
BIN = Path(sys.executable).parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "RANK", "WORLD_SIZE", "LOCAL_"))}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    return env


def _result(proc) -> dict:
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(line[len("RESULT") :])


def _run(cmd, tmp_path, **kw):
    return subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one")
    return _result(_run([sys.executable, SCRIPT, str(tmp / "out")], tmp))


def _same(result, reference):
    assert result["world_size"] == 2 and result["engine"] == "ddp"
    assert result["losses"] == pytest.approx(reference["losses"], abs=1e-5)
    assert result["regs"] == pytest.approx(reference["regs"], abs=1e-5)


def test_accelerate_config_file_two_processes_equal_one(one_process, tmp_path):
    config = CONFIGS / "accelerate_two_processes.yaml"
    cmd = [
        str(BIN / "accelerate"),
        "launch",
        "--config_file",
        str(config),
        "--main_process_port",
        str(_port()),
        SCRIPT,
        str(tmp_path / "out"),
    ]
    _same(_result(_run(cmd, tmp_path)), one_process)


def test_two_node_torchrun_on_localhost_equals_one_process(one_process, tmp_path):
    port = _port()
    node = [
        str(BIN / "torchrun"),
        "--nnodes",
        "2",
        "--nproc_per_node",
        "1",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        f"127.0.0.1:{port}",
        "--rdzv_id",
        "hf-ot-test",
    ]
    other = subprocess.Popen(
        [*node, SCRIPT, str(tmp_path / "node1")],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        proc = _run([*node, SCRIPT, str(tmp_path / "node0")], tmp_path)
        other_out, other_err = other.communicate(timeout=300)
    finally:
        other.kill()
    results = [ln for ln in (proc.stdout + other_out).splitlines() if ln.startswith("RESULT")]
    assert len(results) == 1, proc.stderr[-3000:] + other_err[-3000:]  # printed by global rank 0 only
    _same(json.loads(results[0][len("RESULT") :]), one_process)


@pytest.mark.parametrize("how", ["training_arguments", "accelerate_config"])
def test_fsdp_on_cpu_fails_with_the_reason_instead_of_running_ddp(tmp_path, how):
    if how == "training_arguments":
        cmd = [
            str(BIN / "torchrun"),
            "--nproc_per_node",
            "2",
            "--master_port",
            str(_port()),
            SCRIPT,
            str(tmp_path / "out"),
            "--fsdp",
        ]
    else:
        cmd = [
            str(BIN / "accelerate"),
            "launch",
            "--config_file",
            str(CONFIGS / "accelerate_fsdp.yaml"),
            "--mixed_precision",
            "no",
            "--main_process_port",
            str(_port()),
            SCRIPT,
            str(tmp_path / "out"),
        ]
    proc = _run(cmd, tmp_path)
    assert proc.returncode != 0 and "RESULT" not in proc.stdout
    assert "FSDP was asked for" in proc.stderr and "not on CPU" in proc.stderr


@pytest.mark.parametrize(
    "family,class_name,blocks",
    [
        ("gpt2", "GPT2LMHeadModel", ["GPT2Block"]),
        ("t5", "T5ForConditionalGeneration", ["T5Block"]),
        ("llama", "LlamaForCausalLM", ["LlamaDecoderLayer"]),
    ],
)
def test_fsdp_wrap_policy_is_the_familys_block_class(family, class_name, blocks):
    model = hf_ot.convert(make_base(family, class_name))
    assert block_class_names(model) == blocks
    args = fsdp_arguments(model)
    assert args["fsdp"] == "full_shard auto_wrap" and args["fsdp_config"]["transformer_layer_cls_to_wrap"] == blocks
    from transformers import TrainingArguments

    plugin = TrainingArguments(output_dir="unused", use_cpu=True, **args).fsdp_plugin_args
    assert plugin["fsdp_version"] == 2 and plugin["transformer_cls_names_to_wrap"] == ",".join(blocks)


@pytest.mark.parametrize(
    "setting", ["training.fsdp=full_shard auto_wrap", f"training.deepspeed={CONFIGS / 'ds_zero2.json'}"]
)
def test_recipe_refuses_fsdp_or_deepspeed_on_cpu_before_any_data_is_read(tmp_path, capsys, setting):
    from hf_ot.cli import main

    missing = tmp_path / "no-such-file.txt"
    code = main(
        [
            "train",
            "quickstart",
            "--output-dir",
            str(tmp_path / "run"),
            "--set",
            setting,
            "--set",
            "data.source=file",
            "--set",
            f"data.train_file={missing}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "no-such-file" not in err, err
    assert "was asked for on a CPU run" in err or "needs the deepspeed package" in err, err
