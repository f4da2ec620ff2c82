"""`hf-ot push` and hf_ot.hub: what is uploaded, and what never is (credentials)."""

import json
import logging
import os

from conftest import make_base
from helpers import assert_names

from hf_ot.cli import main
from hf_ot.hub import push_to_hub


def test_a_push_uploads_the_files_of_one_save_also_when_a_save_replaces_the_folder_meanwhile(tmp_path):
    # hf-ot push runs/r/model you/x while hf-ot calibrate runs/r/model --write (or train --overwrite) swaps the folder
    # in: the commit held some files of the earlier save and some of the new one
    import hashlib
    from pathlib import Path

    import hf_ot
    from hf_ot.hub import push_to_hub, save_model
    from hf_ot.run_folders import read_manifest

    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2)
    folder = save_model(model, tmp_path / "ot")
    saves = [read_manifest(folder)["files"]]

    def read(i, name, data):
        if i == 3:  # a save replaces the folder half way through the upload
            model.config.ot_num_steps = 3
            next(model.parameters()).data += 1
            saves.append(read_manifest(save_model(model, folder, overwrite=True))["files"])
        got[name] = hashlib.sha256(data() if callable(data) else data).hexdigest()

    class Api:
        def create_repo(self, *a, **k):
            pass

        def upload_folder(self, folder_path, allow_patterns, **k):
            for i, name in enumerate(sorted(allow_patterns)):
                read(i, name, lambda name=name: Path(folder_path, name).read_bytes())

        def create_commit(self, repo_id, operations, **k):
            for i, op in enumerate(operations):
                read(i, op.path_in_repo, lambda op=op: op.path_or_fileobj.read())

    got: dict = {}
    push_to_hub(folder, "you/x", token="hf_fake", api=Api())
    assert len(saves) == 2 and len(got) > 3
    assert any(got == {n: save[n]["sha256"] for n in got} for save in saves)


def test_push_bad_repo_id_and_missing_folder_are_usage_errors(tmp_path, capsys):
    assert main(["push", str(tmp_path), "bad repo id!!"]) == 2
    err = capsys.readouterr().err
    assert_names(err, "repo id", "'bad repo id!!'", "'namespace/name'")
    assert main(["push", str(tmp_path / "missing"), "me/ot", "--dry-run"]) == 2
    assert_names(capsys.readouterr().err, str(tmp_path / "missing"), "FOLDER", "existing model folder")


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
