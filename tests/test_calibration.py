"""Depth calibration: the grid equals one run by hand, the cheapest setting within tolerance is chosen (or none),
and --write keeps the trained setting, adds the table and figure to an hf_ot card and leaves a user's README alone."""

import json
import shutil
import signal
from pathlib import Path

import pytest
import torch
from conftest import make_base
from helpers import TABLE, assert_names, fake, raises_naming, tiny_lm, tiny_t5

import hf_ot
from hf_ot.calibration import (
    CARD_BEGIN,
    CONFIG_KEY,
    NO_CHEAPER,
    calibrate,
    evaluate_batches,
    restore_trained_setting,
    write_calibration,
)
from hf_ot.cli import main
from hf_ot.errors import UsageError
from hf_ot.run_folders import check_replaceable_model_folder, foreign_entries, read_manifest


def lm_batches(tok, n=2):
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(2, len(tok), (4 * n, 17), generator=g)
    return [{"input_ids": b, "labels": b} for b in rows.split(4)]


def test_grid_equals_a_hand_run_grid_and_settings_are_restored():
    model, tok = tiny_lm()  # OT GPT-2, M=2 euler
    batches = lm_batches(tok)
    result = calibrate(model, batches, max_steps=3)
    assert [(r.solver, r.num_steps) for r in result.rows] == [
        (s, m) for s in ("euler", "heun", "rk4") for m in (1, 2, 3)
    ]
    assert (model.config.ot_num_steps, model.config.ot_solver) == (2, "euler")  # restored
    for row in result.rows:
        model.config.ot_num_steps, model.config.ot_solver = row.num_steps, row.solver
        with torch.no_grad():
            losses = [model(**b).loss.item() for b in batches]
        assert row.metric == pytest.approx(sum(losses) / len(losses), rel=1e-5)
        assert row.field_evaluations == row.num_steps * {"euler": 1, "heun": 2, "rk4": 4}[row.solver]
        assert row.seconds_per_batch > 0
    assert (result.trained.solver, result.trained.num_steps) == ("euler", 2)


def test_cheapest_setting_within_tolerance_is_chosen():
    model, _ = tiny_lm()
    model.config.ot_num_steps = 5
    # an ODE-like model: heun M'=1 (2 evaluations) within 0.01 of euler M=5, euler M'=1 not
    table = {("euler", 5): 2.882, ("heun", 1): 2.889, ("euler", 1): 3.0, ("rk4", 1): 2.886, ("euler", 2): 2.95}
    result = calibrate(model, [{}], evaluate=fake(table))
    assert (result.choice.solver, result.choice.num_steps, result.choice.field_evaluations) == ("heun", 1, 2)
    assert result.cheaper and "2 field evaluations instead of 5" in result.message
    assert len(result.rows) == 3 * 10  # M' = 1 .. 2M
    strict = calibrate(model, [{}], evaluate=fake(table), tolerance=0.005)
    assert (strict.choice.solver, strict.choice.num_steps) == ("rk4", 1)


def test_a_model_tied_to_its_grid_is_reported_as_such():
    model, _ = tiny_lm()
    model.config.ot_num_steps = 5
    table = {("euler", 5): 2.94, ("euler", 4): 3.0, ("heun", 2): 2.999, ("euler", 6): 2.945}
    result = calibrate(model, [{}], evaluate=fake(table))
    assert not result.cheaper and result.choice is result.trained
    assert result.message.startswith(NO_CHEAPER)


def test_accuracy_tolerance_is_half_a_point_by_default():
    model, _ = tiny_lm()
    table = {("euler", 2): 0.900, ("euler", 1): 0.896, ("heun", 1): 0.894}
    result = calibrate(model, [{}], metric="accuracy", evaluate=fake(table))
    assert (result.choice.solver, result.choice.num_steps) == ("euler", 1)
    with pytest.raises(ValueError, match="metric must be one of"):
        calibrate(model, [{}], metric="bleu")


def test_accuracy_of_a_classifier():
    from transformers import BertConfig

    torch.manual_seed(0)
    cfg = hf_ot.OTBertConfig.from_base_config(
        BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32),
        ot_num_steps=2,
    )
    model = hf_ot.OTBertForSequenceClassification(cfg).eval()
    ids = torch.randint(1, 30, (6, 7))
    labels = torch.tensor([0, 1, 0, 1, 1, 0])
    value, _ = evaluate_batches(model, [{"input_ids": ids, "labels": labels}], "accuracy")
    with torch.no_grad():
        expected = (model(input_ids=ids).logits.argmax(-1) == labels).float().mean().item()
    assert value == pytest.approx(expected)


