"""Tiny random base models of every family and head, saved and converted through the real loading path."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

# Remote-code modules go to a throwaway folder, not the user's cache (read when transformers is imported); one per
# pytest-xdist worker, which would otherwise inherit the controller's and write the same module files at once.
os.environ["HF_MODULES_CACHE"] = (
    os.environ["HF_MODULES_CACHE"]
    if "HF_MODULES_CACHE" in os.environ and not os.environ.get("PYTEST_XDIST_WORKER")
    else tempfile.mkdtemp(prefix="hf_ot_modules_")
)

import json

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import hf_ot  # noqa: E402
from hf_ot.cli import main
from hf_ot.hub import save_model
from hf_ot.models.ot_model import base_class_of  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers.logging.set_verbosity_error()

# Under pytest-xdist (`-n auto`) every worker is a process of its own, and torch's default of one thread per core in
# each would run workers x cores threads on the cores: oversubscribed, slower than one process. One thread per worker
# (the CLI's in-process runs and the subprocesses tests start read OMP_NUM_THREADS too).
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

VOCAB = 99
PAD, BOS, EOS = 0, 1, 2


def base_config(family: str, **overrides):
    common = dict(vocab_size=VOCAB, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
    if family in TINY_CONFIGS:
        cfg = TINY_CONFIGS[family](**common)
    else:
        cfg = generic_tiny_config(family, **common)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


# (family, transformers class name) for every head the project supports: derived from the family table, so a new
# family (one file in hf_ot/models) joins every test.
HEADS = [
    (family, base_class_of(cls).__name__) for family, row in hf_ot.models.FAMILIES.items() for cls in row.model_classes
]


# Tiny configs, defined once: one file per kind (tests/tiny_decoders.py, tiny_encoders.py, tiny_seq2seq.py:
# CONFIGS = {family: factory(**common)}), with each family's own features (grouped-query attention, sliding windows,
# ...). A family without one gets `generic_tiny_config`.
TINY_CONFIGS = {}
for _kind in ("tiny_decoders", "tiny_encoders", "tiny_seq2seq"):
    TINY_CONFIGS.update(__import__(_kind).CONFIGS)

_TINY_SIZES = dict(
    num_hidden_layers=2,
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    encoder_layers=2,
    decoder_layers=2,
    num_layers=2,
    num_decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=37,
    decoder_ffn_dim=37,
    d_model=32,
    d_ff=37,
    num_heads=4,
    d_kv=8,
    head_dim=8,
)


def generic_tiny_config(family: str, **common):
    """The family's default config shrunk to 2 layers, width 32, 4 heads, no dropout."""
    cfg = base_class_of(hf_ot.models.FAMILIES[family].config_class)(**common)
    for key, value in _TINY_SIZES.items():
        if hasattr(cfg, key):
            setattr(cfg, key, value)
    for key in list(vars(cfg)):
        if "dropout" in key or key.endswith("_pdrop"):
            if isinstance(getattr(cfg, key), float):
                setattr(cfg, key, 0.0)
    if getattr(cfg, "layer_types", None) is not None:
        cfg.layer_types = list(cfg.layer_types[:2])
    return cfg


def is_encoder_decoder(family: str) -> bool:
    return bool(base_config(family).is_encoder_decoder)


# Heads by kind, for the information contracts and the cache / generation tests of every family
DECODER_LM_HEADS = [
    (f, c) for f, c in HEADS if c.endswith(("LMHeadModel", "ForCausalLM")) and not is_encoder_decoder(f)
]
ENCODER_MLM_HEADS = [(f, c) for f, c in HEADS if c.endswith("ForMaskedLM") and not is_encoder_decoder(f)]
SEQ2SEQ_LM_HEADS = [(f, c) for f, c in HEADS if c.endswith(("ForConditionalGeneration", "MTModel"))]


def make_base(family: str, class_name: str, seed: int = 0, attn_implementation=None, **overrides):
    torch.manual_seed(seed)
    cfg = base_config(family, **overrides)
    cls = getattr(transformers, class_name)
    if attn_implementation is None:
        return cls(cfg).eval()
    return cls._from_config(cfg, attn_implementation=attn_implementation).eval()


def make_inputs(family: str, batch: int = 3, src_len: int = 9, tgt_len: int = 6, pad_last: int = 0, seed: int = 1):
    """Token ids in [4, VOCAB) with EOS closing every row (BART classification pools at EOS).

    pad_last > 0 right-pads the first row's last positions; the attention mask marks them.
    """
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, VOCAB, (batch, src_len), generator=g)
    mask = torch.ones_like(ids)
    ids[:, -1] = EOS
    if pad_last:
        ids[0, src_len - pad_last - 1] = EOS
        ids[0, src_len - pad_last :] = PAD
        mask[0, src_len - pad_last :] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if is_encoder_decoder(family):
        inputs["decoder_input_ids"] = torch.randint(4, VOCAB, (batch, tgt_len), generator=g)
    return inputs


def inputs_for(family: str, class_name: str, **kwargs):
    """make_inputs for one head: encoder-only heads of encoder-decoder families and their sequence classifiers (which
    shift decoder inputs from input_ids) take no decoder_input_ids."""
    inputs = make_inputs(family, **kwargs)
    if class_name.endswith(("EncoderModel", "ForSequenceClassification")):
        inputs.pop("decoder_input_ids", None)
    return inputs


