"""Scale-out through the engines users run, on CPU: DDP through torchrun, an accelerate config file and a two-"node"
torchrun launch (both nodes on 127.0.0.1, c10d rendezvous on a local port) give the losses of one process; so do
DeepSpeed ZeRO-2 and ZeRO-3 with 2 processes (gloo; skipped where deepspeed is not installed); FSDP asked for on CPU
(TrainingArguments, accelerate config file) stops with the reason instead of running DDP silently; the FSDP wrap
policy is the family's block class; the scale-out configs ship in the wheel."""

import importlib.util
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from conftest import make_base
from helpers import free_port, launcher_env, torchrun_two_processes

import hf_ot
from hf_ot.scale_out import block_class_names, fsdp_arguments

HERE = Path(__file__).parent
SCRIPT = str(HERE / "scale_out" / "train_tiny.py")
CONFIGS = HERE.parent / "recipes" / "scale_out"
BIN = Path(sys.executable).parent


def _result(proc) -> dict:
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(line[len("RESULT") :])


def _run(cmd, tmp_path, **kw):
    return subprocess.run(cmd, cwd=tmp_path, env=launcher_env(), capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one")
    return _result(_run([sys.executable, SCRIPT, str(tmp / "out")], tmp))


def _same(result, reference, engine="ddp"):
    assert result["world_size"] == 2 and result["engine"] == engine
    assert result["losses"] == pytest.approx(reference["losses"], abs=1e-5)
    assert result["regs"] == pytest.approx(reference["regs"], abs=1e-5)


@pytest.mark.slow
def test_accelerate_config_file_two_processes_equal_one(one_process, tmp_path):
    config = CONFIGS / "accelerate_two_processes.yaml"
    cmd = [
        str(BIN / "accelerate"),
        "launch",
        "--config_file",
        str(config),
        "--main_process_port",
        str(free_port()),
        SCRIPT,
        str(tmp_path / "out"),
    ]
    _same(_result(_run(cmd, tmp_path)), one_process)


@pytest.mark.slow
def test_two_node_torchrun_on_localhost_equals_one_process(one_process, tmp_path):
    port = free_port()
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
        env=launcher_env(),
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


@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason='deepspeed is not installed: pip install --no-build-isolation "hf-ot[deepspeed]"',
)
@pytest.mark.parametrize("config", ["ds_zero2.json", "ds_zero3.json"])
def test_deepspeed_two_processes_on_cpu_equal_one(one_process, tmp_path, config):
    cmd = [*torchrun_two_processes(SCRIPT, tmp_path / "out"), "--deepspeed", str(CONFIGS / config)]
    _same(_result(_run(cmd, tmp_path)), one_process, engine="deepspeed")


@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason='deepspeed is not installed: pip install --no-build-isolation "hf-ot[deepspeed]"',
)
def test_deepspeed_in_one_process_without_a_launcher_trains(one_process, tmp_path):
    """`python script.py` with DeepSpeed: OTTrainer starts the one-process group (DeepSpeed alone looks for MPI)."""
    proc = _run(
        [sys.executable, SCRIPT, str(tmp_path / "out"), "--deepspeed", str(CONFIGS / "ds_zero2.json")], tmp_path
    )
    result = _result(proc)
    assert result["engine"] == "deepspeed" and result["world_size"] == 1
    assert result["losses"] == pytest.approx(one_process["losses"], abs=1e-5)