def test_write_keeps_the_trained_setting_and_adds_the_card_section(tmp_path):
    model, tok = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    assert "- hf_ot" in (folder / "README.md").read_text()
    table = {("euler", 2): 2.0, ("euler", 1): 2.005}
    result = calibrate(model, [{}], evaluate=fake(table))
    write_calibration(folder, result)
    write_calibration(folder, result)  # again: one section, replaced
    card = (folder / "README.md").read_text()
    assert card.count(CARD_BEGIN) == 1 and "| euler (chosen) | 1 | 1 |" in card and "calibration.png" in card
    assert (folder / "calibration.png").stat().st_size > 0
    values = json.loads((folder / "config.json").read_text())
    assert (values["ot_num_steps"], values["ot_solver"]) == (1, "euler")
    assert values[CONFIG_KEY]["trained"]["ot_num_steps"] == 2 and values[CONFIG_KEY]["trained"]["ot_solver"] == "euler"
    loaded = hf_ot.OTGPT2LMHeadModel.from_pretrained(folder)
    assert (loaded.config.ot_num_steps, loaded.config.ot_solver) == (1, "euler")
    assert restore_trained_setting(loaded) == (2, "euler")
    assert (loaded.config.ot_num_steps, loaded.config.ot_solver) == (2, "euler")
    # calibrating the calibrated model again compares against the trained setting, not the current one
    again = calibrate(hf_ot.OTGPT2LMHeadModel.from_pretrained(folder), [{}], evaluate=fake(table))
    assert (again.trained.solver, again.trained.num_steps) == ("euler", 2)


def test_a_users_own_readme_is_left_alone(tmp_path):
    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    (folder / "README.md").write_text("# my notes\n")
    write_calibration(folder, calibrate(model, [{}], evaluate=fake({("euler", 2): 1.0})))
    assert (folder / "README.md").read_text() == "# my notes\n"
    assert CARD_BEGIN in (folder / "CALIBRATION.md").read_text()


