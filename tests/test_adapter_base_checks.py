"""An adapter saved with hf_ot.save_adapter records the saved model it was trained on: loaded through
hf_ot.load_adapter onto a base that another save has since replaced, it warns, naming both; a moved base folder is
named with the fix (not the Hub's repo-id error); set_adapter_base refuses a mistyped path."""

import warnings

import pytest
from helpers import _adapter, _converted

import hf_ot
from hf_ot.adapters import BASE_RECORD, load_adapter, save_adapter, set_adapter_base
from hf_ot.hub import save_model


def test_an_adapter_on_a_replaced_base_warns_naming_both(trained, tmp_path):  # noqa: F811
    root, ids = trained
    base = tmp_path / "ot-model"
    save_model(_converted(root), base)
    lora, _ = _adapter(hf_ot.OTGPT2LMHeadModel.from_pretrained(base), ids)
    save_adapter(lora, tmp_path / "adapter")
    assert (tmp_path / "adapter" / BASE_RECORD).is_file()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the base it was trained on: no warning
        load_adapter(tmp_path / "adapter", hf_ot.OTGPT2LMHeadModel.from_pretrained(base))
    other = hf_ot.convert(str(root / "plain"), num_steps=2, solver="euler")
    save_model(other, base, overwrite=True)  # another save replaces the base folder
    with pytest.warns(UserWarning, match="another save") as caught:
        load_adapter(str(tmp_path / "adapter"))
    assert any(str(base.resolve()) in str(w.message) for w in caught if "another save" in str(w.message))


def test_a_moved_base_is_named_with_the_fix_and_set_adapter_base_refuses_a_typo(trained, tmp_path):  # noqa: F811
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


def test_offline_a_hub_base_not_in_the_cache_is_named_with_the_adapter(trained, tmp_path, monkeypatch):  # noqa: F811
    root, ids = trained
    base = tmp_path / "ot-model"
    save_model(_converted(root), base)
    lora, _ = _adapter(hf_ot.OTGPT2LMHeadModel.from_pretrained(base), ids)
    save_adapter(lora, tmp_path / "adapter")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(FileNotFoundError, match="nor .*HF_HUB_OFFLINE.* a Hub repo in the local cache"):
        set_adapter_base(tmp_path / "adapter", "ot-modle")  # a mistyped folder name reads as a Hub id
    config = tmp_path / "adapter" / "adapter_config.json"
    config.write_text(config.read_text().replace(str(base.resolve()), "someone/ot-model"))  # as pushed to the Hub
    with pytest.raises(FileNotFoundError, match="someone/ot-model, which is not in the local cache") as err:
        load_adapter(str(tmp_path / "adapter"))
    assert str(tmp_path / "adapter") in str(err.value) and "set_adapter_base" in str(err.value)
