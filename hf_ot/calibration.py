"""Depth calibration: evaluate a trained OT model over a grid of solvers x M' and pick the cheapest setting whose
task metric stays within a tolerance of the trained setting's.

A model trained with lambda ~ 1 is an ODE model (docs/results/studies.md): Heun at M' = 1 keeps the loss
of its 5 trained Euler steps at 40% of the field evaluations. A lambda = 0 model is tied to its training grid, and
calibration says so ("no cheaper setting within tolerance").

Tolerances (DEFAULT_TOLERANCE): +0.01 nats of loss (causal LMs, seq2seq), -0.5 accuracy points (classifiers).
Cost is field evaluations per forward (M' x stages, summed over the stacks of an encoder-decoder); the measured
seconds per batch are reported alongside (they depend on the machine; evaluations do not). The metric is the task's:
the output's `task_loss` when the model puts lambda * reg into `loss` (`ot_reg_in_loss`), since reg changes with the
solver and M' and is no part of the task.

Encoder-decoders: the trained row is evaluated at the exact trained setting (encoder M and decoder M, e.g. 4 and 2);
every grid row sets both stacks to M' (encoder and decoder), and its cost counts both stacks (2 x M' x stages).

`write_calibration(folder, result)` stores the chosen setting in the folder's config.json, keeps the trained one
under `hf_ot_calibration` (restore it with `restore_trained_setting`), and adds a calibration table and a
cost/quality figure to the model card (README.md) when hf_ot wrote it (a user's own README is left alone: the
section then goes to CALIBRATION.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from .checkpoints import read_bounded, read_json
from .errors import UsageError
from .metrics import check_same_work, digest, map_across_processes
from .models.ot_solver import SOLVERS, num_stages
from .run_folders import MANIFEST, ours_to_edit

GRID_SOLVERS = tuple(SOLVERS)  # the fixed-grid solvers: a cost per M' that the grid can compare
# loss: nats of mean token cross-entropy (higher is worse); accuracy: a fraction (lower is worse), 0.005 = 0.5 points
DEFAULT_TOLERANCE = {"loss": 0.01, "accuracy": 0.005}
CONFIG_KEY = "hf_ot_calibration"  # in config.json: the trained and chosen settings, metric, tolerance
CARD_BEGIN, CARD_END = "<!-- hf_ot calibration: begin -->", "<!-- hf_ot calibration: end -->"
FIGURE = "calibration.png"
NO_CHEAPER = "no cheaper setting within tolerance"


@dataclasses.dataclass
class CalibrationRow:
    solver: str
    num_steps: int  # the encoder's (or the single stack's) M'
    field_evaluations: int  # per forward, summed over the stacks: M' x stages per stack
    metric: float
    seconds_per_batch: float
    within_tolerance: bool = False
    decoder_num_steps: int | None = None  # encoder-decoders: the decoder stack's M'; None for one stack


@dataclasses.dataclass
class Calibration:
    metric: str  # "loss" or "accuracy"
    tolerance: float
    trained: CalibrationRow
    rows: list[CalibrationRow]
    choice: CalibrationRow  # the trained row when nothing cheaper is within tolerance
    message: str

    @property
    def cheaper(self) -> bool:
        return self.choice.field_evaluations < self.trained.field_evaluations

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "tolerance": self.tolerance,
            "trained": dataclasses.asdict(self.trained),
            "choice": dataclasses.asdict(self.choice),
            "cheaper": self.cheaper,
            "message": self.message,
            "rows": [dataclasses.asdict(r) for r in self.rows],
        }


def trained_setting(config) -> tuple[int, str]:
    """(M, solver) the model was trained with: the one a calibration kept in the config, else the current one."""
    stored = getattr(config, CONFIG_KEY, None)
    if isinstance(stored, dict) and "trained" in stored:
        return int(stored["trained"]["ot_num_steps"]), str(stored["trained"]["ot_solver"])
    return int(config.ot_num_steps), str(config.ot_solver)


def _trained_decoder_steps(config) -> int | None:
    """The decoder's own trained M of an encoder-decoder (None: it follows ot_num_steps, or one stack)."""
    stored = getattr(config, CONFIG_KEY, None)
    if isinstance(stored, dict) and "trained" in stored:
        value = (stored["trained"] or {}).get("ot_decoder_num_steps")
        return None if value is None else int(value)
    value = getattr(config, "ot_decoder_num_steps", None)
    return None if value is None else int(value)


