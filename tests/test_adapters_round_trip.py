"""A PEFT adapter trained on an OT model reloads on that OT model (its M and solver), exactly, with
`AutoPeftModelForCausalLM.from_pretrained(adapter_dir)` in a fresh process, with hf_ot imported and where hf_ot cannot
be imported: saved by PEFT itself (the OT base saved first, a task type given), or by `hf_ot.save_adapter` (which
supplies the task type, or transformers' Auto class for a classifier); an adapter whose OT base was never saved fails
to load with the fix."""

import json
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import REPO, make_base

pytest.importorskip("peft")

from helpers import WITHOUT_HF_OT, _adapter, _converted, results_of_fresh_python

import hf_ot  # noqa: E402
from hf_ot.adapters import save_adapter, set_adapter_base  # noqa: E402
from hf_ot.hub import save_model  # noqa: E402

LOAD = WITHOUT_HF_OT + textwrap.dedent(
    """
    import json, sys
    if sys.argv[3] != "without":
        import hf_ot  # noqa
    import torch
    import peft
    payload = torch.load(sys.argv[1], weights_only=False)
    try:
        auto = getattr(peft, payload["auto"])
        model = auto.from_pretrained(payload["adapter"], trust_remote_code=True).eval()
    except Exception as err:
        print("RESULTS" + json.dumps({"error": f"{type(err).__name__}: {err}"}))
        raise SystemExit(0)
    base = model.get_base_model()
    with torch.no_grad():
        logits = model(input_ids=payload["ids"]).logits
    print("RESULTS" + json.dumps({
        "class": type(base).__name__, "module": type(base).__module__,
        "num_steps": base.config.ot_num_steps, "solver": base.config.ot_solver,
        "max_diff": (logits - payload["expected"]).abs().max().item()}))
    """
)


def _load_in_fresh_process(
    root: Path, adapter: Path, ids, expected, hf_ot_importable: bool, auto: str = "AutoPeftModelForCausalLM"
) -> dict:
    payload = root / "payload.pt"
    torch.save({"adapter": str(adapter), "ids": ids, "expected": expected, "auto": auto}, payload)
    mode = "with" if hf_ot_importable else "without"
    return results_of_fresh_python(LOAD, payload, REPO, mode, cwd=root, timeout=300)


@pytest.mark.parametrize("hf_ot_importable", [True, False], ids=["with-hf_ot", "without-hf_ot"])
@pytest.mark.parametrize("saver", ["peft", "hf_ot"])
def test_adapter_reloads_exactly_on_its_saved_ot_base(trained, tmp_path, hf_ot_importable, saver):
    """PEFT's own save records the OT folder the model was saved to (its name_or_path); hf_ot.save_adapter saves an
    adapter made without a task type so that AutoPeftModelForCausalLM loads it through transformers' Auto class."""
    root, ids = trained
    model = _converted(root)
    save_model(model, tmp_path / "ot-model")  # the OT base, saved before the adapter is made
    if saver == "peft":
        lora, expected = _adapter(model, ids, task_type="CAUSAL_LM")
        lora.save_pretrained(tmp_path / "adapter")
    else:
        lora, expected = _adapter(model, ids)
        save_adapter(lora, tmp_path / "adapter")
        assert lora.peft_config["default"].task_type is None  # the live model is left as it was
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str((tmp_path / "ot-model").resolve())
    assert config["task_type"] == "CAUSAL_LM"  # loads through AutoModelForCausalLM, not PEFT's import allowlist
    r = _load_in_fresh_process(tmp_path, tmp_path / "adapter", ids, expected, hf_ot_importable)
    assert "error" not in r, r["error"]
    assert r["class"] == "OTGPT2LMHeadModel" and (r["num_steps"], r["solver"]) == (3, "heun")
    if not hf_ot_importable:
        assert r["module"].startswith("transformers_modules")
    assert r["max_diff"] == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("hf_ot_importable", [True, False], ids=["with-hf_ot", "without-hf_ot"])
