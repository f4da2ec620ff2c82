"""What every `hf-ot` command shares: argument types (a bad value is a usage error, exit 2), model arguments that are
a local folder or a Hub id, and the outcome a command returns."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import OK, require
from ..models.ot_config import SETTING_OF_FIELD
from ..run_folders import local_or_hub, no_local_folder  # noqa: F401  (the commands' model arguments)


@dataclass
class Outcome:
    """What a command returns: its result (printed as JSON and written to a file), or None when it has none (train
    interrupted); the exit code; the result file it writes by default (train's results.json); and whether
    the result is printed (env prints a list instead)."""

    result: Any = None
    exit_code: int = OK
    result_file: Path | None = None
    print_result: bool = True


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def noise_rate(text: str) -> float:
    """argparse type: a fraction of tokens, 0 <= rate <= 1."""
    rate = _number(text)
    if not 0.0 <= rate <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction of tokens between 0 and 1")
    return rate


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (counts that are no OT setting: --max-batches)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


def ot_setting(field: str) -> Callable[[str], Any]:
    """argparse type of an OT setting: the text read by the setting's type in OT_SETTINGS (as a recipe reads it) and
    refused by that table's check, with its message, before anything loads."""
    setting = SETTING_OF_FIELD[field]

    def parse(text: str) -> Any:
        from ..recipes.config import from_text

        try:
            value = from_text(text, setting.type)
        except ValueError:
            value = text  # the message names the text as given
        problem = setting.problem(value)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__ = field  # argparse names the type in its messages
    return parse


class _EarlierFlag(argparse.Action):
    """An earlier spelling of an OT setting's flag (--num-steps): still works, hidden from the help, with a warning
    naming the flag of the setting's one name (--ot-num-steps, from its dest)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        if is_main_process():
            new = "--" + self.dest.replace("_", "-")
            print(f"hf-ot: warning: {option_string} is deprecated, use {new}.", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_ot_argument(p: argparse.ArgumentParser, field: str, help: str, *old_flags: str, **kwargs: Any) -> None:
    """An option setting an OT field, --ot-num-steps for ot_num_steps (dest: the field): its type, the choices in the
    usage line and the allowed values in the help all come from the field's row of OT_SETTINGS; `old_flags`: the
    command's earlier spellings, deprecated."""
    setting = SETTING_OF_FIELD[field]
    if setting.choices is not None:
        kwargs.setdefault("metavar", "{" + ",".join(setting.choices) + "}")
    bounds = "" if "choices" in kwargs else f"; {setting.bounds()}"  # (choices narrower than the setting's: said)
    p.add_argument(setting.flag, dest=field, type=ot_setting(field), help=help + bounds, **kwargs)
    if old_flags:  # (no default of its own: it would replace the flag's)
        kwargs["default"] = argparse.SUPPRESS
        p.add_argument(
            *old_flags, dest=field, type=ot_setting(field), action=_EarlierFlag, help=argparse.SUPPRESS, **kwargs
        )


def recipe(text: str) -> str:
    """argparse type for a recipe argument: a data file given there (hf-ot train my.csv) is named as such, with the
    way to train on it (it was "must be a mapping of sections" or a YAML error)."""
    name = text.lower().removesuffix(".gz").removesuffix(".bz2").removesuffix(".xz")
    if name.endswith((".csv", ".tsv", ".jsonl", ".parquet", ".txt", ".arrow")) and Path(text).expanduser().is_file():
        raise argparse.ArgumentTypeError(
            f"{text!r} is data, not a recipe: give it to one, e.g. `hf-ot train sst2_minilm --set "
            f"data.train_file={text}` (a classifier; quickstart: a language model on text; translation_t5: pairs). "
            "README: Train on your own data"
        )
    return text


def name_equals_folder(text: str) -> tuple[str, str]:
    """argparse type for robustness --models: NAME=FOLDER."""
    name, sep, folder = text.partition("=")
    if not sep or not name or not folder:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not NAME=FOLDER (e.g. ot=runs/quickstart/model): the name "
            "labels the model's row in the table and plot"
        )
    return name, folder


def add_trust_remote_code(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run the Python files of a model folder whose code is not hf_ot's (its config's auto_map); "
        "hf_ot's own models never need it. Only for folders you trust, as in transformers",
    )


def add_overrides(p: argparse.ArgumentParser, help: str | None = None) -> None:
    # the recipe's data unless told: a model trained on your files is evaluated on them with --set data.train_file
    help = help or "override a recipe key (repeatable), e.g. --set data.train_file=my.csv for your own data"
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=help)


def run_on_model_folder(
    args: argparse.Namespace, function: Literal["evaluate_folder", "calibrate_folder"], **options: Any
) -> Outcome:
    """What `evaluate` and `calibrate` share: hf_ot.recipes.evaluate.<function> on the MODEL argument (a local folder,
    checked before anything loads, or a Hub id) with the data of the recipe --config and --set, running a folder's own
    code only under --trust-remote-code; `options` are the command's own arguments."""
    require("train", "accelerate", "datasets")
    from ..recipes import evaluate, load_config

    model, cfg = local_or_hub(args.model, "MODEL"), load_config(args.config, args.set)
    data = check_data_of(model, cfg, args.set)
    results = getattr(evaluate, function)(
        model, cfg, overrides=args.set, trust_remote_code=args.trust_remote_code, **options
    )
    end_distributed()
    return Outcome({**results, "data": data})


def check_data_of(model: str, cfg: Any, overrides: list[str]) -> str:
    """The name of the data a recipe config evaluates (data.validation_file alone where given), as a card names it; a
    warning when no --set chose the data and a local model's card names other data: a model trained on your files
    was measured, without a word, on the recipe's own data."""
    from dataclasses import replace

    from ..cards import dataset_names_of
    from ..recipes.config import DATA_KEYS
    from ..recipes.data import LINE_KEYS
    from ..recipes.run import card_data

    name = " ".join(str(card_data(cfg)["name"]).split())
    keys = (o.partition("=")[0].strip() for o in overrides)
    chosen = any(k.startswith("data.") and k[5:] in DATA_KEYS for k in keys)  # (the keys that say which data)
    trained = dataset_names_of(model) if Path(model).is_dir() and not chosen else set()
    if trained and name not in trained and is_main_process():  # (once under torchrun)
        print(
            f"hf-ot: warning: {model}'s card reports results on {', '.join(sorted(trained))}; this reads {name}, "
            "the data of the recipe. To use the model's data, give its files: --set data.train_file=PATH "
            "(and data.validation_file).",
            file=sys.stderr,
        )
    if (data := cfg.data).validation_file or data.validation_source:  # evaluated: those alone (evaluation_split)
        lines = {k: getattr(data, f"validation{k[5:]}") if k[:5] == "train" else None for k in LINE_KEYS}
        data = replace(data, train_file=data.validation_file, dataset=None, source="file", **lines)
        return " ".join(str(card_data(replace(cfg, data=data))["name"]).split())
    return name


def end_distributed() -> None:
    """Under torchrun / accelerate launch: leave the process group cleanly (gloo can crash at exit otherwise)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def is_main_process() -> bool:
    """Rank 0 under torchrun / accelerate launch (they set RANK); always true on one process."""
    return int(os.environ.get("RANK", "0")) == 0