def _settings(config) -> dict[str, Any]:
    return {
        "ot_num_steps": config.ot_num_steps,
        "ot_solver": config.ot_solver,
        "ot_decoder_num_steps": getattr(config, "ot_decoder_num_steps", None),
    }


def _apply(config, steps: int, solver: str, decoder_steps: int | None) -> None:
    """Set the solver and the steps of both stacks (decoder_steps None: the decoder follows ot_num_steps); the next
    forward checks them."""
    config.ot_num_steps = steps
    if decoder_steps is not None or getattr(config, "ot_decoder_num_steps", None) is not None:
        config.ot_decoder_num_steps = decoder_steps
    config.ot_solver = solver


def evaluate_batches(model, batches: Sequence[dict], metric: str) -> tuple[float, float]:
    """(metric, seconds per batch) of the model on the batches: the mean of the batches' task loss (weighted by their
    counted labels; the output's `task_loss` when the model adds lambda * reg to `loss`, else `loss`) or the accuracy
    of logits.argmax(-1) against the batches' `labels` other than -100 (a causal LM's: the next token's)."""
    device = next(model.parameters()).device
    causal = getattr(model, "loss_type", None) == "ForCausalLM"  # its loss and accuracy: the next token's
    total = count = 0.0
    seconds = 0.0
    with torch.inference_mode():
        for i, batch in enumerate(batches):
            if "labels" not in batch:
                raise ValueError(
                    f"calibrate compares settings by the task loss or accuracy against each batch's labels: batch {i} "
                    f"has none (keys {sorted(batch)}). Give every batch its `labels`."
                )
            inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            labels = inputs.pop("labels") if metric == "accuracy" else inputs["labels"]
            counted = (labels[..., 1:] if causal else labels).ne(-100)
            start = time.perf_counter()
            out = model(**inputs, use_cache=False) if _takes_use_cache(model) else model(**inputs)
            seconds += time.perf_counter() - start
            n = float(counted.sum())
            if metric == "accuracy":
                predicted = out.logits.argmax(-1)
                if causal:
                    predicted, labels = predicted[..., :-1], labels[..., 1:]
                total += float((predicted == labels)[counted].sum())
                count += n
            else:
                task_loss = getattr(out, "task_loss", None)  # ot_reg_in_loss: `loss` is task + lambda * reg
                total += float(out.loss if task_loss is None else task_loss) * n
                count += n
    return total / max(count, 1.0), seconds / max(len(batches), 1)


def _takes_use_cache(model) -> bool:
    import inspect

    return "use_cache" in inspect.signature(type(model).forward).parameters


def check_tolerance(metric: str, tolerance: float | None) -> float:
    """The tolerance for `metric` (None: its default): finite, >= 0, and below 1 for accuracy, a fraction."""
    from .errors import UsageError

    tolerance = DEFAULT_TOLERANCE[metric] if tolerance is None else float(tolerance)
    if not math.isfinite(tolerance) or tolerance < 0:
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}.")
    if metric == "accuracy" and tolerance >= 1:  # accuracy is in [0, 1]: every setting would be within it
        raise UsageError(
            f"An accuracy tolerance is a fraction (0.01 is 1 point); {tolerance:g} accepts every setting. Give a "
            "fraction below 1."
        )
    return tolerance


