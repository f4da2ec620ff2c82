"""hf_ot deletes or replaces only files it can show it wrote (listed unchanged in its manifest); anything else stays,
and the command names it."""

import hashlib
import json
import shutil

import pytest
import torch
from conftest import make_base, snapshot, tiny_run
from helpers import raises_naming
from transformers import AutoModelForCausalLM

import hf_ot
from hf_ot.cli import main
from hf_ot.hub import save_model
from hf_ot.run_folders import MANIFEST, foreign_entries, read_manifest


@pytest.fixture
def ot_model():
    return hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2)


@pytest.fixture
def saved(tmp_path, ot_model):
    return save_model(ot_model, tmp_path / "ot")


def test_a_save_lists_what_it_wrote_with_hashes(saved):
    manifest = read_manifest(saved)
    files = {p.name for p in saved.iterdir()} - {MANIFEST}
    assert set(manifest["files"]) == files and "model.safetensors" in files
    entry = manifest["files"]["config.json"]
    assert entry["sha256"] == hashlib.sha256((saved / "config.json").read_bytes()).hexdigest()
    assert foreign_entries(saved) == []


@pytest.mark.parametrize(
    "make_foreign",
    [
        lambda d: (d / "my_analysis.py").write_text("print('years of work')"),  # matched *.py before
        lambda d: ((d / "notes").mkdir(), (d / "notes" / "README.md").write_text("# my notes")),  # README.md anywhere
        lambda d: (shutil.copytree(d, d.parent / "v1_copy"), shutil.move(d.parent / "v1_copy", d / "v1")),  # old model
        lambda d: (d / "README.md").write_text("---\ntags: [hf_ot]\n---\nmy edited card with results"),  # edited card
        lambda d: (d / "config.json").write_text((d / "config.json").read_text().replace("}", ', "note": 1}', 1)),
        lambda d: (d / "data.txt").symlink_to(d.parent),  # a link
    ],
    ids=["script", "notes-readme", "older-model-v1", "edited-card", "edited-config", "link"],
)
def test_overwrite_refuses_a_model_folder_holding_anything_hf_ot_did_not_write(saved, ot_model, make_foreign):
    make_foreign(saved)
    before = snapshot(saved)
    with raises_naming(ValueError, "never replaces or deletes") as err:
        save_model(ot_model, saved, overwrite=True)
    assert snapshot(saved) == before  # nothing deleted, nothing replaced
    foreign = foreign_entries(saved)
    assert foreign and foreign[0].split(" ")[0].rstrip("/") in str(err.value)
    assert [p.name for p in saved.parent.iterdir() if p.name.startswith(".")] == []


def test_overwrite_replaces_a_folder_hf_ot_wrote(saved, ot_model):
    first = read_manifest(saved)["save_id"]
    ot_model.config.ot_num_steps = 5
    save_model(ot_model, saved, overwrite=True)
    assert json.loads((saved / "config.json").read_text())["ot_num_steps"] == 5
    assert read_manifest(saved)["save_id"] != first
    assert [p.name for p in saved.parent.iterdir() if p.name.startswith(".")] == []


def test_a_model_folder_without_a_manifest_is_never_replaced_and_still_loads(saved, ot_model):
    (saved / MANIFEST).unlink()  # an OT model as hf_ot 0.1.0 saved it (or a copy without its manifest)
    before = snapshot(saved)
    with raises_naming(ValueError, MANIFEST, "missing", "never replaces or deletes", "move those files"):
        save_model(ot_model, saved, overwrite=True)
    assert snapshot(saved) == before and [p.name for p in saved.parent.iterdir()] == ["ot"]  # nothing beside it
    ids = torch.tensor([[1, 2, 3]])
    loaded = AutoModelForCausalLM.from_pretrained(saved).eval()
    torch.testing.assert_close(loaded(ids).logits, ot_model.eval()(ids).logits)