def test_classifier_adapter_without_task_type_reloads(tmp_path, hf_ot_importable):
    """LoRA on an OT BERT classifier, made without task_type: PEFT would write auto_mapping = the OT class in its
    hf_ot module (refused by PEFT's import allowlist); it names transformers' Auto class instead."""
    base = make_base("bert", "BertForSequenceClassification", num_labels=2)
    model = hf_ot.convert(base, num_steps=2, solver="heun").eval()
    save_model(model, tmp_path / "ot-model")
    ids = torch.randint(4, 99, (2, 7), generator=torch.Generator().manual_seed(0))
    lora, expected = _adapter(model, ids)
    save_adapter(lora, tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["task_type"] is None  # no SEQ_CLS added at save time (the head is not in modules_to_save)
    assert config["auto_mapping"] == {
        "base_model_class": "AutoModelForSequenceClassification",
        "parent_library": "transformers",
    }
    r = _load_in_fresh_process(tmp_path, tmp_path / "adapter", ids, expected, hf_ot_importable, auto="AutoPeftModel")
    assert "error" not in r, r["error"]
    assert r["class"] == "OTBertForSequenceClassification" and (r["num_steps"], r["solver"]) == (2, "heun")
    assert r["max_diff"] == 0.0


@pytest.mark.slow
def test_adapter_of_a_model_saved_with_transformers_save_pretrained_names_that_folder(trained, tmp_path):
    """`model.save_pretrained(DIR)` (transformers' own, not hf_ot.save_model) makes DIR the OT model's name, which
    PEFT's own save records as the adapter's base."""
    root, ids = trained
    model = _converted(root)
    model.save_pretrained(tmp_path / "ot-model")
    lora, expected = _adapter(model, ids, task_type="CAUSAL_LM")
    lora.save_pretrained(tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str((tmp_path / "ot-model").resolve())
    r = _load_in_fresh_process(tmp_path, tmp_path / "adapter", ids, expected, hf_ot_importable=False)
    assert "error" not in r, r["error"]
    assert (r["num_steps"], r["solver"]) == (3, "heun") and r["max_diff"] == 0.0


def test_save_adapter_names_a_base_loaded_from_a_relative_folder_absolutely(trained, tmp_path, monkeypatch):
    root, ids = trained
    model = _converted(root)
    save_model(model, tmp_path / "ot-model")
    monkeypatch.chdir(tmp_path)
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained("ot-model").eval()
    lora, _ = _adapter(loaded, ids)
    save_adapter(lora, "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str((tmp_path / "ot-model").resolve())


@pytest.mark.slow
@pytest.mark.parametrize("saver", ["peft", "hf_ot"])
def test_adapter_of_an_unsaved_ot_model_fails_to_load_with_the_fix(tmp_path, trained, saver):
    root, ids = trained
    model = _converted(root)  # never saved
    lora, expected = _adapter(model, ids, task_type="CAUSAL_LM")
    if saver == "peft":
        lora.save_pretrained(tmp_path / "adapter")
    else:
        with pytest.warns(UserWarning, match="never saved"):
            save_adapter(lora, tmp_path / "adapter")
    r = _load_in_fresh_process(tmp_path, tmp_path / "adapter", ids, expected, hf_ot_importable=True)
    assert "error" in r and "hf_ot.save_model" in r["error"], r  # not the plain GPT-2 at M = 1, silently
    with pytest.raises(FileNotFoundError, match=r"never saved.*hf_ot\.save_model.*set_adapter_base"):
        hf_ot.load_adapter(tmp_path / "adapter")  # hf_ot's own entry point names it before PEFT loads anything
    # the fix the message names: save the OT model, point the adapter at it
    save_model(_converted(root), tmp_path / "ot-model")  # the OT model as converted (the same conversion)
    set_adapter_base(tmp_path / "adapter", str(tmp_path / "ot-model"))
    r = _load_in_fresh_process(tmp_path, tmp_path / "adapter", ids, expected, hf_ot_importable=False)
    assert "error" not in r and r["max_diff"] == 0.0, r


def test_merged_adapter_saves_as_an_ot_model(trained, tmp_path):
    root, ids = trained
    lora, expected = _adapter(_converted(root), ids)
    merged = lora.merge_and_unload()
    folder = save_model(merged, tmp_path / "merged")
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        assert torch.allclose(reloaded(input_ids=ids).logits, expected, atol=1e-5)
