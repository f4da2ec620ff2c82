"""Model cards: what hf_ot writes into README.md, and the bounds on the card metadata it reads."""

import pytest
from conftest import make_base
from helpers import LANGUAGES, results_rows
from huggingface_hub import EvalResult

import hf_ot
from hf_ot.cards import render_model_card
from hf_ot.recipes.config import load_config

URL_SECRETS = {  # a data spec -> its secret: a URL's password, an S3 secret key holding '/', a query token
    "https://alice:Pa55word1@host/x.csv": "Pa55word1",
    "s3://AKIAKEY:se/cr3t+Part@bucket/x.csv": "se/cr3t+Part",
    "https://host/x.csv?token=qu3ryT0ken": "qu3ryT0ken",
}


def test_the_card_names_validation_line_files_as_it_names_a_validation_file():
    # translation_t5 with data.validation_source/target (the user's own validation pairs): the model-index's metrics
    # (split: validation) were said to be on 'train.de.gz, train.en.gz', the recipe's training files, and the files
    # they were computed on were named nowhere; data.validation_file is named (sst2_minilm: 'train.tsv, mine.tsv')
    from hf_ot.recipes.run import card_data

    cfg = load_config("translation_t5", ["data.validation_source=val.de", "data.validation_target=val.en"])
    name = card_data(cfg)["name"]
    assert "val.de" in name and "val.en" in name, name


@pytest.mark.parametrize("recipe", sorted(LANGUAGES))
def test_packaged_recipes_cards_name_their_languages(recipe):
    # hf-ot train translation_t5, then hf-ot push RUN/model user/repo --dry-run: the card's metadata had no
    # `language` (the Hub's language filter and a translation model's de -> en); a user's own data drops the
    # recipe's languages with its dataset fields (card.language names the new data's)
    assert load_config(recipe).card.language == LANGUAGES[recipe]
    assert load_config(recipe, ["data.train_file=mine.csv"]).card.language is None
    assert load_config(recipe, ["data.train_file=mine.csv", "card.language=fr"]).card.language == "fr"


def test_the_card_names_line_files_before_their_validation_file(tmp_path):
    # hf-ot train translation_t5 --set data.train_source=tr.de --set data.train_target=tr.en --set
    # data.validation_file=trval.jsonl: the card and results.json named "trval.jsonl, tr.de, tr.en"
    from hf_ot.recipes.run import card_data

    keys = [f"data.train_source={tmp_path / 'tr.de'}", f"data.train_target={tmp_path / 'tr.en'}"]
    cfg = load_config("translation_t5", [*keys, f"data.validation_file={tmp_path / 'trval.jsonl'}"])
    assert card_data(cfg)["name"] == "tr.de, tr.en, trval.jsonl"


@pytest.mark.parametrize(
    "family, head, name",
    [("llama", "LlamaForCausalLM", "Llama"), ("gpt2", "GPT2LMHeadModel", "GPT2")],
)
def test_the_card_names_the_family_as_transformers_does(family, head, name):
    # the card said "The LLAMA layer stack" and "the parameter names are LLAMA's"
    from hf_ot.cards import render_model_card

    card = str(render_model_card(hf_ot.convert(make_base(family, head), ot_num_steps=2), license="mit"))
    assert f"The {name} layer stack" in card and f"are {name}'s" in card
    assert name.upper() == name or name.upper() not in card


def test_a_hand_edited_card_of_a_base_gives_no_base_model(converted, tmp_path):
    from hf_ot.cards import hub_id_of
    from hf_ot.hub import save_model

    _, model = converted("gpt2", "GPT2LMHeadModel")
    save_model(model, tmp_path / "ot", license="mit")
    card = tmp_path / "ot" / "README.md"
    text = card.read_text()
    card.write_text(text.replace("library_name:", "base_model: 'a b\\n## x'\nlibrary_name:", 1))
    assert hub_id_of(tmp_path / "ot") is None  # not a Hub id: it would land raw in the next card's text
    card.write_text("---\nbase_model: [unclosed\n---\n")
    assert hub_id_of(tmp_path / "ot") is None  # (was a YAML error while saving a model converted from it)


def test_a_metric_type_or_a_long_base_model_name_cannot_break_the_card(converted):
    _, model = converted("gpt2", "GPT2LMHeadModel")
    result = EvalResult(
        task_type="text-generation", dataset_type="custom", dataset_name="d", metric_type="p|q", metric_value=1.0
    )
    text = str(render_model_card(model, eval_results=[result], base_model="x" * 5000, license="mit"))
    rows = results_rows(text)
    assert len(rows) == 3 and all(row.replace("\\|", "").count("|") == 5 for row in rows)  # four cells each


def test_a_card_without_license_says_how_to_give_one_on_the_command_line(converted, caplog):
    _, model = converted("gpt2", "GPT2LMHeadModel")
    render_model_card(model)  # (a scratch recipe such as translation_t5 names none)
    assert "--set card.license=" in caplog.text


@pytest.mark.parametrize("text", ["{}", "/cwd/{}", "looked at /cwd/{} (x)"])
def test_url_credentials_are_hidden_also_in_a_path_made_of_the_url(text):
    from pathlib import Path

    from hf_ot.redaction import hide_secrets

    for spec, secret in URL_SECRETS.items():
        for shown in (text.format(spec), text.format(Path(spec))):  # Path() makes :// :/
            assert secret not in hide_secrets(shown) and "<redacted>" in hide_secrets(shown), shown
    for plain in ("https://host/a/b@c.csv", "mail me at a@b.com", "https://h/x.csv?max_tokens=5&sort=asc"):
        assert hide_secrets(plain) == plain


@pytest.mark.parametrize("spec", list(URL_SECRETS))
@pytest.mark.parametrize("key", ["data.train_file", "data.validation_file"])
def test_a_data_url_with_credentials_is_never_printed(spec, key, tmp_path, capsys, monkeypatch):
    from hf_ot.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["train", "quickstart", "--output-dir", str(tmp_path / "r"), "--set", f"{key}={spec}"]) != 0
    out = capsys.readouterr()
    assert URL_SECRETS[spec] not in out.out + out.err and key in out.err
