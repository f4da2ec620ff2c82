"""Tokenizers of the recipes: char, BPE, MiniLM, Hub ids, and their checks against the model."""

import json

import pytest
from conftest import set_flags, tiny_run
from helpers import _long_source_translation_folder

from hf_ot.cli import main
from hf_ot.errors import UsageError
from hf_ot.recipes import load_config


def test_a_scratch_vocabulary_smaller_than_the_tokenizers_is_named(tmp_path, capsys):
    # the char tokenizer of the quickstart text has ~70 ids; vocab_size=5 trained until the embedding's
    # "IndexError: index out of range in self" traceback, the key nowhere
    flags = set_flags(tiny_run("model.scratch.vocab_size=5", "training.save_strategy=no", max_steps=1))
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "run"), *flags]) in (1, 2)
    err = capsys.readouterr().err
    assert "model.scratch.vocab_size" in err and "IndexError" not in err


# README: "`--json`: only that JSON on stdout". `hf-ot train translation_t5 --json` (a BPE tokenizer trained on the
# data) printed three empty lines before the JSON: the Rust trainer writes its progress to the process's stdout,
# past the CLI's redirect of Python's stdout to stderr.
def test_training_a_bpe_tokenizer_under_json_writes_nothing_on_stdout(capfd):
    import contextlib
    import sys

    from hf_ot.recipes.tokenizer import build_subword_tokenizer

    with contextlib.redirect_stdout(sys.stderr):  # what --json does
        tok = build_subword_tokenizer(["a dog runs", "ein Hund läuft"] * 20, vocab_size=300)
    assert tok.convert_ids_to_tokens(0) == "<pad>"
    assert capfd.readouterr().out == ""


@pytest.mark.parametrize("command", ["evaluate", "calibrate"])
def test_a_saved_tokenizer_without_pad_token_is_named_before_evaluating(tmp_path, command):
    # hf-ot evaluate / calibrate of a translation folder whose tokenizer has no pad token: the data was read and the
    # generation started, then tokenizers' "Asking to pad but the tokenizer does not have a padding token" (naming
    # neither the folder nor the fix); training refuses such a tokenizer before it starts (check_tokenizer_pads)
    from transformers import AutoTokenizer

    from hf_ot.recipes import evaluate

    folder, overrides = _long_source_translation_folder(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.pad_token = None
    tokenizer.save_pretrained(folder)
    run = evaluate.evaluate_folder if command == "evaluate" else evaluate.calibrate_folder
    if command == "calibrate":  # (an OT model: calibrate refuses a plain one first)
        import hf_ot

        hf_ot.save_model(hf_ot.convert(str(folder)), tmp_path / "ot", tokenizer=tokenizer)
        folder = tmp_path / "ot"
    with pytest.raises(ValueError, match=f"tokenizer in {folder} has no pad token"):
        run(str(folder), "translation_bart", overrides)


def test_a_base_whose_tokenizer_outgrows_its_vocabulary_is_named_with_both_sizes(tmp_path, capsys):
    # a GPT-2 of vocab_size 8 saved with a 29-token tokenizer: hf-ot check printed the embedding's IndexError
    # traceback ("index out of range in self"); evaluate / calibrate load such a folder the same way
    from transformers import GPT2Config, GPT2Model

    from hf_ot.recipes.evaluate import load_for_eval
    from hf_ot.recipes.tokenizer import build_char_tokenizer

    base, tok = tmp_path / "base", build_char_tokenizer("abcdefghijklmnopqrstuvwxyz ")
    GPT2Model(GPT2Config(vocab_size=8, n_layer=1, n_embd=16, n_head=2, n_positions=64)).save_pretrained(base)
    tok.save_pretrained(base)
    assert main(["check", str(base)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(base) in err and "resize_token_embeddings" in err
    assert f"{len(tok)} tokens" in err and "vocab_size=8" in err
    with pytest.raises(UsageError, match="vocab_size=8.*resize_token_embeddings"):
        load_for_eval(str(base))
    assert main(["convert", str(base), str(tmp_path / "ot")]) == 2  # (saved, the pair failed in evaluate)
    assert "vocab_size=8" in capsys.readouterr().err and not (tmp_path / "ot").exists()


def test_a_tokenizer_past_the_vocabulary_by_added_tokens_alone_loads_with_a_warning(tmp_path, caplog):
    # a fine-tune's tokenizer with a [PAD] added and the embedding not grown (Llama-2: 32,001 tokens, vocab 32,000):
    # text without that token works, so the folder loads, with the warning naming the token and the fix
    from hf_ot.recipes.tokenizer import build_char_tokenizer
    from hf_ot.tokenizers import load_tokenizer

    tok = build_char_tokenizer("abcdef ")
    size = len(tok)
    tok.add_special_tokens({"additional_special_tokens": ["[EXTRA]"]})
    tok.save_pretrained(tmp_path)
    with caplog.at_level("WARNING", logger="hf_ot"):
        loaded = load_tokenizer(tmp_path, vocab_size=size)
    assert len(loaded) == size + 1 and loaded("abc").input_ids == tok("abc").input_ids
    assert "[EXTRA]" in caplog.text and f"vocab_size={size}" in caplog.text and "resize_token_embeddings" in caplog.text


def test_evaluating_a_character_lm_on_characters_it_never_saw_warns_with_their_count(tmp_path, recwarn):
    # hf-ot evaluate of a char-level model on text with characters its tokenizer lacks: each became <unk> and the
    # perplexity (of <unk> predictions) looked fine
    from hf_ot.recipes.evaluate import lm_eval_dataset
    from hf_ot.recipes.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer("abc de\n")
    known, unseen = tmp_path / "known.txt", tmp_path / "unseen.txt"
    known.write_text("abc de\n" * 20)
    unseen.write_text("abc d\u00e9\n" * 10 + "xbc de\n" * 10)  # 10 times \u00e9 and 10 times x: 20 characters
    for text in (known, unseen):
        cfg = load_config("quickstart", [f"data.train_file={text}", f"data.validation_file={text}"])
        lm_eval_dataset(cfg, tok, block_size=8)
        messages = [str(w.message) for w in recwarn if "<unk>" in str(w.message)]
        assert len(messages) == (text == unseen)
    assert "20 characters" in messages[0] and "'x'" in messages[0] and "'\u00e9'" in messages[0]


@pytest.mark.usefixtures("in_repo")
@pytest.mark.parametrize(
    "tokenizer_files",
    [
        ["tokenizer.model"],
        ["source.spm", "target.spm", "vocab.json"],
        ["spiece.model"],
        ["vocab.txt"],
        ["vocab.json", "merges.txt"],
    ],
)
def test_overwrite_accepts_every_tokenizer_file_layout(tmp_path, tokenizer_files):
    """Llama (tokenizer.model), Marian (*.spm), T5, BERT and GPT-2 tokenizers save these files: an hf_ot model folder
    holding them (listed in its save's manifest) is still one hf_ot wrote; without the manifest it is not."""
    from hf_ot.run_folders import MANIFEST, check_replaceable_model_folder, write_manifest

    folder = tmp_path / "ot"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "ot_gpt2"}))
    (folder / "model.safetensors").write_bytes(b"")
    for name in tokenizer_files:
        (folder / name).write_text("x")
    with pytest.raises(ValueError, match=MANIFEST):
        check_replaceable_model_folder(folder, overwrite=True)
    write_manifest(folder)
    check_replaceable_model_folder(folder, overwrite=True)
    with pytest.raises(ValueError, match="--overwrite"):
        check_replaceable_model_folder(folder, overwrite=False)