def calibrate(
    model,
    batches: Sequence[dict],
    *,
    metric: str = "loss",
    tolerance: float | None = None,
    solvers: Iterable[str] = GRID_SOLVERS,
    max_steps: int | None = None,
    evaluate: Callable[[Any, Sequence[dict], str], tuple[float, float]] = evaluate_batches,
    accelerator=None,
    progress: bool = True,
) -> Calibration:
    """Evaluate `model` on `batches` (model inputs; `labels` in each) at every solver x M' in 1..max_steps (default
    twice the trained M) and pick the cheapest setting within `tolerance` of the trained setting's metric (default
    DEFAULT_TOLERANCE[metric]). Cheapest: fewest field evaluations, then the better metric, then the faster. The
    metric is the task loss (`task_loss` when `ot_reg_in_loss` puts lambda * reg into `loss`) or the accuracy. An
    encoder-decoder's trained row is its exact trained (encoder M, decoder M) setting; each grid row sets both stacks
    to M' and costs the sum over the stacks. The model's settings are restored afterwards.

    With `accelerator` (accelerate's Accelerator or PartialState) the grid points are dealt across its processes,
    costliest first, each evaluated whole on the model's device, and every process returns the same calibration
    (the metrics those of one process; the seconds measured where each point ran). The main process shows a
    progress bar of its share."""
    if metric not in DEFAULT_TOLERANCE:
        raise ValueError(f"metric must be one of {sorted(DEFAULT_TOLERANCE)}, got {metric!r}.")
    tolerance = check_tolerance(metric, tolerance)
    config = model.config
    if not hasattr(config, "ot_num_steps"):
        raise ValueError(f"calibrate applies to hf_ot OT models; {type(model).__name__} is not one.")
    if not batches:
        raise ValueError("calibrate needs at least one batch of validation data.")
    saved = _settings(config)
    trained_steps, trained_solver = trained_setting(config)
    two_stacks = bool(getattr(config, "is_encoder_decoder", False))
    # (solver, encoder M', decoder M' as set in the config: None = follows the encoder's, or one stack)
    trained_key = (trained_solver, trained_steps, _trained_decoder_steps(config) if two_stacks else None)
    if trained_key[2] == trained_steps:
        trained_key = (trained_solver, trained_steps, None)  # the same grid point as the shared setting
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps={max_steps!r}: give the largest M' of the grid, an integer >= 1 (None: 2M).")
    max_steps = max_steps or 2 * trained_steps
    solvers = list(solvers)
    if not solvers or any(solver not in GRID_SOLVERS for solver in solvers):  # adaptive ones: no fixed cost per M'
        raise ValueError(f"solvers={solvers!r}: give fixed-grid solvers of {list(GRID_SOLVERS)} (one or more).")
    grid: list[tuple[str, int, int | None]] = [(solver, m, None) for solver in solvers for m in range(1, max_steps + 1)]
    if trained_key not in grid:
        grid.append(trained_key)
    was_training = model.training
    model.eval()

    def evaluations(solver: str, steps: int, decoder_steps: int | None) -> int:
        return (steps + ((decoder_steps or steps) if two_stacks else 0)) * num_stages(solver)

    def evaluate_point(point: tuple[str, int, int | None]) -> CalibrationRow:
        solver, steps, decoder_steps = point
        _apply(config, steps, solver, decoder_steps)
        value, seconds = evaluate(model, batches, metric)
        decoder = (decoder_steps or steps) if two_stacks else None
        cost = evaluations(solver, steps, decoder_steps)
        return CalibrationRow(solver, steps, cost, value, seconds, decoder_num_steps=decoder)

    # on many processes the costliest points are dealt first, so that the processes finish together
    costliest_first = sorted(range(len(grid)), key=lambda i: -evaluations(*grid[i]))
    order = costliest_first if accelerator is not None and accelerator.num_processes > 1 else None
    check_same_work(accelerator, "calibrate", batches=digest(list(batches)), grid=digest(grid), metric=metric)
    try:
        rows = map_across_processes(
            evaluate_point, grid, accelerator, order=order, desc="solver x M' grid", progress=progress
        )
    finally:
        for key, value in saved.items():
            if value is not None or hasattr(config, key):
                setattr(config, key, value)
        model.train(was_training)
    trained = rows[grid.index(trained_key)]
    if not math.isfinite(trained.metric):  # no setting is within a tolerance of NaN
        raise UsageError(
            f"The model's {metric} at its trained setting is {trained.metric}, not a number: its weights hold NaN or "
            "inf (a diverged run or a damaged save). Retrain it, or calibrate an earlier checkpoint of it."
        )
    for row in rows:
        if metric == "loss":
            row.within_tolerance = row.metric <= trained.metric + tolerance
        else:
            row.within_tolerance = row.metric >= trained.metric - tolerance
    sign = 1.0 if metric == "loss" else -1.0
    candidates = [r for r in rows if r.within_tolerance]
    choice = min(candidates, key=lambda r: (r.field_evaluations, sign * r.metric, r.seconds_per_batch))
    if choice.field_evaluations >= trained.field_evaluations:
        choice = trained
        message = (
            f"{NO_CHEAPER}: no setting with fewer than the trained {trained.field_evaluations} field "
            f"evaluations keeps the {metric} within {tolerance:g} of {trained.metric:.4f}."
        )
    else:
        message = (
            f"{choice.solver} at M'={_steps_label(choice)}: {choice.field_evaluations} field evaluations instead of "
            f"{trained.field_evaluations} ({choice.field_evaluations / trained.field_evaluations:.0%}), "
            f"{metric} {choice.metric:.4f} against the trained {trained.metric:.4f} (tolerance {tolerance:g})."
        )
    return Calibration(metric, tolerance, trained, rows, choice, message)


