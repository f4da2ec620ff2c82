"""Converting an OT model keeps its settings unless new ones are
given, and says which; a push never uploads what a link points to outside the folder; a saved folder whose config
reaches outside it (auto_map '../x.Y'), is malformed, or has a cut-short shard is named file by file before loading."""

import json
import logging
import os

import pytest
import torch
from conftest import REPO, make_base

import hf_ot
from hf_ot.cli import main
from hf_ot.hub import plan_push, push_to_hub, save_model


@pytest.fixture
def ot_folder(tmp_path):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=4, ot_solver="rk4", ot_lambda=0.5)
    model.config.ot_reg_in_loss = True
    return save_model(model, tmp_path / "ot4")


def test_converting_an_ot_model_keeps_its_settings(ot_folder, caplog):
    with caplog.at_level(logging.WARNING, logger="hf_ot.convert"):
        again = hf_ot.convert(str(ot_folder))
    cfg = again.config
    assert (cfg.ot_num_steps, cfg.ot_solver, cfg.ot_lambda, cfg.ot_reg_in_loss) == (4, "rk4", 0.5, True)
    assert "already an OT model" in caplog.text and "ot_num_steps=4" in caplog.text
    assert again.ot_conversion_info["kept"]["ot_solver"] == "rk4"
    # new settings given: those change, the rest is kept, and the change is said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_ot.convert"):
        deeper = hf_ot.convert(str(ot_folder), ot_num_steps=8)
    assert (deeper.config.ot_num_steps, deeper.config.ot_solver, deeper.config.ot_lambda) == (8, "rk4", 0.5)
    assert "ot_num_steps 4 -> 8" in caplog.text
    # the same for a loaded OT model, and the weights are the OT model's
    loaded = hf_ot.convert(again)
    assert loaded.config.ot_num_steps == 4
    for (name, a), b in zip(again.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    # a base checkpoint still gets the documented defaults
    base = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"))
    assert (base.config.ot_num_steps, base.config.ot_solver, base.config.ot_lambda) == (1, "euler", 0.1)


def test_cli_convert_of_an_ot_model_keeps_and_reports_its_settings(ot_folder, tmp_path, capsys):
    assert main(["convert", str(ot_folder), str(tmp_path / "again"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ot_settings"]["already_ot"] and result["ot_settings"]["kept"]["ot_num_steps"] == 4
    assert json.loads((tmp_path / "again" / "config.json").read_text())["ot_num_steps"] == 4


def test_push_skips_links_that_point_outside_the_folder(ot_folder, tmp_path, caplog):
    secret = tmp_path / "secret.txt"
    secret.write_text("token=hf_abc")
    outside_dir = tmp_path / "private"
    outside_dir.mkdir()
    (outside_dir / "keys.json").write_text("{}")
    os.symlink(secret, ot_folder / "notes.txt")
    os.symlink(outside_dir, ot_folder / "extra")
    os.symlink(ot_folder / "config.json", ot_folder / "config_link.json")  # inside: fine
    with caplog.at_level(logging.WARNING, logger="hf_ot.hub"):
        plan = push_to_hub(ot_folder, "me/ot", dry_run=True)
    assert "notes.txt" not in plan.files and not any(f.startswith("extra") for f in plan.files)
    assert "config_link.json" in plan.files
    assert any(s.startswith("notes.txt (a link to") and "outside the folder" in s for s in plan.skipped)
    assert any(s.startswith("extra/") for s in plan.skipped)
    assert "not uploading notes.txt" in caplog.text

    class FakeApi:
        def create_repo(self, *args, **kwargs):
            pass

        def create_commit(self, repo_id, operations, **kwargs):
            self.uploaded = [op.path_in_repo for op in operations]

    api = FakeApi()
    push_to_hub(ot_folder, "me/ot", token="hf_fake", api=api)
    assert "notes.txt" not in api.uploaded and not any("keys.json" in f for f in api.uploaded)


def test_cli_push_dry_run_says_what_it_skips(ot_folder, tmp_path, capsys):
    os.symlink("/etc/hostname", ot_folder / "host.txt")
    assert main(["push", str(ot_folder), "me/ot", "--dry-run", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert "host.txt" not in result["files"] and result["skipped"][0].startswith("host.txt (a link to")


def test_cli_push_names_the_hidden_files_it_leaves_out(ot_folder, capsys, caplog):
    # a user's .gitattributes or .notes beside the model was silently not uploaded
    def hidden_lines(argv):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hf_ot.hub"):
            assert main(["push", str(ot_folder), "me/ot", "--dry-run", *argv]) == 0
        return [r.getMessage() for r in caplog.records if "hidden" in r.getMessage()]

    assert hidden_lines([]) == []  # hf_ot's own records (its manifest, a lock) are not named
    (ot_folder / ".hf_ot.lock").touch()
    assert hidden_lines([]) == []
    (ot_folder / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    (ot_folder / ".notes").write_text("mine\n")
    (ot_folder / ".git").mkdir()
    (ot_folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    capsys.readouterr()
    assert hidden_lines(["--json"]) == ["hf_ot push: not uploading .git/, .gitattributes, .notes (hidden files)."]
    assert not any(f.startswith(".") for f in json.loads(capsys.readouterr().out)["files"])


@pytest.mark.parametrize(
    "auto_map, message",
    [
        ({"AutoConfig": "../outside.X"}, r"auto_map\['AutoConfig'\] = '../outside.X' must map .*'module.ClassName'"),
        ({"AutoModelForCausalLM": "a.b.c"}, r"auto_map\['AutoModelForCausalLM'\]"),
        (["ot_gpt2.OTGPT2Config"], r"field auto_map = .* must map"),
        ({"AutoConfig": "missing_module.X"}, r"missing_module.py is not in"),
    ],
    ids=["escapes-folder", "dotted", "not-a-dict", "missing-file"],
)
def test_a_config_reaching_outside_its_folder_is_named(ot_folder, capsys, auto_map, message):
    import re

    from hf_ot.checkpoints import check_model_files

    config = json.loads((ot_folder / "config.json").read_text())
    config["auto_map"] = auto_map
    (ot_folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message) as err:
        check_model_files(ot_folder)
    assert str(ot_folder / "config.json") in str(err.value)
    assert (
        main(
            [
                "evaluate",
                str(ot_folder),
                "--config",
                str(REPO / "recipes/configs/quickstart.yaml"),
                "--trust-remote-code",
            ]
        )
        == 2
    )
    stderr = capsys.readouterr().err
    assert re.search(message, stderr) and "Traceback" not in stderr and "unpack" not in stderr
    with pytest.raises(ValueError, match=message):
        hf_ot.convert(str(ot_folder))


def test_a_cut_short_shard_among_several_is_named(tmp_path, capsys):
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"))
    folder = tmp_path / "sharded"
    model.save_pretrained(folder, max_shard_size="20KB")
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) > 3
    victim = shards[2]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    with pytest.raises(ValueError, match=rf"Weights file {victim} .*cut short"):
        hf_ot.convert(str(folder))
    assert main(["evaluate", str(folder), "--config", str(REPO / "recipes/configs/quickstart.yaml")]) == 2
    assert victim.name in capsys.readouterr().err
    # a shard the index names but the folder lacks
    victim.unlink()
    with pytest.raises(ValueError, match=rf"names the shard '{victim.name}', which is not in"):
        hf_ot.convert(str(folder))


def test_a_corrupt_config_is_named(ot_folder):
    (ot_folder / "config.json").write_text('{"model_type": "ot_gpt2", "n_embd": ')
    with pytest.raises(ValueError, match=rf"{ot_folder / 'config.json'} is not valid JSON"):
        hf_ot.convert(str(ot_folder))
    with pytest.raises(Exception, match="config.json is not valid JSON"):
        plan_push(ot_folder, "me/ot")


def test_hf_ot_check_names_a_cut_short_shard(tmp_path, capsys):
    folder = tmp_path / "base"
    make_base("bert", "BertModel").save_pretrained(folder, max_shard_size="20KB")
    shards = sorted(folder.glob("model-*.safetensors"))
    shards[-1].write_bytes(shards[-1].read_bytes()[:100])
    assert main(["check", str(folder)]) == 2
    err = capsys.readouterr().err
    assert shards[-1].name in err and "Traceback" not in err


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("ot_num_steps", 1000000000, r"ot_num_steps must be an integer from 1 to 1024"),
        ("ot_terminal_time", 1e300, r"ot_terminal_time must be a finite number > 0 and <= 1000"),
    ],
    ids=["num-steps-1e9", "terminal-time-1e300"],
)
def test_out_of_bounds_ot_values_in_a_saved_config_name_the_file_and_field(ot_folder, capsys, field, value, message):
    import re
    import time

    config = json.loads((ot_folder / "config.json").read_text())
    config[field] = value
    (ot_folder / "config.json").write_text(json.dumps(config))
    named = rf"{re.escape(str(ot_folder / 'config.json'))}: {message}"
    start = time.monotonic()
    with pytest.raises(ValueError, match=named):
        hf_ot.convert(str(ot_folder))
    with pytest.raises(Exception, match=named):  # PushError
        plan_push(ot_folder, "me/ot")
    capsys.readouterr()
    assert main(["push", str(ot_folder), "me/ot", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert re.search(named, err) and "Traceback" not in err
    config_yaml = str(REPO / "recipes/configs/quickstart.yaml")
    assert main(["evaluate", str(ot_folder), "--config", config_yaml, "--trust-remote-code"]) == 2
    err = capsys.readouterr().err
    assert re.search(named, err) and "Traceback" not in err
    assert time.monotonic() - start < 60  # refused at once, not after a forward
    from transformers import AutoModelForCausalLM

    with pytest.raises(ValueError, match=message):  # transformers' own load refuses before any forward
        AutoModelForCausalLM.from_pretrained(ot_folder)
