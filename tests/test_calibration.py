"""Depth calibration: the grid equals one run by hand, the cheapest setting within tolerance is chosen (or none),
and --write keeps the trained setting, adds the table and figure to an hf_ot card and leaves a user's README alone."""

import json

import pytest
import torch
from helpers import fake, tiny_lm, tiny_t5

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
    with pytest.raises(ValueError, match=rf"{path}.*which hf_ot cannot show it wrote.*Move it away"):
        write_calibration(folder, calibrate(model, [{}], evaluate=fake({("euler", 2): 2.0, ("euler", 1): 2.0})))
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_grid_without_settings_is_refused():
    model, tok = tiny_lm()
    for bad in (0, -1):  # 0 would otherwise fall back to the default 2M silently
        with pytest.raises(ValueError, match="largest M' of the grid, an integer >= 1"):
            calibrate(model, lm_batches(tok), max_steps=bad)