def test_cli_calibrate_writes_the_choice(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tiny_lm(tmp_path)
    overrides = ["--set", "data.block_size=32", "--set", "data.max_eval_blocks=4", "--set", "evaluation.metrics=[]"]
    assert (
        main(
            [
                "calibrate",
                str(tmp_path / "model"),
                "--config",
                "quickstart",
                *overrides,
                "--tolerance",
                "10",
                "--write",
                "--json",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert len(result["rows"]) == 3 * 4 and result["tolerance"] == 10
    # a tolerance of 10 nats admits everything: the cheapest is one Euler step
    assert (result["choice"]["solver"], result["choice"]["num_steps"]) == ("euler", 1)
    values = json.loads((tmp_path / "model" / "config.json").read_text())
    assert values["ot_num_steps"] == 1 and values[CONFIG_KEY]["trained"]["ot_num_steps"] == 2


def test_a_calibrated_folder_stays_hf_ots_to_replace(tmp_path):
    """--write rewrites config.json and the card and adds the figure: the manifest lists them with their new hashes,
    so a later save may still replace the folder, while a user's own edit elsewhere is still named."""
    from hf_ot.errors import UsageError
    from hf_ot.run_folders import check_replaceable_model_folder, foreign_entries, read_manifest

    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    assert read_manifest(folder) is not None and foreign_entries(folder) == []
    write_calibration(folder, calibrate(model, [{}], evaluate=fake({("euler", 2): 2.0, ("euler", 1): 2.005})))
    assert foreign_entries(folder) == []
    check_replaceable_model_folder(folder, overwrite=True)  # no error: every file is hf_ot's
    (folder / "generation_config.json").write_text("{}\n")  # the user's edit
    write_calibration(folder, calibrate(model, [{}], evaluate=fake({("euler", 2): 2.0})), choose=False)
    assert foreign_entries(folder) == ["generation_config.json (changed since hf_ot wrote it)"]
    with pytest.raises(UsageError, match="generation_config.json"):
        check_replaceable_model_folder(folder, overwrite=True)
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_reporting_only_keeps_the_trained_setting(tmp_path):
    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    before = json.loads((folder / "config.json").read_text())
    write_calibration(folder, calibrate(model, [{}], evaluate=fake({("euler", 2): 2.0, ("euler", 1): 2.0})), False)
    assert json.loads((folder / "config.json").read_text()) == before
    card = (folder / "README.md").read_text()
    assert "| euler (chosen) | 1 | 1 |" in card and "The config keeps the trained setting" in card


def test_the_metric_is_the_task_loss_not_the_training_objective():
    """A model saved with ot_reg_in_loss=True has loss = task loss + lambda * reg, and reg changes with the solver and
    M': calibration scores the task loss, so a large lambda changes neither the table nor the choice."""
    batches = lm_batches(tiny_lm()[1])
    plain, _ = tiny_lm()
    objective, _ = tiny_lm()  # the same weights (seeded)
    objective.config.ot_reg_in_loss, objective.config.ot_lambda = True, 1e5
    with torch.no_grad():
        out = objective(**batches[0])
    assert out.loss.item() > out.task_loss.item() + 1.0  # the objective really carries lambda * reg
    a = calibrate(plain, batches, max_steps=3, tolerance=0.05)
    b = calibrate(objective, batches, max_steps=3, tolerance=0.05)
    assert [(r.solver, r.num_steps, r.within_tolerance) for r in a.rows] == [
        (r.solver, r.num_steps, r.within_tolerance) for r in b.rows
    ]
    assert [r.metric for r in b.rows] == pytest.approx([r.metric for r in a.rows], rel=1e-6)
    assert (b.choice.solver, b.choice.num_steps) == (a.choice.solver, a.choice.num_steps)
    assert b.message == a.message


def test_encoder_decoder_trained_row_is_the_trained_encoder_and_decoder_setting():
    """Encoder 4 / decoder 2: the trained row is evaluated at (4, 2) and costs 4 + 2 field evaluations; grid rows set
    both stacks to M' (cost 2 M' x stages); the config is restored, decoder steps included."""
    model, batches = tiny_t5()
    seen = []

    def spy(model, batches, metric):
        c = model.config
        seen.append((c.ot_solver, c.ot_num_steps, c.ot_steps_and_time("decoder")[0]))
        return evaluate_batches(model, batches, metric)

    result = calibrate(model, batches, solvers=("euler", "heun"), max_steps=2, evaluate=spy)
    assert seen == [("euler", 1, 1), ("euler", 2, 2), ("heun", 1, 1), ("heun", 2, 2), ("euler", 4, 2)]
    assert (model.config.ot_num_steps, model.config.ot_decoder_num_steps) == (4, 2)  # restored
    trained = result.trained
    assert (trained.solver, trained.num_steps, trained.decoder_num_steps, trained.field_evaluations) == (
        "euler",
        4,
        2,
        6,
    )
    with torch.no_grad():
        assert trained.metric == pytest.approx(model(**batches[0]).loss.item(), rel=1e-6)
    costs = {(r.solver, r.num_steps): (r.decoder_num_steps, r.field_evaluations) for r in result.rows[:-1]}
    assert costs == {("euler", 1): (1, 2), ("euler", 2): (2, 4), ("heun", 1): (1, 4), ("heun", 2): (2, 8)}
    assert "| euler (trained) | 4 / 2 | 6 |" in hf_ot.calibration.calibration_table(result)


def test_encoder_decoder_write_keeps_the_decoders_trained_steps(tmp_path):
    """Nothing cheaper within tolerance: --write keeps encoder 4 / decoder 2 (not 4 / 4), and a cheaper choice sets
    both stacks to its M'."""
    from hf_ot.hub import save_model

    model, _ = tiny_t5()
    folder = tmp_path / "t5"
    save_model(model, folder)
    tied = {("euler", 4): 2.0}  # every other setting far off
    result = calibrate(model, [{}], evaluate=fake(tied))
    assert not result.cheaper and result.trained.decoder_num_steps == 2
    write_calibration(folder, result)
    values = json.loads((folder / "config.json").read_text())
    assert (values["ot_num_steps"], values["ot_decoder_num_steps"]) == (4, 2)
    cheap = calibrate(model, [{}], evaluate=fake({("euler", 4): 2.0, ("euler", 1): 2.0}))
    assert (cheap.choice.num_steps, cheap.choice.decoder_num_steps, cheap.choice.field_evaluations) == (1, 1, 2)
    write_calibration(folder, cheap)
    values = json.loads((folder / "config.json").read_text())
    assert (values["ot_num_steps"], values["ot_decoder_num_steps"]) == (1, 1)
    assert values[CONFIG_KEY]["trained"]["ot_decoder_num_steps"] == 2
    loaded = hf_ot.OTT5ForConditionalGeneration.from_pretrained(folder)
    restore_trained_setting(loaded)
    assert (loaded.config.ot_num_steps, loaded.config.ot_decoder_num_steps) == (4, 2)
    calibrated = hf_ot.OTT5ForConditionalGeneration.from_pretrained(folder)  # on (1, 1)
    again = calibrate(calibrated, [{}], evaluate=fake(tied))  # against the kept trained (4, 2), not the current one
    assert (again.trained.num_steps, again.trained.decoder_num_steps) == (4, 2)


def test_calibrate_folder_scores_a_saved_objective_models_task_loss(tmp_path):
    """`hf-ot calibrate` (calibrate_folder; the recipes' evaluation.elasticity grid runs the same calibrate) of a
    folder saved with ot_reg_in_loss=True and a large lambda: the same rows as the folder without."""
    from hf_ot.hub import save_model
    from hf_ot.recipes.evaluate import calibrate_folder

    model, tok = tiny_lm(tmp_path / "plain")
    model.config.ot_reg_in_loss, model.config.ot_lambda = True, 1e5
    save_model(model, tmp_path / "objective" / "model", tokenizer=tok)
    overrides = ["data.block_size=32", "data.max_eval_blocks=4", "evaluation.metrics=[]"]
    a, b = (calibrate_folder(str(tmp_path / n / "model"), "quickstart", overrides) for n in ("plain", "objective"))
    assert [r["metric"] for r in b["rows"]] == pytest.approx([r["metric"] for r in a["rows"]], rel=1e-6)
    assert b["choice"] == {**a["choice"], "seconds_per_batch": b["choice"]["seconds_per_batch"]}


@pytest.mark.parametrize(
    "name, content",
    [("calibration.png", b"\x89PNG my own figure"), ("config.json", None)],
    ids=["users-figure", "edited-config"],
)
def test_write_never_replaces_a_users_file(tmp_path, name, content):
    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    path = folder / name
    if content is None:  # the user's edit of the saved config
        values = json.loads(path.read_text())
        values["my_note"] = "mine"
        content = (json.dumps(values, indent=2) + "\n").encode()
    path.write_bytes(content)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with raises_naming(ValueError, str(path), "cannot show it wrote", "move it away"):
        write_calibration(folder, calibrate(model, [{}], evaluate=fake({("euler", 2): 2.0, ("euler", 1): 2.0})))
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_grid_without_settings_is_refused():
    model, tok = tiny_lm()
    for bad in (0, -1):  # 0 would otherwise fall back to the default 2M silently
        with pytest.raises(ValueError, match="largest M' of the grid, an integer >= 1"):
            calibrate(model, lm_batches(tok), max_steps=bad)


class Killed(BaseException):
    """What a kill -9 leaves: the code after the point never runs (no except Exception handler catches it)."""


def killed_at(monkeypatch, point: str, *, interrupt: bool = False):
    """At `point` of the write the process is killed (or, interrupt=True, gets a Ctrl-C): "writing" (the card is in
    the folder's copy, the config not yet), "exchange" (the copy is complete, not swapped in yet) or "cleanup" (swapped
    in, the earlier folder not yet deleted). A kill runs no cleanup: nothing is deleted after it."""
    from hf_ot import run_folders

    def kill():
        if interrupt:
            signal.raise_signal(signal.SIGINT)  # to this (the main) thread, as a Ctrl-C is handled
            return
        monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: None)
        monkeypatch.setattr(shutil, "rmtree", lambda *a, **k: None)
        raise Killed

    real_write, real_exchange, real_rmtree = run_folders.write_text_atomic, run_folders.exchange, shutil.rmtree
    writes = {"n": 0}

    def write_text_atomic(path, text):
        writes["n"] += ".tmp-" in str(path)
        if point == "writing" and writes["n"] == 2:
            kill()
        return real_write(path, text)

    def exchange(a, b):
        if point == "exchange":
            kill()
        return real_exchange(a, b)

    def rmtree(path, *a, **k):
        if point == "cleanup" and ".tmp-" in str(path):
            kill()
        return real_rmtree(path, *a, **k)

    monkeypatch.setattr(run_folders, "write_text_atomic", write_text_atomic)
    monkeypatch.setattr(run_folders, "exchange", exchange)
    monkeypatch.setattr(shutil, "rmtree", rmtree)


def leftovers(folder: Path) -> list[str]:
    """Hidden files in the folder, or beside it (a write's copy and lock)."""
    inside = [p.name for p in folder.iterdir() if p.name.startswith(".")]
    return inside + [p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.")]


def state(folder: Path) -> dict:
    return {
        "steps": json.loads((folder / "config.json").read_text())["ot_num_steps"],
        "card": "calibration" in (folder / "README.md").read_text(),
        "figure": (folder / "calibration.png").exists(),
    }


def ot_settings_rows(card: str) -> dict[str, str]:
    table = card.split("## OT settings", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("| ")]
    return {key.strip(): value.strip() for key, value, *_ in rows}


def test_an_adapter_on_a_base_calibrated_since_is_warned_about(tmp_path):
    # an adapter trained on a folder at M=2, then `hf-ot calibrate FOLDER --write` (ot_num_steps 1 stored in its
    # config): AutoPeftModelForCausalLM loads the base at M'=1 under the adapter, without the warning a replaced
    # base gets (calibrate keeps the manifest's save id, and the record compares the save id alone)
    from helpers import TABLE, fake, tiny_lm
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from hf_ot.adapters import load_adapter, save_adapter
    from hf_ot.calibration import calibrate, write_calibration

    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    save_adapter(get_peft_model(AutoModelForCausalLM.from_pretrained(folder), LoraConfig(r=2)), tmp_path / "lora")
    write_calibration(folder, calibrate(model, [{}], evaluate=fake(TABLE)))
    with pytest.warns(UserWarning) as caught:
        reloaded = load_adapter(str(tmp_path / "lora"))
    assert reloaded.get_base_model().config.ot_num_steps == 1  # (the calibrated setting is what runs)
    assert any(str(folder.resolve()) in str(w.message) for w in caught)


def test_calibrating_a_model_whose_metric_is_nan_says_so():
    # `hf-ot calibrate MODEL --config quickstart` of a model whose weights hold NaN (a diverged or damaged save):
    # "hf-ot calibrate: error: min() arg is an empty sequence" (exit 1), where `hf-ot evaluate` of it reports its
    # loss as null; no setting is within a tolerance of NaN, and the error can say the metric is not a number
    from helpers import tiny_lm

    from hf_ot.calibration import calibrate

    model, _ = tiny_lm()
    with pytest.raises(Exception) as caught:
        calibrate(model, [{}], evaluate=lambda model, batches, metric: (float("nan"), 0.1))
    assert "nan" in str(caught.value).lower() and "empty sequence" not in str(caught.value), str(caught.value)


def test_a_classifiers_tolerance_in_points_is_refused(tmp_path):
    # hf-ot calibrate runs/sst/model --config sst2_minilm --tolerance 1 (meaning 1 point; the help says a fraction):
    # every setting is then "within tolerance" of the trained accuracy (a fraction in [0, 1]), so M'=1 was chosen and
    # --write stored it, whatever the model's accuracy there. Refused before any model is loaded, naming the fraction.
    from hf_ot.recipes.evaluate import calibrate_folder

    with pytest.raises(UsageError, match=r"fraction.*0\.01"):
        calibrate_folder(str(tmp_path / "model"), "sst2_minilm", tolerance=1.0)
    from helpers import tiny_lm

    from hf_ot.calibration import calibrate  # the library function refuses it too

    with pytest.raises(UsageError, match="fraction"):
        calibrate(tiny_lm()[0], [{}], metric="accuracy", tolerance=2)


def test_calibrate_write_into_a_live_runs_model_is_refused_before_the_grid(tmp_path):
    # hf-ot train ... --output-dir runs/lt running; hf-ot calibrate runs/lt/model --config quickstart --write: the model
    # loaded and the whole grid ran (32 s here), then "inside ... the output folder of a live run"
    from helpers import hold_lock

    from hf_ot.recipes import evaluate

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "ot_gpt2"}')
    holder = hold_lock(tmp_path)
    try:
        with pytest.raises(UsageError, match="the output folder of a live run"):
            evaluate.calibrate_folder(str(tmp_path / "model"), "quickstart", write=True)
    finally:
        holder.kill()
        holder.wait()


def test_cli_calibrate_takes_the_grid_as_ot_flags(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, _ = tiny_lm(tmp_path)  # trained at Euler, M = 2
    with pytest.raises(ValueError, match="fixed-grid solvers"):  # an adaptive solver has no cost per M'
        calibrate(model, [{}], solvers=["dopri5"], evaluate=fake({("euler", 2): 1.0}))
    overrides = ["--set", "data.block_size=32", "--set", "data.max_eval_blocks=4", "--set", "evaluation.metrics=[]"]
    command = ["calibrate", str(tmp_path / "model"), "--config", "quickstart", *overrides, "--json"]
    assert main([*command, "--ot-solver", "heun", "rk4", "--ot-num-steps", "1"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert sorted((r["solver"], r["num_steps"]) for r in rows) == [("euler", 2), ("heun", 1), ("rk4", 1)]
    for flag, value in (("--ot-solver", "dopri5"), ("--ot-num-steps", "0")):  # refused before anything loads
        with pytest.raises(SystemExit) as exit_:
            main(["calibrate", "m", "--config", "quickstart", flag, value])
        assert exit_.value.code == 2 and flag in capsys.readouterr().err


def test_a_tolerance_that_is_no_number_is_named(capsys):
    # hf-ot calibrate MODEL --config quickstart --tolerance abc: "argument --tolerance: invalid _tolerance value: 'abc'"
    with pytest.raises(SystemExit) as exit_info:
        main(["calibrate", "m", "--config", "quickstart", "--tolerance", "abc"])
    assert exit_info.value.code == 2
    assert_names(capsys.readouterr().err, "--tolerance", "'abc'", "finite number >= 0")


def test_calibrate_write_refuses_a_model_folder_replaced_while_its_grid_ran(tmp_path, monkeypatch):
    # hf-ot calibrate runs/r/model --write (minutes of grid) while hf-ot train ... --overwrite replaced runs/r/model:
    # the earlier model's chosen M and solver went into the new model's config.json and card
    from conftest import snapshot
    from helpers import fake, tiny_lm

    import hf_ot.calibration
    from hf_ot.hub import save_model
    from hf_ot.recipes import evaluate

    model, tok = tiny_lm(tmp_path)
    real, replaced = hf_ot.calibration.calibrate, {}

    def grid(m, batches, **k):  # another save replaces the folder while the grid runs
        replaced.update(snapshot(save_model(model, tmp_path / "model", tokenizer=tok, overwrite=True)))
        return real(m, [{}], evaluate=fake({("euler", 2): 2.0, ("euler", 1): 2.005}))

    monkeypatch.setattr(hf_ot.calibration, "calibrate", grid)
    with pytest.raises(UsageError, match="replaced"):
        evaluate.calibrate_folder(str(tmp_path / "model"), "quickstart", ["data.block_size=32"], write=True)
    assert snapshot(tmp_path / "model") == replaced


def test_calibrate_write_into_a_folder_hf_ot_may_not_rewrite_is_refused_before_the_grid(tmp_path, monkeypatch):
    # hf-ot calibrate FOLDER --config quickstart --write on a folder without hf_ot_manifest.json (save_pretrained) or
    # with a config.json edited since hf_ot wrote it: the model loaded and the whole grid ran, then the refusal
    from conftest import snapshot
    from helpers import tiny_lm

    import hf_ot.calibration
    from hf_ot.hub import save_model
    from hf_ot.recipes import evaluate

    model, tok = tiny_lm(tmp_path)
    save_model(model, tmp_path / "edited", tokenizer=tok)
    config = tmp_path / "edited" / "config.json"
    config.write_text(config.read_text().replace("{", '{"edited": 1,', 1))
    model.save_pretrained(tmp_path / "plain")
    tok.save_pretrained(tmp_path / "plain")
    monkeypatch.setattr(hf_ot.calibration, "calibrate", lambda *a, **k: pytest.fail("the grid ran"))
    for folder in (tmp_path / "edited", tmp_path / "plain"):
        before = snapshot(folder)
        with raises_naming(UsageError, "config.json", "calibrate --write", "never replaces"):
            evaluate.calibrate_folder(str(folder), "quickstart", ["data.block_size=32"], write=True)
        assert snapshot(folder) == before


# hf_ot.calibrate(model, [{"input_ids": ids}]) (batches without labels) failed inside the grid with "float() argument
# must be a string or a real number, not 'NoneType'". It should be refused first, saying every batch needs labels.
def test_calibrate_refuses_batches_without_labels():
    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2)
    ids = torch.randint(4, 99, (2, 8), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="labels"):
        hf_ot.calibrate(model, [{"input_ids": ids, "labels": ids}, {"input_ids": ids}], progress=False, max_steps=1)


# hf_ot.calibrate(causal_lm, batches, metric="accuracy") compared each position's argmax with its own token (0.95 for
# a random tiny GPT-2, whose logits favour the input token) and counted -100 labels as misses. It should be the
# next-token accuracy over the labels that count, as the loss is.
def test_calibrates_accuracy_of_a_causal_lm_is_next_token_accuracy_over_counted_labels():
    from hf_ot.calibration import evaluate_batches

    model = hf_ot.convert(make_base("gpt2", "GPT2LMHeadModel"), ot_num_steps=2).eval()
    ids = torch.randint(4, 99, (3, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        predicted = model(input_ids=ids).logits[:, :-1].argmax(-1)
    labels = ids.clone()
    labels[:, 1:5] = predicted[:, :4]  # the model's own next-token choice at 4 of 9 positions
    labels[0, 6:] = -100
    counted = labels[:, 1:] != -100
    expected = (predicted == labels[:, 1:])[counted].float().mean().item()
    accuracy, _ = evaluate_batches(model, [{"input_ids": ids, "labels": labels}], "accuracy")
    assert 0.4 < expected < 0.9 and accuracy == pytest.approx(expected)


@pytest.mark.usefixtures("in_repo")
def test_calibrate_refuses_ids_past_the_classes_of_a_model_with_unnamed_classes(monkeypatch):
    # evaluate refused them; calibrate scored the data against classes the model can never predict
    import torch
    from conftest import make_base

    from hf_ot import convert
    from hf_ot.errors import UsageError
    from hf_ot.recipes import evaluate

    model = convert(make_base("bert", "BertForSequenceClassification"), ot_num_steps=2)
    monkeypatch.setattr(evaluate, "load_for_eval", lambda *a, **k: (model, None))
    batches = [{"input_ids": torch.tensor([[5, 6], [5, 6]]), "labels": torch.tensor([0, 2])}]
    monkeypatch.setattr(evaluate, "calibration_batches", lambda *a, **k: (batches, "accuracy", {}))
    with raises_naming(UsageError, "one.csv", "labels [2]", "not classes of the model", "0..1"):
        evaluate.calibrate_folder("unused", "sst2_minilm", ["data.validation_file=one.csv"])


def test_after_calibrate_write_the_cards_settings_are_the_saved_configs(tmp_path):
    # hf-ot calibrate RUN/model --write: config.json held M=1 (the choice), the card's "OT settings" table the
    # trained M=2
    from hf_ot.calibration import calibrate, write_calibration

    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    assert ot_settings_rows((folder / "README.md").read_text())["steps M"] == "2"
    write_calibration(folder, calibrate(model, [{}], evaluate=fake({("euler", 2): 2.0, ("euler", 1): 2.0})))
    values = json.loads((folder / "config.json").read_text())
    assert (values["ot_num_steps"], values["ot_solver"]) == (1, "euler")
    card = (folder / "README.md").read_text()
    rows = ot_settings_rows(card)
    assert rows["steps M"].split()[0] == "1" and rows["solver"].split()[0] == "`euler`"
    assert "trained" in rows["steps M"] and "2" in rows["steps M"]  # and what it was trained with
    assert "| euler (trained) | 2 |" in card  # the calibration section keeps the trained row
    restored = values["hf_ot_calibration"]["trained"]
    write_calibration(folder, calibrate(model, [{}], evaluate=fake({("euler", 2): 2.0})))  # again: nothing cheaper
    rows = ot_settings_rows((folder / "README.md").read_text())
    assert json.loads((folder / "config.json").read_text())["ot_num_steps"] == restored["ot_num_steps"] == 2
    assert rows["steps M"].split()[0] == "2" and rows["solver"].split()[0] == "`euler`"


def test_after_calibrate_write_an_encoder_decoders_card_shows_both_stacks_saved_settings(tmp_path):
    from helpers import tiny_t5

    from hf_ot.calibration import calibrate, write_calibration
    from hf_ot.hub import save_model

    model, _ = tiny_t5()  # encoder M = 4, decoder M = 2
    save_model(model, tmp_path / "t5")
    before = ot_settings_rows((tmp_path / "t5" / "README.md").read_text())
    assert (before["steps M"], before["decoder M / T"]) == ("4", "2 / 1.0")
    write_calibration(tmp_path / "t5", calibrate(model, [{}], evaluate=fake({("euler", 4): 2.0, ("euler", 1): 2.0})))
    values = json.loads((tmp_path / "t5" / "config.json").read_text())
    rows = ot_settings_rows((tmp_path / "t5" / "README.md").read_text())
    assert rows["steps M"].split()[0] == str(values["ot_num_steps"]) == "1"
    assert rows["decoder M / T"] == f"{values['ot_decoder_num_steps']} / 1.0" == "1 / 1.0"


def test_calibrate_uses_the_block_size_the_run_trained_with(run, capsys):
    code = main(["calibrate", str(run / "model"), "--config", "quickstart", "--max-batches", "1", "--json"])
    assert code == 0, capsys.readouterr().err[-2000:]
    assert json.loads(capsys.readouterr().out)["rows"]


@pytest.mark.parametrize("point", ["writing", "exchange", "cleanup"])
def test_a_kill_leaves_a_whole_folder_and_the_next_write_keeps_what_it_left(tmp_path, monkeypatch, point):
    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    before = state(folder)
    result = calibrate(model, [{}], evaluate=fake(TABLE))
    killed_at(monkeypatch, point)
    with pytest.raises(Killed):
        write_calibration(folder, result)
    monkeypatch.undo()
    # at the kill: the earlier folder or the calibrated one, all four changed together; still recognised as hf_ot's
    # (train --overwrite may replace it), the kill's files beside it
    assert state(folder) == (before if point != "cleanup" else {"steps": 1, "card": True, "figure": True})
    assert foreign_entries(folder) == [] and (left := leftovers(folder))
    check_replaceable_model_folder(folder, overwrite=True)
    # the next --write writes again; what the kill left beside stays (hf_ot deletes only what the save wrote), but
    # its lock, which the next write takes and lets go
    write_calibration(folder, result)
    assert state(folder) == {"steps": 1, "card": True, "figure": True}
    assert foreign_entries(folder) == [] and set(leftovers(folder)) == set(left) - {".model.lock"}
    assert set(read_manifest(folder)["files"]) == {p.name for p in folder.iterdir()} - {"hf_ot_manifest.json"}


def test_a_folder_whose_parent_is_not_writable_is_refused_untouched(tmp_path, monkeypatch):
    from hf_ot.errors import UsageError

    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    before = state(folder)
    result = calibrate(model, [{}], evaluate=fake(TABLE))
    import errno

    import filelock

    def read_only(self, *a, **k):  # (root may write anywhere: the error a user's unwritable folder gives)
        raise OSError(errno.EACCES, "Permission denied", str(self.lock_file))

    monkeypatch.setattr(filelock.FileLock, "acquire", read_only)
    with raises_naming(UsageError, str(tmp_path), "cannot be written", "permission denied", "writable"):
        write_calibration(folder, result)
    assert state(folder) == before and leftovers(folder) == []


def test_ctrl_c_during_the_write_waits_until_everything_is_in_place(tmp_path, monkeypatch):
    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    result = calibrate(model, [{}], evaluate=fake(TABLE))
    killed_at(monkeypatch, "exchange", interrupt=True)
    # Ctrl-C raises KeyboardInterrupt (a process started in the background by a shell, `cmd &`, ignores SIGINT)
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            write_calibration(folder, result)
    finally:
        signal.signal(signal.SIGINT, ignored)
    monkeypatch.undo()
    assert state(folder) == {"steps": 1, "card": True, "figure": True}
    assert foreign_entries(folder) == [] and leftovers(folder) == []


def test_a_calibrated_folder_converted_again_drops_the_calibration_record(tmp_path):
    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    write_calibration(folder, calibrate(model, [{}], evaluate=fake(TABLE)))
    assert CONFIG_KEY in json.loads((folder / "config.json").read_text())
    again = hf_ot.convert(str(folder), ot_num_steps=3)
    hf_ot.save_model(again, tmp_path / "again")
    values = json.loads((tmp_path / "again" / "config.json").read_text())
    assert CONFIG_KEY not in values and values["ot_num_steps"] == 3


def test_write_into_a_model_folder_without_a_manifest_is_refused_untouched(tmp_path):
    from conftest import snapshot

    from hf_ot.errors import UsageError

    model, _ = tiny_lm(tmp_path)
    folder = tmp_path / "model"
    (folder / "hf_ot_manifest.json").unlink()  # as hf_ot 0.1.0 saved it, or a copy without its manifest
    before = snapshot(folder)
    with raises_naming(UsageError, "config.json", "cannot show it wrote", "a new folder"):
        write_calibration(folder, calibrate(model, [{}], evaluate=fake(TABLE)))
    assert snapshot(folder) == before and leftovers(folder) == []
