"""Behaviour the 2026-12-04 cuts lost, found by reading them side by side: each test failed before its fix."""

import pytest

from hf_ot.recipes import load_config

pytestmark = pytest.mark.usefixtures("in_repo")  # configs are given as recipes/configs/...


def test_a_classifiers_unknown_metric_is_refused_before_the_data(tmp_path):
    # check_before_data checked evaluation.metrics for every task; since text_metric_names took its place (none for a
    # classifier) a misspelt name in a classification recipe trained for minutes and was then silently not computed
    from hf_ot.recipes.run import check_before_data, training_arguments

    cfg = load_config("recipes/configs/sst2_minilm.yaml", [f"output_dir={tmp_path}", "evaluation.metrics=[blue]"])
    with pytest.raises(ValueError, match=r"Unknown metric name\(s\) \['blue'\]"):  # (run_recipe's check, no data)
        check_before_data(cfg, training_arguments(cfg, str(tmp_path), cfg.is_ot))


def test_label_names_holding_a_list_get_the_label_error_not_a_type_error(tmp_path):
    # the duplicate check became len(set(names)): `label_names: [[bad, good]]` (a YAML list in a list) ended in
    # "TypeError: unhashable type: 'list'"; before, the labels were named as not among data.label_names
    from hf_ot.recipes.data import load_classification

    (tmp_path / "d.csv").write_text("text,label\na good film,good\na dull film,bad\n")
    data = {"train_file": str(tmp_path / "d.csv"), "validation_file": str(tmp_path / "d.csv")}
    with pytest.raises(ValueError, match=r"data.label_names=\[\['bad', 'good'\]\] holds 1 name"):  # (one: a list)
        load_classification({**data, "label_names": [["bad", "good"]]})


def test_setting_the_other_model_key_to_null_keeps_the_recipes_model():
    # a model.base (or model.scratch) override replaces the recipe's other one; one set to null gives no model, so
    # `--set model.scratch=null` on a base recipe dropped its base too: no model at all, "model.scratch.family must
    # be one of ..." after the data was read, with a warning that the base is not used
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = load_config("recipes/configs/sst2_minilm.yaml", ["model.scratch=null"])
    assert cfg.model.base == "minilm" and cfg.model.scratch is None


def test_evaluate_refuses_ids_past_the_classes_of_a_model_with_unnamed_classes(monkeypatch):
    # a classifier saved without class names (transformers' LABEL_0, LABEL_1) has no names to check the evaluation
    # labels against: an id 2 was scored as a class it can never predict (accuracy silently lowered)
    from conftest import make_base

    from hf_ot.errors import UsageError
    from hf_ot.recipes import evaluate

    model = make_base("bert", "BertForSequenceClassification")
    assert model.config.id2label == {0: "LABEL_0", 1: "LABEL_1"}
    monkeypatch.setattr(evaluate, "load_for_eval", lambda *a, **k: (model, None))
    monkeypatch.setattr(evaluate, "eval_data", lambda *a, **k: ([[5, 6]], [[0, 0]], [0, 2, 1]))  # (the labels only)
    with pytest.raises(UsageError, match=r"one.csv: labels \[2\] are not classes of the model, which has 2 \(ids 0..1"):
        evaluate.evaluate_folder("unused", "sst2_minilm", ["data.validation_file=one.csv"])


def test_a_negative_max_grad_norm_still_means_no_clipping():
    # the optimizer settings' check refused max_grad_norm < 0, which Trainer reads as "do not clip" (> 0 clips)
    from transformers import TrainingArguments

    from hf_ot.training import check_training_arguments

    check_training_arguments(TrainingArguments("unused", max_grad_norm=-1.0, report_to=[]))
    with pytest.raises(ValueError, match="max_grad_norm must be a finite number"):
        check_training_arguments(TrainingArguments("unused", max_grad_norm=float("nan"), report_to=[]))


def test_calibrate_refuses_ids_past_the_classes_of_a_model_with_unnamed_classes(monkeypatch):
    # evaluate refused them; calibrate scored the data against classes the model can never predict
    import torch
    from conftest import make_base

    from hf_ot import convert
    from hf_ot.errors import UsageError
    from hf_ot.recipes import evaluate

    model = convert(make_base("bert", "BertForSequenceClassification"), num_steps=2)
    monkeypatch.setattr(evaluate, "load_for_eval", lambda *a, **k: (model, None))
    batches = [{"input_ids": torch.tensor([[5, 6], [5, 6]]), "labels": torch.tensor([0, 2])}]
    monkeypatch.setattr(evaluate, "calibration_batches", lambda *a, **k: (batches, "accuracy", {}))
    with pytest.raises(UsageError, match=r"one.csv: labels \[2\] are not classes of the model, which has 2 \(ids 0..1"):
        evaluate.calibrate_folder("unused", "sst2_minilm", ["data.validation_file=one.csv"])
