"""transformers pipelines on OT models."""

import pytest
from helpers import TEXTS, minilm_tokenizer, tiny_bert, tiny_lm


@pytest.mark.parametrize(
    "task, head, ot",
    [
        ("text-classification", "BertForSequenceClassification", {}),
        ("fill-mask", "BertForMaskedLM", {}),
        ("token-classification", "BertForTokenClassification", {}),
        # an adaptive solver: num_field_evaluations was an int in the output (TypeError: 'int' object is not
        # subscriptable, with or without ot_output_reg)
        ("fill-mask", "BertForMaskedLM", {"ot_solver": "bosh3"}),
    ],
)
def test_a_batched_pipeline_runs_with_reg_in_every_output(task, head, ot):
    # m.config.ot_output_reg = True; pipeline("text-classification", model=m, tokenizer=t, batch_size=2)(texts):
    # IndexError "invalid index of a 0-dim tensor" (pipelines slice every output tensor per row; reg was a scalar)
    from transformers import pipeline

    tok = minilm_tokenizer()
    model = tiny_bert(head, tok, **ot)
    model.config.ot_output_reg = True
    one_by_one = pipeline(task, model=model, tokenizer=tok)(TEXTS)  # no batch: nothing is sliced
    batched = pipeline(task, model=model, tokenizer=tok, batch_size=2)(TEXTS)
    for got, want in zip(batched, one_by_one):
        if task == "text-classification":
            assert got["label"] == want["label"] and got["score"] == pytest.approx(want["score"], rel=1e-4)
        else:
            assert [g.get("token") or g.get("index") for g in got] == [w.get("token") or w.get("index") for w in want]


def test_a_batched_text_generation_pipeline_runs_with_reg_in_every_output():
    from transformers import pipeline

    model, tok = tiny_lm()
    model.config.ot_output_reg = True
    tok.padding_side = "left"
    texts = ["The for", "A while statement is"]
    batched = pipeline("text-generation", model=model, tokenizer=tok, batch_size=2)(texts, max_new_tokens=3)
    one_by_one = pipeline("text-generation", model=model, tokenizer=tok)(texts, max_new_tokens=3)
    assert [b[0]["generated_text"][: len(t)] for b, t in zip(batched, texts)] == texts
    assert len(batched) == len(one_by_one) == 2