def main_output(out):
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


@pytest.fixture
def converted(tmp_path):
    """convert(...) from a saved base checkpoint folder: the path users take."""

    def build(family, class_name, seed=0, base_overrides=None, **ot):
        base = make_base(family, class_name, seed=seed, **(base_overrides or {}))
        path = tmp_path / f"{family}-{class_name}-base"
        base.save_pretrained(path)
        model = hf_ot.convert(str(path), **ot).eval()
        return base, model

    return build


# ------------------------------------------------------------------------------------------- tiny recipe runs

REPO = Path(hf_ot.__file__).resolve().parents[1]

# The smallest quickstart run (one layer of width 16, 16-token blocks, one OT step, no text metrics): seconds on a CPU,
# for tests of what a run writes, locks and resumes rather than of what it learns.
TINY_RUN = [
    "training.per_device_train_batch_size=2",
    "data.block_size=16",
    "data.max_eval_blocks=2",
    "model.scratch.n_embd=16",
    "model.scratch.n_layer=1",
    "model.scratch.n_positions=16",
    "model.ot.ot_num_steps=1",
    "evaluation.metrics=[]",
]

# A larger tiny quickstart run (width 32, 3 logged steps, two OT steps), for tests that read its log or metrics.
TINY_LM = [
    "training.max_steps=3",
    "training.logging_steps=1",
    "training.per_device_train_batch_size=4",
    "data.block_size=32",
    "data.max_eval_blocks=8",
    "model.scratch.n_embd=32",
    "model.scratch.n_layer=1",
    "model.scratch.n_positions=32",
    "model.ot.ot_num_steps=2",
]


def tiny_run(*extra: str, max_steps: int | None = 2) -> list[str]:
    """TINY_RUN's overrides for `max_steps` steps (None: the recipe's own), then `extra`."""
    steps = [] if max_steps is None else [f"training.max_steps={max_steps}"]
    return [*steps, *TINY_RUN, *extra]


def set_flags(settings: list[str]) -> list[str]:
    """The CLI's `--set KEY=VALUE` arguments for recipe overrides."""
    return [arg for setting in settings for arg in ("--set", setting)]


def snapshot(folder: Path) -> dict:
    """Every file under folder with the hash of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def in_repo(monkeypatch):
    """Run from the repository root, as from a checkout: relative paths (recipes/configs/..., data/...) resolve."""
    monkeypatch.chdir(REPO)


@contextlib.contextmanager
def held_by_another_process(folder: Path):
    """`folder` locked (FolderLock) by another live Python process for the block; yields that process's pid."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(hf_ot.__file__).parents[1])}
    hold = "from hf_ot.run_folders import FolderLock; import sys; held = FolderLock(sys.argv[1]).acquire(); print(1); "
    hold += "input()"
    holder = subprocess.Popen([sys.executable, "-c", hold, str(folder)], stdin=-1, stdout=-1, env=env)
    try:
        assert holder.stdout.readline().strip() == b"1"
        yield holder.pid
    finally:
        holder.communicate(b"\n", timeout=30)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A plain GPT-2 checkpoint on disk (root/plain) and token ids: helpers._converted makes it OT at M = 3 with Heun,
    helpers._adapter gives it a non-trivial LoRA adapter."""
    root = tmp_path_factory.mktemp("adapters")
    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(root / "plain")  # the checkpoint converted from
    ids = torch.randint(4, 99, (2, 7), generator=torch.Generator().manual_seed(0))
    return root, ids


@pytest.fixture
def fresh_dynamo():
    """torch.compile's caches emptied before and after the test: graph counts start from zero."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def built_once(tmp_path_factory, name: str, build) -> Path:
    """The folder `name` that `build(folder)` fills, built once per session: under pytest-xdist once for all of the
    run's workers (their base folders share a parent; a lock makes the others wait for the first). Tests read it or
    copy it, never change it."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if XDIST_WORKER:
        root = root.parent
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed build in another worker left
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built once per session (pip wheel, no dependencies, no build isolation). pip builds in the
    source tree, so two builds at once would write over each other's build/ folder: one for all xdist workers."""
    import subprocess
    import sys

    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")

    def build(folder: Path) -> None:
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w"]
        proc = subprocess.run([*command, str(folder), str(REPO)], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]

    return next(built_once(tmp_path_factory, "wheel", build).glob("hf_ot-*.whl"))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny quickstart run: 16-token blocks on a model of 16 positions (the recipe's block size is longer)."""
    out = tmp_path_factory.mktemp("errors") / "run"
    assert (
        main(["train", "quickstart", "--output-dir", str(out), *set_flags(tiny_run("training.save_strategy=no"))]) == 0
    )
    assert json.loads((out / "results.json").read_text())["block_size"] == 16
    return out


@pytest.fixture
def ot_folder(tmp_path):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=4, ot_solver="rk4", ot_lambda=0.5)
    model.config.ot_reg_in_loss = True
    return save_model(model, tmp_path / "ot4")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the marks (it names the groups in this hook)
def pytest_collection_modifyitems(items):
    """Tests that share a module- or class-scoped fixture (a trained tiny run, a launch) run on one xdist worker
    (`--dist loadgroup`), so it is built once, not once per worker; every other test is balanced on its own."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        if any(defs and defs[-1].scope in ("module", "class") for defs in info.name2fixturedefs.values()):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
