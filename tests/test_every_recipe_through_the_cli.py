"""Every packaged recipe, at toy size on data written here, through every CLI command that takes a recipe:
`hf-ot train`, `hf-ot evaluate` of the saved model (clean and under token noise) for its task, `hf-ot robustness`
and `hf-ot sweep`, with their results read back as JSON. Needs no ../shared/data: each config's data paths are
replaced by small files. (`hf-ot paper` runs two of these configs for hours: its parts are these commands.)"""

import json

import pytest

from hf_ot.cli import main
from hf_ot.recipes.config import load_config, packaged_configs

TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. " * 40
SENTENCES = [("a good film", 1), ("a bad film", 0), ("truly great", 1), ("dull and slow", 0)] * 4
PAIRS = [("ein Hund", "a dog"), ("zwei Katzen", "two cats"), ("ein Haus", "a house")] * 4


def toy_overrides(config: str, tmp_path) -> list[str]:
    """Small data files and a small model for `config`'s task (the model's shape is the config's family)."""
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
        scratch = [
            "model.scratch.n_layer=1",
            "model.scratch.n_embd=16",
            "model.scratch.n_head=2",
            "model.scratch.n_positions=32",
        ]
        return [
            *common,
            *scratch,
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


def sets(items):
    return sum((["--set", s] for s in items), [])


@pytest.mark.parametrize("config", sorted(packaged_configs()))
def test_every_packaged_recipe_trains_and_evaluates_through_the_cli(config, tmp_path, capsys):
    overrides = toy_overrides(config, tmp_path)
    run = tmp_path / "run"
    assert main(["train", config, "--output-dir", str(run), *sets(overrides), "--json"]) == 0
    trained = json.loads(capsys.readouterr().out)
    task = load_config(config).task
    assert ("accuracy" in trained) if task == "sequence-classification" else ("bleu" in trained)

    assert main(["evaluate", str(run / "model"), "--config", config, *sets(overrides), "--noise", "0.5", "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["task"] == task and [r["noise_rate"] for r in evaluated["runs"]] == [0.0, 0.5]
    clean, noisy = evaluated["runs"]
    key = {"causal-lm": "loss", "sequence-classification": "accuracy", "translation": "bleu"}[task]
    assert key in clean and noisy["drop"][key] == pytest.approx(noisy[key] - clean[key])
    if task == "sequence-classification":  # the same sentences as after training, the same model: the same accuracy
        assert clean["accuracy"] == pytest.approx(trained["accuracy"])
    if task == "causal-lm":
        assert clean["loss"] == pytest.approx(trained["loss"], rel=1e-5)

    out = tmp_path / "robustness"
    assert (
        main(
            [
                "robustness",
                "--models",
                f"toy={run / 'model'}",
                "--config",
                config,
                *sets(overrides),
                "--rates",
                "0.5",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    table = json.loads(capsys.readouterr().out)
    assert [r["noise_rate"] for r in table["toy"]] == [0.0, 0.5] and key in table["toy"][1]
    assert (out / "robustness.png").is_file()

    out = tmp_path / "sweep"
    assert (
        main(
            [
                "sweep",
                config,
                "--param",
                "training.learning_rate",
                "--values",
                "0.001",
                *sets(overrides),
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["metric"] == key and list(summary[key]) == ["0.001"]
    assert (out / "sweep.png").is_file() and (out / "curves.png").is_file()


@pytest.mark.slow
def test_paper_runs_its_recipes_noise_test_and_sweeps_through_the_cli(tmp_path, capsys):
    """`hf-ot paper` at toy size: the OT and baseline Shakespeare-char recipes, the noise test on both, the lambda and
    M sweeps, and the markdown report of their tables."""
    (tmp_path / "text.txt").write_text(TEXT)
    tiny = [
        "training.max_steps=2",
        "training.per_device_train_batch_size=2",
        "evaluation.batch_size=2",
        "evaluation.metrics=[bleu]",
        "model.scratch.n_layer=1",
        "model.scratch.n_embd=16",
        "model.scratch.n_head=2",
        "model.scratch.n_positions=32",
        "data.block_size=16",
        "data.max_eval_blocks=4",
        f"data.train_file={tmp_path / 'text.txt'}",
    ]
    out = tmp_path / "paper"
    assert main(["paper", "--seeds", "1", "--out", str(out), *sets(tiny), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["summary"]) == {"ot", "baseline"} and set(report["sweeps"]) == {"lambda", "num_steps"}
    assert [r["noise_rate"] for r in report["robustness"]["ot"]] == [0.0, 0.05, 0.1, 0.2]
    assert "| model | parameters |" in (out / "results.md").read_text()
