"""PEFT adapters on OT models: save_adapter / load_adapter, exact reloads with and without hf_ot, bases named."""

import json
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from conftest import REPO, make_base
from helpers import WITHOUT_HF_OT, _adapter, _converted, raises_naming, results_of_fresh_python, warns_naming

import hf_ot
from hf_ot.adapters import BASE_RECORD, load_adapter, save_adapter, set_adapter_base
from hf_ot.hub import save_model

pytest.importorskip("peft")


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


def test_an_adapter_on_a_plain_model_where_its_ot_base_was_warns(converted, tmp_path):
    # an adapter trained on an OT model saved in base/; base/ then holds a plain GPT-2 (its folder reused):
    # AutoPeftModelForCausalLM.from_pretrained(ADAPTER) loaded the adapter onto the plain model without a word (the
    # check of the base's save ran for OT models only), a model with other outputs
    import shutil

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from hf_ot.adapters import load_adapter, save_adapter
    from hf_ot.hub import save_model

    plain, model = converted("gpt2", "GPT2LMHeadModel")
    save_model(model, tmp_path / "base")
    save_adapter(
        get_peft_model(AutoModelForCausalLM.from_pretrained(tmp_path / "base"), LoraConfig(r=2)), tmp_path / "lora"
    )
    shutil.rmtree(tmp_path / "base")
    plain.save_pretrained(tmp_path / "base")
    with warns_naming(UserWarning, str(tmp_path / "base"), "not an OT model", "gpt2"):
        load_adapter(str(tmp_path / "lora"))


def test_pushing_an_adapter_folder_names_peft_push(tmp_path):
    # docs/training.md: "... then `lora.push_to_hub("you/ot-quickstart-lora")` or `hf-ot push`"; `hf-ot push
    # quickstart-lora you/ot-quickstart-lora --dry-run`: "quickstart-lora has no config.json: save the model first"
    from hf_ot.errors import PushError
    from hf_ot.hub import plan_push

    (tmp_path / "lora").mkdir()
    (tmp_path / "lora" / "adapter_config.json").write_text('{"base_model_name_or_path": "you/ot-quickstart"}')
    with pytest.raises(PushError, match=r"a PEFT adapter.*push_to_hub"):
        plan_push(tmp_path / "lora", "you/ot-quickstart-lora")


# get_peft_model(ot_causal_lm, PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=3)) then a forward raised
# "This KV cache has 2 layers ... Let the model build its cache ...", advice a PEFT user cannot follow. It should say
# that prefix tuning (one prefix per block) does not apply to an OT model, and what does (prompt tuning, LoRA).
def test_prefix_tuning_is_refused_naming_the_peft_methods_that_work():
    from peft import PrefixTuningConfig, get_peft_model

    model = hf_ot.convert(make_base("llama", "LlamaForCausalLM"), ot_num_steps=2)
    ids = torch.randint(4, 99, (2, 6), generator=torch.Generator().manual_seed(0))
    prefixed = get_peft_model(model, PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=3))
    with pytest.raises(ValueError, match=r"(?s)prefix tuning.*prompt tuning.*LoRA"):
        prefixed(input_ids=ids, labels=ids)


def test_an_adapter_on_a_replaced_base_warns_naming_both(trained, tmp_path):
    root, ids = trained
    base = tmp_path / "ot-model"
    save_model(_converted(root), base)
    lora, _ = _adapter(hf_ot.OTGPT2LMHeadModel.from_pretrained(base), ids)
    save_adapter(lora, tmp_path / "adapter")
    assert (tmp_path / "adapter" / BASE_RECORD).is_file()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the base it was trained on: no warning
        load_adapter(tmp_path / "adapter", hf_ot.OTGPT2LMHeadModel.from_pretrained(base))
    other = hf_ot.convert(str(root / "plain"), ot_num_steps=2, ot_solver="euler")
    save_model(other, base, overwrite=True)  # another save replaces the base folder
    with pytest.warns(UserWarning, match="another save") as caught:
        load_adapter(str(tmp_path / "adapter"))
    assert any(str(base.resolve()) in str(w.message) for w in caught if "another save" in str(w.message))


def test_a_moved_base_is_named_with_the_fix_and_set_adapter_base_refuses_a_typo(trained, tmp_path):
    root, ids = trained
    base = tmp_path / "ot-model"
    save_model(_converted(root), base)
    lora, _ = _adapter(hf_ot.OTGPT2LMHeadModel.from_pretrained(base), ids)
    save_adapter(lora, tmp_path / "adapter")
    base.rename(tmp_path / "moved")
    with pytest.raises(FileNotFoundError, match="set_adapter_base") as err:
        load_adapter(str(tmp_path / "adapter"))
    assert str(base.resolve()) in str(err.value) and "Repo id" not in str(err.value)
    for typo in (str(tmp_path / "movd"), "runs/no-such-run/model", "./movd"):
        with pytest.raises(FileNotFoundError, match="No folder"):
            set_adapter_base(tmp_path / "adapter", typo)
    set_adapter_base(tmp_path / "adapter", str(tmp_path / "moved"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        load_adapter(str(tmp_path / "adapter"))


def test_offline_a_hub_base_not_in_the_cache_is_named_with_the_adapter(trained, tmp_path, monkeypatch):
    root, ids = trained
    base = tmp_path / "ot-model"
    save_model(_converted(root), base)
    lora, _ = _adapter(hf_ot.OTGPT2LMHeadModel.from_pretrained(base), ids)
    save_adapter(lora, tmp_path / "adapter")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with raises_naming(FileNotFoundError, "ot-modle", "HF_HUB_OFFLINE", "local cache"):
        set_adapter_base(tmp_path / "adapter", "ot-modle")  # a mistyped folder name reads as a Hub id
    config = tmp_path / "adapter" / "adapter_config.json"
    config.write_text(config.read_text().replace(str(base.resolve()), "someone/ot-model"))  # as pushed to the Hub
    with raises_naming(FileNotFoundError, "someone/ot-model", "not in the local cache") as err:
        load_adapter(str(tmp_path / "adapter"))
    assert str(tmp_path / "adapter") in str(err.value) and "set_adapter_base" in str(err.value)


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
    model = hf_ot.convert(base, ot_num_steps=2, ot_solver="heun").eval()
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
    with raises_naming(FileNotFoundError, "never saved", "hf_ot.save_model", "set_adapter_base"):
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


def test_an_adapter_config_nested_past_any_config_is_named_not_a_recursion_error(tmp_path):
    """load_adapter reads the adapter's JSON bounded, as every folder hf_ot does not own: deep nesting is named."""
    from hf_ot.checkpoints import CheckpointError

    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match="adapter_config.json"):
        hf_ot.load_adapter(tmp_path / "adapter")