def _steps_label(row: CalibrationRow) -> str:
    """M' of a row: "4", or "4 / 2" (encoder / decoder) where an encoder-decoder's stacks differ."""
    if row.decoder_num_steps is None or row.decoder_num_steps == row.num_steps:
        return str(row.num_steps)
    return f"{row.num_steps} / {row.decoder_num_steps}"


# -------------------------------------------------------------------------------------------------- the folder


def calibration_table(result: Calibration) -> str:
    """The calibration as a Markdown table (one row per setting; the trained and the chosen one marked)."""
    two = any(r.decoder_num_steps is not None for r in result.rows)
    lines = [
        f"| solver | M'{' (encoder / decoder)' if two else ''} | field evaluations | {result.metric} | s / batch "
        "| within tolerance |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in sorted(result.rows, key=lambda r: (r.field_evaluations, r.solver, r.num_steps)):
        marks = [m for m, hit in (("trained", r is result.trained), ("chosen", r is result.choice)) if hit]
        name = r.solver + (f" ({', '.join(marks)})" if marks else "")
        lines.append(
            f"| {name} | {_steps_label(r)} | {r.field_evaluations} | {r.metric:.4f} | "
            f"{r.seconds_per_batch:.4f} | {'yes' if r.within_tolerance else 'no'} |"
        )
    return "\n".join(lines)


def plot_calibration(result: Calibration, path: Path) -> Path:
    """Cost/quality figure: the metric over field evaluations, one line per solver, the tolerance band dotted."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for solver in dict.fromkeys(r.solver for r in result.rows):
        points = sorted((r.field_evaluations, r.metric) for r in result.rows if r.solver == solver)
        ax.plot(*zip(*points), marker="o", label=solver)
    limit = result.trained.metric + (result.tolerance if result.metric == "loss" else -result.tolerance)
    ax.axhline(limit, linestyle=":", color="gray", label="tolerance")
    ax.plot([result.trained.field_evaluations], [result.trained.metric], "k*", markersize=12, label="trained")
    ax.plot(
        [result.choice.field_evaluations], [result.choice.metric], "rs", fillstyle="none", markersize=12, label="chosen"
    )
    ax.set_xlabel("field evaluations per forward")
    ax.set_ylabel(result.metric)
    ax.set_title("depth calibration")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _card_section(result: Calibration, chosen: bool = True) -> str:
    where = (
        f"The config holds the chosen setting; the trained one is kept under `{CONFIG_KEY}` "
        "(`hf_ot.restore_trained_setting(model)` restores it)."
        if chosen
        else "The config keeps the trained setting; `hf-ot calibrate MODEL --config RECIPE --write` adopts the chosen "
        "one (or set `model.config.ot_solver` / `ot_num_steps` yourself)."
    )
    return "\n".join(
        [
            CARD_BEGIN,
            "## Depth calibration",
            "",
            f"Validation {result.metric} at every solver and number of steps M' (field evaluations per forward = M' x "
            f"the solver's stages). {result.message} {where}",
            "",
            calibration_table(result),
            "",
            f"![cost and quality of solver settings]({FIGURE})",
            CARD_END,
        ]
    )


def _settings_table(card: str, values: dict[str, Any]) -> str:
    """hf_ot's card with its "OT settings" table showing the setting config.json holds (the trained one named)."""
    head, found, rest = card.partition("## OT settings")
    if not found:
        return card
    table, section, tail = rest.partition("\n## ")
    trained = values[CONFIG_KEY]["trained"]
    steps = str(values["ot_num_steps"])
    if (values["ot_num_steps"], values["ot_solver"]) != (trained["ot_num_steps"], trained["ot_solver"]):
        steps += f" (calibrated; trained: {trained['ot_num_steps']}, `{trained['ot_solver']}`)"
    rows = {"solver": f"`{values['ot_solver']}`", "steps M": steps}
    lines = table.split("\n")
    for i, line in enumerate(lines):
        cells = line.split("|")
        key = cells[1].strip() if line.startswith("| ") else None
        if key == "decoder M / T" and values.get("ot_decoder_num_steps") is not None:  # (its T stays)
            rows[key] = f"{values['ot_decoder_num_steps']} / {cells[2].split('/')[-1].strip()}"
        if key in rows:
            lines[i] = f"| {key} | {rows[key]} |"
    table = "\n".join(lines)
    return head + found + table + section + tail


CARD_FIX = "Move the card away (or shorten it), or calibrate without --write."
CARD_BYTES = 16 << 20  # a model card is text of a few KB; larger is not a card hf_ot reads


def _card_head(card: Path) -> str:
    """The start of a card, where its metadata is (a README of any size is not read whole)."""
    from .cards import MAX_CARD_METADATA_BYTES

    with open(card, encoding="utf-8", errors="replace") as f:
        return f.read(MAX_CARD_METADATA_BYTES)


def is_hf_ot_card(text: str) -> bool:
    """A model card hf_ot wrote: its metadata (between the first two '---' lines) tags hf_ot."""
    parts = text.split("---", 2)
    return text.startswith("---") and len(parts) == 3 and "- hf_ot" in parts[1]


def check_ours_to_write(folder, choose: bool = True) -> Path:
    """The card write_calibration writes in FOLDER (README.md, or CALIBRATION.md beside the user's own README); a
    UsageError where hf_ot cannot show it wrote a file that would be replaced (in a folder without a manifest: none)."""
    card = (folder := Path(folder)) / "README.md"
    if card.is_file() and not is_hf_ot_card(_card_head(card)):
        card = folder / "CALIBRATION.md"  # a user's own README: left as it is
    names = [card.name, FIGURE] + (["config.json"] if choose else [])
    ours = ours_to_edit(folder, names)
    if theirs := [name for name in names if name not in ours and os.path.lexists(folder / name)]:
        fix = f"Move {'it' if len(theirs) == 1 else 'them'} away (or rename)"
        fix = fix if (folder / MANIFEST).is_file() else "Save the model into a new folder with hf_ot.save_model"
        raise UsageError(
            f"{folder} holds {', '.join(str(folder / n) for n in theirs)}, which hf_ot cannot show it wrote (not "
            f"listed unchanged in its {MANIFEST}): calibrate --write never replaces a file of yours. {fix}, or "
            "calibrate without --write."
        )
    return card


def write_calibration(folder, result: Calibration, choose: bool = True, save_id: str | None = None) -> dict[str, str]:
    """Write the figure and the card section into FOLDER and, with `choose`, store the chosen setting in its
    config.json (the trained one kept under `hf_ot_calibration`). Each file is replaced whole (a kill leaves the
    earlier file or the new one), and the files hf_ot rewrote stay listed as its own in the folder's manifest, so a
    later save may still replace the folder. Returns the paths written."""
    import io

    from .run_folders import edit_files

    folder = Path(folder)
    config_path = folder / "config.json"
    values = read_json(config_path, "Save the model again.")
    if not str(values.get("model_type", "")).startswith("ot_"):
        raise ValueError(f"{folder} holds no hf_ot model (its config.json has no ot_* model_type).")
    card = check_ours_to_write(folder, choose)  # before anything is written
    text = read_bounded(card, CARD_FIX, CARD_BYTES).decode() if card.is_file() else None
    written: dict[str, str] = {}
    contents: dict[str, str | bytes] = {}
    if choose:
        trained = values.get(CONFIG_KEY, {}).get("trained") or {
            "ot_num_steps": result.trained.num_steps,
            "ot_solver": result.trained.solver,
            "ot_decoder_num_steps": values.get("ot_decoder_num_steps"),
        }
        values["ot_num_steps"], values["ot_solver"] = result.choice.num_steps, result.choice.solver
        if values.get("ot_decoder_num_steps") is not None:
            values["ot_decoder_num_steps"] = result.choice.decoder_num_steps or result.choice.num_steps
        values[CONFIG_KEY] = {
            "trained": trained,
            "chosen": {"ot_num_steps": result.choice.num_steps, "ot_solver": result.choice.solver},
            "metric": result.metric,
            "tolerance": result.tolerance,
            "message": result.message,
        }
        contents["config.json"] = json.dumps(values, indent=2, sort_keys=True) + "\n"
        written["config"] = str(config_path)
    figure = io.BytesIO()
    as_file: Any = figure  # savefig takes a file object
    plot_calibration(result, as_file)
    contents[FIGURE] = figure.getvalue()
    written["figure"] = str(folder / FIGURE)
    section = _card_section(result, choose)
    if text is None:
        text = section + "\n"
    elif CARD_BEGIN in text and CARD_END in text:
        before, rest = text.split(CARD_BEGIN, 1)
        text = before + section + rest.split(CARD_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    if choose and card.name == "README.md":
        text = _settings_table(text, values)
    contents[card.name] = text
    written["card"] = str(card)
    # all or nothing: the figure, the card and the config (the setting the model loads with), listed in the manifest,
    # swapped in with the folder in one step that Ctrl-C waits for
    edit_files(folder, {n: contents[n] for n in (FIGURE, card.name, "config.json") if n in contents}, save_id)
    return written


def restore_trained_setting(model) -> tuple[int, str]:
    """Put a calibrated model back on the setting it was trained with (kept in its config by write_calibration)."""
    config = model.config
    steps, solver = trained_setting(config)
    stored = getattr(config, CONFIG_KEY, None) or {}
    decoder_steps = (stored.get("trained") or {}).get("ot_decoder_num_steps")
    config.ot_num_steps, config.ot_solver = steps, solver
    if decoder_steps is not None:
        config.ot_decoder_num_steps = decoder_steps
    config.validate_ot_settings()
    return steps, solver