@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason='deepspeed is not installed: pip install --no-build-isolation "hf-ot[deepspeed]"',
)
def test_a_recipe_with_deepspeed_trains_evaluates_and_saves_on_cpu(tmp_path):
    """`hf-ot train --set training.deepspeed=ds_zero2.json` on CPU: training, the teacher-forced evaluation (the
    engine owns the model, so only the data is prepared) and the saved model, which loads; a second run with
    --overwrite replaces the DeepSpeed checkpoints (global_step*, latest, zero_to_*.py are the trainer's files)."""
    from conftest import TINY_RUN, set_flags

    out = tmp_path / "run"
    settings = ["training.max_steps=3", *TINY_RUN, f"training.deepspeed={CONFIGS / 'ds_zero2.json'}"]

    def train(*extra: str) -> subprocess.CompletedProcess:
        command = [str(BIN / "hf-ot"), "train", "quickstart", "--output-dir", str(out), *set_flags(settings), *extra]
        return subprocess.run(command, capture_output=True, text=True, env=launcher_env(), cwd=tmp_path, timeout=600)

    proc = train("--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    assert result["perplexity"] == pytest.approx(math.exp(result["loss"]), rel=1e-6)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out / "model")
    ids = torch.randint(0, model.config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(model(ids, labels=ids).loss)
    assert (out / "trainer" / "hf_ot_run.json").exists()  # the resume record of a checkpointing run
    again = train("--overwrite")
    assert again.returncode == 0, again.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["training_arguments", "accelerate_config"])
def test_fsdp_on_cpu_fails_with_the_reason_instead_of_running_ddp(tmp_path, how):
    if how == "training_arguments":
        cmd = [*torchrun_two_processes(SCRIPT, tmp_path / "out"), "--fsdp"]
    else:
        cmd = [
            str(BIN / "accelerate"),
            "launch",
            "--config_file",
            str(CONFIGS / "accelerate_fsdp.yaml"),
            "--mixed_precision",
            "no",
            "--main_process_port",
            str(free_port()),
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
    assert args["fsdp"] is True and args["fsdp_config"]["transformer_layer_cls_to_wrap"] == blocks
    import logging

    from transformers import TrainingArguments

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no deprecation (transformers 5.24 flags fsdp="full_shard auto_wrap")
            plugin = TrainingArguments(output_dir="unused", use_cpu=True, **args).fsdp_plugin_args
    finally:
        logger.removeHandler(handler)
    assert not [r.getMessage() for r in records if "deprecated" in r.getMessage()]
    assert plugin["fsdp_version"] == 2 and plugin["transformer_cls_names_to_wrap"] == ",".join(blocks)
    assert plugin["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP" and plugin["reshard_after_forward"] is True
    assert fsdp_arguments(model, shard="shard_grad_op")["fsdp_config"]["reshard_after_forward"] is False


@pytest.mark.parametrize(
    "setting", ["training.fsdp=full_shard auto_wrap", f"training.deepspeed={CONFIGS / 'ds_zero2.json'}"]
)
def test_recipe_refuses_fsdp_on_cpu_and_deepspeed_without_its_package_before_any_data_is_read(
    tmp_path, capsys, setting
):
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
    if setting.startswith("training.deepspeed") and importlib.util.find_spec("deepspeed") is not None:
        # DeepSpeed runs on CPU: not refused, the run goes on to read its data (missing here)
        assert code != 0 and "no-such-file" in err and "was asked for" not in err, err
        return
    assert code == 2 and "no-such-file" not in err, err
    if setting.startswith("training.fsdp"):
        assert "FSDP was asked for on a CPU run" in err, err
    else:
        assert "needs the deepspeed package" in err and "--no-build-isolation" in err, err


@pytest.mark.slow
def test_the_scale_out_configs_ship_in_the_wheel_and_are_found_from_it(wheel, tmp_path):
    """A regular (non-editable) install carries recipes/scale_out/* as hf_ot.scale_out_configs, and
    hf_ot.scale_out.config_file finds them there."""
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(p.name for p in CONFIGS.iterdir() if p.suffix in (".json", ".yaml"))
    assert shipped and all(f"hf_ot/scale_out_configs/{name}" in names for name in shipped)
    site = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)]
    assert subprocess.run(install, capture_output=True, timeout=300).returncode == 0
    code = "import hf_ot; print('PATH' + hf_ot.scale_out.config_file('ds_zero3.json'))"
    env = {**launcher_env(), "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PATH")), None)
    assert line is not None, proc.stderr[-2000:]
    assert Path(line[4:]).resolve() == (site / "hf_ot" / "scale_out_configs" / "ds_zero3.json").resolve()
