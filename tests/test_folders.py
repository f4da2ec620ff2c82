"""hf_ot.run_folders and hf_ot.checkpoints: JSON from folders hf_ot does not own is read bounded (size, depth,
regular files only), a command that reads a saved folder reads one save, and a save that a kill cut between its two
renames (no atomic exchange) is named with the command that puts the earlier model back."""

from __future__ import annotations

import json
import tracemalloc

import pytest
import torch
from conftest import make_base

import hf_ot
from hf_ot.checkpoints import CheckpointError, read_json
from hf_ot.cli import main
from hf_ot.hub import save_model

DEEP = "[" * 100_000 + "]" * 100_000


def test_read_json_refuses_a_large_file_before_reading_it(tmp_path):
    big = tmp_path / "results.json"
    with open(big, "wb") as f:
        f.truncate(600 << 20)  # sparse: 600 MB of zeros on no disk
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=r"results.json is 629,145,600 bytes"):
            read_json(big)
        assert tracemalloc.get_traced_memory()[1] < 10 << 20  # nothing of it was read
    finally:
        tracemalloc.stop()


def test_read_json_refuses_a_device(tmp_path):
    with pytest.raises(CheckpointError, match=r"/dev/zero is not a regular file"):
        read_json("/dev/zero")


def test_result_file_naming_a_large_file_is_refused_without_reading_it(tmp_path, capsys):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(600 << 20)
    tracemalloc.start()
    try:
        assert main(["env", "--result-file", str(big)]) == 2
        assert tracemalloc.get_traced_memory()[1] < 50 << 20
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert "big.json" in err and "bytes" in err and "Traceback" not in err
    assert big.stat().st_size == 600 << 20  # untouched


@pytest.mark.parametrize("name", ["generation_config.json", "hf_ot_manifest.json", "config.json"])
def test_deeply_nested_json_in_a_model_folder_is_named_with_the_fix(tmp_path, capsys, name):
    folder = save_model(hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2), tmp_path / "ot")
    (folder / name).write_text(DEEP if name != "config.json" else '{"a": ' + DEEP + "}")
    assert main(["check", str(folder)]) == 2
    err = capsys.readouterr().err
    assert name in err and "deep" in err and "Traceback" not in err and "RecursionError" not in err
    with pytest.raises(CheckpointError, match=rf"{name} nests values more than \d+ deep"):
        read_json(folder / name)


def word_tokenizer(words):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[UNK]", "[PAD]", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


def test_evaluate_reads_one_save_while_another_save_replaces_the_folder(tmp_path, monkeypatch):
    """A save replacing the folder between the tokenizer's read and the weights' (another process's `convert
    --overwrite`, here a hook): the evaluation gets the earlier save whole or the new one whole, never a mix."""
    import hf_ot.tokenizers
    from hf_ot.recipes.evaluate import load_for_eval

    folder = tmp_path / "ot"
    old = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel", seed=0), num_steps=2)
    new = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel", seed=1), num_steps=3)
    save_model(old, folder, tokenizer=word_tokenizer(["old", "words"]))
    real, replaced = hf_ot.tokenizers.load_tokenizer, []

    def load_tokenizer(*args, **kwargs):
        tokenizer = real(*args, **kwargs)
        if not replaced:  # the tokenizer of the earlier save read; now the folder is replaced
            replaced.append(save_model(new, folder, tokenizer=word_tokenizer(["new", "text"]), overwrite=True))
        return tokenizer

    monkeypatch.setattr(hf_ot.tokenizers, "load_tokenizer", load_tokenizer)
    model, tokenizer = load_for_eval(str(folder), task="causal-lm")
    assert replaced
    weights = model.transformer.wte.weight
    is_new = torch.equal(weights, new.transformer.wte.weight)
    assert is_new or torch.equal(weights, old.transformer.wte.weight)
    assert ("new" in tokenizer.get_vocab()) == is_new, "the tokenizer of one save with the weights of another"
    assert model.config.ot_num_steps == (3 if is_new else 2)


def test_a_save_killed_between_two_renames_is_named_with_the_mv_that_restores_it(tmp_path, monkeypatch, capsys):
    """Without an atomic exchange the swap is two renames: a kill between them leaves no folder at the name. hf_ot
    does not repair it behind the user's back: every command finding it missing prints the one mv that restores it,
    and deletes nothing."""
    import hf_ot.run_folders as run_folders

    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(tmp_path / "base")
    folder = save_model(hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=2), tmp_path / "ot")
    earlier = json.loads((folder / "hf_ot_manifest.json").read_text())["save_id"]
    monkeypatch.setattr(run_folders, "exchange", lambda a, b: False)
    real_rename = run_folders.Path.rename

    def rename(self, target):
        out = real_rename(self, target)
        if ".old-" in str(target):
            raise KeyboardInterrupt  # the process dies here (its finally blocks aside)
        return out

    monkeypatch.setattr(run_folders.Path, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        save_model(hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), num_steps=3), folder, overwrite=True)
    monkeypatch.undo()
    assert not folder.exists()
    (aside,) = [p for p in tmp_path.iterdir() if ".old-" in p.name]
    restore = f"mv {aside} {folder}"
    assert main(["check", str(folder)]) == 2  # a command that reads it
    assert restore in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "base"), str(folder), "--overwrite"]) == 2  # a command that writes there
    assert restore in capsys.readouterr().err
    assert aside.is_dir() and json.loads((aside / "hf_ot_manifest.json").read_text())["save_id"] == earlier