def test_convert_overwrite_refuses_a_model_folder_without_a_manifest(tmp_path, capsys):
    base = tmp_path / "base"
    make_base("bert", "BertModel").save_pretrained(base)
    target = tmp_path / "ot"
    assert main(["convert", str(base), str(target)]) == 0
    (target / MANIFEST).unlink()
    before = snapshot(target)
    capsys.readouterr()
    assert main(["convert", str(base), str(target), "--overwrite"]) == 2
    assert "hf_ot_manifest.json missing" in capsys.readouterr().err and snapshot(target) == before


def test_convert_overwrite_keeps_a_users_files(tmp_path, capsys):
    base = tmp_path / "base"
    make_base("bert", "BertModel").save_pretrained(base)
    target = tmp_path / "ot"
    assert main(["convert", str(base), str(target)]) == 0
    (target / "my_analysis.py").write_text("print('mine')")
    (target / "v1").mkdir()
    (target / "v1" / "config.json").write_text("{}")
    before = snapshot(target)
    capsys.readouterr()
    assert main(["convert", str(base), str(target), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "my_analysis.py" in err and "v1/" in err
    assert snapshot(target) == before


def test_train_overwrite_keeps_a_users_files_in_the_model_folder(tmp_path, in_repo, capsys):
    from hf_ot.recipes import load_config, run_recipe

    out = tmp_path / "run"
    tiny = tiny_run(f"output_dir={out}", max_steps=1)
    run_recipe(load_config("quickstart", tiny))
    (out / "model" / "my_analysis.py").write_text("print('mine')")
    before = snapshot(out)
    with pytest.raises(ValueError, match="my_analysis.py"):
        run_recipe(load_config("quickstart", tiny), overwrite=True)
    assert snapshot(out) == before


def test_result_file_never_replaces_a_users_file(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    assert main(["env", "--result-file", str(notes)]) == 2
    assert "not a result hf-ot wrote" in capsys.readouterr().err
    assert notes.read_text() == "my notes"
    result = tmp_path / "env.json"
    assert main(["env", "--result-file", str(result)]) == 0
    assert main(["env", "--result-file", str(result)]) == 0  # its own earlier result: replaced
    assert json.loads(result.read_text())["python"]


def test_overwrite_never_deletes_a_users_file_inside_a_checkpoint(tmp_path, in_repo):
    from hf_ot.recipes import load_config, run_recipe

    out = tmp_path / "run"
    tiny = tiny_run("training.save_strategy=steps", "training.save_steps=2", f"output_dir={out}")
    run_recipe(load_config("quickstart", tiny))
    (out / "trainer" / "checkpoint-2" / "my_eval_notes.txt").write_text("mine")
    before = snapshot(out)
    with pytest.raises(ValueError, match="my_eval_notes.txt"):
        run_recipe(load_config("quickstart", tiny), overwrite=True)
    assert snapshot(out) == before


def test_summary_files_of_a_sweep_never_replace_a_users_files(tmp_path, capsys, in_repo):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "curves.png").write_bytes(b"\x89PNG my own figure")
    args = [
        "sweep",
        "quickstart",
        "--param",
        "model.ot.ot_lambda",
        "--values",
        "0.1",
        "--out",
        str(out),
        "--set",
        "training.max_steps=1",
        "--set",
        "data.block_size=16",
        "--set",
        "model.scratch.n_embd=16",
        "--set",
        "model.scratch.n_layer=1",
        "--set",
        "model.scratch.n_positions=16",
        "--set",
        "evaluation.metrics=[]",
        "--set",
        "data.max_eval_blocks=2",
    ]
    assert main(args) == 2
    assert "curves.png" in capsys.readouterr().err
    assert (out / "curves.png").read_bytes() == b"\x89PNG my own figure"
    (out / "curves.png").unlink()
    assert main(args) == 0
    assert main([*args, "--overwrite"]) == 0  # its own files: replaced


def test_train_overwrite_never_replaces_a_results_file_that_is_not_hf_ots(tmp_path, in_repo):
    from hf_ot.recipes import load_config, run_recipe

    out = tmp_path / "run"
    tiny = tiny_run(f"output_dir={out}", max_steps=1)
    run_recipe(load_config("quickstart", tiny))
    (out / "results.json").write_text("my table of results, by hand\n")
    with raises_naming(ValueError, "results.json", "not a result hf-ot wrote"):
        run_recipe(load_config("quickstart", tiny), overwrite=True)
    assert (out / "results.json").read_text() == "my table of results, by hand\n"


def test_result_file_never_replaces_a_users_json_file(tmp_path, capsys):
    package = tmp_path / "package.json"
    package.write_text('{"name":"my-app"}')
    assert main(["env", "--result-file", str(package)]) == 2
    err = capsys.readouterr().err
    assert str(package) in err and "not a result hf-ot wrote" in err
    assert package.read_text() == '{"name":"my-app"}'


def test_train_overwrite_never_replaces_a_users_base_checkpoint_at_out_model(tmp_path, in_repo):
    from hf_ot.recipes import load_config, run_recipe

    out = tmp_path / "run"
    tiny = tiny_run(f"output_dir={out}", max_steps=1)
    run_recipe(load_config("quickstart", tiny))
    (out / "model" / MANIFEST).unlink()  # the run's OT model, as hf_ot 0.1.0 saved it; then a plain gpt2 folder
    for replace in (False, True):
        if replace:
            shutil.rmtree(out / "model")
            make_base("gpt2", "GPT2LMHeadModel").save_pretrained(out / "model")
        before = snapshot(out)
        with pytest.raises(ValueError, match=r"model/hf_ot_manifest.json missing"):
            run_recipe(load_config("quickstart", tiny), overwrite=True)
        assert snapshot(out) == before


def test_a_users_training_curves_png_in_a_fresh_output_folder_is_never_replaced(tmp_path, in_repo):
    from hf_ot.recipes import load_config, run_recipe

    out = tmp_path / "run"
    out.mkdir()
    (out / "training_curves.png").write_bytes(b"\x89PNG my own figure, made with matplotlib")
    tiny = tiny_run(f"output_dir={out}", max_steps=1)
    for overwrite in (False, True):
        with pytest.raises(ValueError, match="training_curves.png"):
            run_recipe(load_config("quickstart", tiny), overwrite=overwrite)
    assert (out / "training_curves.png").read_bytes() == b"\x89PNG my own figure, made with matplotlib"


def test_train_overwrite_never_replaces_a_users_json_results_file(tmp_path, in_repo):
    from hf_ot.recipes import load_config, run_recipe

    out = tmp_path / "run"
    tiny = tiny_run(f"output_dir={out}", "training.logging_steps=1", max_steps=1)
    run_recipe(load_config("quickstart", tiny))
    run_recipe(load_config("quickstart", tiny), overwrite=True)  # its own results and curves: replaced
    (out / "results.json").write_text('{"my": "table"}')
    with pytest.raises(ValueError, match="results.json"):
        run_recipe(load_config("quickstart", tiny), overwrite=True)
    assert (out / "results.json").read_text() == '{"my": "table"}'


def test_overwrite_never_deletes_a_users_file_inside_an_incomplete_checkpoint(tmp_path, in_repo):
    from hf_ot.recipes import load_config, run_recipe

    out = tmp_path / "run"
    tiny = tiny_run("training.save_strategy=steps", "training.save_steps=2", f"output_dir={out}")
    run_recipe(load_config("quickstart", tiny))
    hidden = out / "trainer" / ".incomplete-checkpoint-4"
    hidden.mkdir()
    (hidden / "my_eval_notes.txt").write_text("mine")
    before = snapshot(out)
    with pytest.raises(ValueError, match="my_eval_notes.txt"):
        run_recipe(load_config("quickstart", tiny), overwrite=True)
    assert snapshot(out) == before
