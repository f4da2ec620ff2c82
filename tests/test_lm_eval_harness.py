"""lm-evaluation-harness on a saved OT causal LM, offline, with local task files: `--model hf --model_args
pretrained=PATH,trust_remote_code=True` through its Python API. A loglikelihood_rolling task (word perplexity) agrees
with hf_ot's own token loss on the same text, and a generation task runs. Skips when lm-eval is not installed
(`pip install "hf-ot[lm-eval]"`)."""

import json
import math
import re

import pytest
import torch

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is not installed: pip install 'hf-ot[lm-eval]'")

DOCS = ["to be or not to be", "that is the question", "whether tis nobler in the mind"]

TASKS = {
    "hfot_rolling": """
task: hfot_rolling
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
""",
    "hfot_generate": """
task: hfot_generate
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{text}}}}"
doc_to_target: " "
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 4
  do_sample: false
metric_list:
  - metric: exact_match
""",
}


@pytest.fixture(scope="module")
def saved_lm(tmp_path_factory):
    """A saved OT causal LM (the quickstart recipe at toy size: char tokenizer, M = 5, paper mode)."""
    from conftest import set_flags
    from helpers import toy_overrides

    from hf_ot.cli import main

    tmp = tmp_path_factory.mktemp("lm-eval")
    assert (
        main(["train", "quickstart", "--output-dir", str(tmp / "run"), *set_flags(toy_overrides("quickstart", tmp))])
        == 0
    )
    return tmp, tmp / "run" / "model"  # as the recipe saved it: its char tokenizer's EOS is its <pad>


def test_lm_eval_harness_runs_on_a_saved_ot_model_and_agrees_with_its_loss(saved_lm, monkeypatch):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp, model_dir = saved_lm
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    data = tmp / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    tasks = tmp / "tasks"
    tasks.mkdir()
    for name, text in TASKS.items():
        (tasks / f"{name}.yaml").write_text(text.format(data=data))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # the token lm-eval conditions a document's first token on: BOS, else EOS (the char tokenizer's EOS is its
    # <pad>); the model arguments are README's, with no prefix_token_id given
    assert tokenizer.eos_token_id is not None
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    out = simple_evaluate(
        model="hf",
        model_args=f"pretrained={model_dir},trust_remote_code=True,dtype=float32",
        tasks=list(TASKS),
        task_manager=TaskManager(include_path=str(tasks)),
        batch_size=1,
        device="cpu",
        bootstrap_iters=0,
        log_samples=False,
    )
    results = out["results"]
    assert "exact_match,none" in results["hfot_generate"]  # the generation task ran
    word_ppl = results["hfot_rolling"]["word_perplexity,none"]

    # hf_ot's own loss on the same text: each document after the prefix token lm-eval conditions on, summed NLL
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    nll, words = 0.0, 0
    for doc in DOCS:
        ids = torch.tensor([[prefix, *tokenizer(doc, add_special_tokens=False)["input_ids"]]])
        with torch.no_grad():
            loss = model(input_ids=ids, labels=ids).loss  # mean token NLL over the document's tokens
        nll += loss.item() * (ids.shape[1] - 1)
        words += len(re.split(r"\s+", doc))
    assert word_ppl == pytest.approx(math.exp(nll / words), rel=1e-4)
