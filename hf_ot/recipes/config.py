"""Recipe configs: typed sections read from YAML 1.2 and `--set key=value`, checked by one walk over their fields."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import json
import math
import operator
import os
import re
import types
import typing
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml
from huggingface_hub.dataclasses import type_validator

from ..errors import UsageError
from ..redaction import hide_secrets, is_secret_key, remember_secrets

TASKS = ("causal-lm", "sequence-classification", "translation")


def _given(value, default):
    """value, or default where it is None (a key not set: its default applies)."""
    return default if value is None else value


def _key(help: str, default=None, **bounds):
    """A config key: its default (None: its reader applies the one the help names), help and bounds (min=...)."""
    return field(default=default, metadata={"help": help, **bounds})


@dataclass
class ModelSection:
    base: str | None = _key("a Hub id, a local model folder or minilm (the embedded MiniLM), converted to OT")
    scratch: dict | None = _key("a model built from scratch: {family, ...its transformers config's fields: n_layer}")
    ot: dict | None = _key("OT settings: the model config's ot_* fields; not given: their defaults; null: the baseline")


@dataclass
class DataSection:
    source: typing.Literal["embedded", "file", "hub"] | None = _key(
        "embedded (Python's manual), file or hub; default: hub with data.dataset, file with a train file, else embedded"
    )
    train_file: str | None = _key(
        "training data: a CSV/TSV/JSON(L)/Parquet/text file, folder, glob or saved dataset", resume="by_content"
    )
    validation_file: str | None = _key(
        "validation data, as train_file; also with train_source (default: val_fraction)", resume="by_content"
    )
    format: typing.Literal["csv", "tsv", "json", "jsonl", "parquet", "arrow", "text"] | None = _key(
        "format of the data files (default: by extension, else content, else text / csv / json by task)"
    )
    field: str | None = _key("JSON: the key of the file's one object that holds the rows (datasets' field)")
    encoding: str | None = _key("text encoding of the files (default utf-8; a byte order mark is skipped)")
    train_source: str | None = _key(
        "translation: source sentences, one a line (aligned with train_target)", resume="by_content"
    )
    train_target: str | None = _key("translation: target sentences, one a line", resume="by_content")
    validation_source: str | None = _key(
        "translation: validation sentences, one a line (or: validation_file)", resume="by_content"
    )
    validation_target: str | None = _key("translation: validation target sentences, one a line", resume="by_content")
    test_source: str | None = _key(
        "translation: test sentences, one a line (scored after training: test_bleu, ...)", resume="by_content"
    )
    test_target: str | None = _key("translation: test target sentences, one a line", resume="by_content")
    dataset: str | None = _key("a Hub dataset id (online) or a folder of train* / validation* files")
    dataset_config: str | None = _key("the Hub dataset's configuration name (e.g. sst2)")
    train_split: str | None = _key("the split to train on (default train)")
    validation_split: str | None = _key("the split to validate on (default validation; absent: val_fraction of train)")
    test_split: str | None = _key("translation: the split scored after training as test_bleu, ... (default test)")
    streaming: bool | None = _key("causal-lm: stream the text instead of caching it in Arrow files (default false)")
    validation_rows: int | None = _key("streaming without validation data: rows held out (default 1000)", min=1)
    text_column: str | None = _key("column of the text (default: text, else sentence)")
    label_column: str | None = _key("classification: column of the labels (default label)")
    source_column: str | None = _key("translation: column of the source text (default source, else de)")
    target_column: str | None = _key("translation: column of the target text (default target, else en)")
    num_labels: int | None = _key("classification: number of classes (default: from the labels)", min=2)
    label_names: list | None = _key("classification: class names in id order (default: string labels found, sorted)")
    val_fraction: float | None = _key("training share held out without validation data (default 0.1)", gt=0, lt=1)
    block_size: int | None = _key("causal-lm: tokens per training block (default 128)", min=2)
    stride: int | None = _key("causal-lm: tokens between block starts (default block_size: no overlap)", min=1)
    max_length: int | None = _key("classification/translation: tokens per text, more truncated (default 64)", min=1)
    max_train_blocks: int | None = _key("causal-lm: use at most this many training blocks", min=1)
    max_eval_blocks: int | None = _key("causal-lm: use at most this many validation blocks", min=1, resume="may_change")
    max_train_samples: int | None = _key("use at most this many training examples (a seeded random subset)", min=1)
    max_eval_samples: int | None = _key(
        "use at most this many validation examples (the first ones)", min=1, resume="may_change"
    )
    num_proc: int | None = _key("processes tokenizing the data (datasets' map num_proc)", min=1, resume="may_change")
    vocab_size: int | None = _key("tokenizer bpe: vocabulary of the BPE trained on the data (default 4000)", min=1)
    source_prefix: str | None = _key("translation: text put before every source (T5: 'translate German to English: ')")

    def kind(self) -> str:
        """Where the data comes from: data.source, else inferred from the keys that are set."""
        if self.source is not None or self.dataset is not None:
            return self.source or "hub"
        return "file" if (self.train_file or self.train_source) is not None else "embedded"

    @classmethod
    def of(cls, data: DataSection | Mapping) -> DataSection:
        """`data` (a mapping of its keys, or a DataSection) as a DataSection, checked (keys, types and bounds)."""
        values = dataclasses.asdict(data) if isinstance(data, DataSection) else dict(data)
        _check(values, _schema()["data"].children or {}, "data.")
        _check_classes(values)
        return cls(**values)


def _check_classes(data: dict) -> None:
    """data.label_names: two names or more, each once, as many as data.num_labels (checked before data is read)."""
    names, count = data.get("label_names"), data.get("num_labels")
    if names is not None and len(names) < 2:  # (one output: a regression in transformers)
        raise UsageError(
            f"data.label_names={list(names)} holds {len(names)} name(s): a classifier needs two classes or more. Name "
            "them all in id order, or drop it (the labels found)."
        )
    if names and any(list(names).count(n) > 1 for n in names):  # (not a set: a name may be a list, named later)
        raise UsageError(f"data.label_names={list(names)} names a class more than once: name each class once.")
    if names and count is not None and count != len(names):
        raise UsageError(
            f"data.num_labels={count} but data.label_names names {len(names)} classes: drop data.num_labels (the "
            "names set it) or make them agree."
        )


@dataclass
class EvaluationSection:
    metrics: list | None = _key("causal-lm/translation: text metrics: bleu, rouge, bertscore (default bleu, rouge)")
    batch_size: int | None = _key("batch size of hf-ot evaluate and of generation (default 16)", min=1)
    max_batches: int | None = _key("evaluate at most this many batches", min=1)
    elasticity: bool | None = _key("after training: the metric per solver x M' (1..2M), the cheapest within tolerance")
    elasticity_max_steps: int | None = _key("largest M' of the elasticity grid (default 2M)", min=1)
    generate_samples: int | None = _key("translation: sentences translated for BLEU/ROUGE (default 100)", min=1)
    max_new_tokens: int | None = _key("translation: longest generated translation, in tokens", min=1)
    num_beams: int | None = _key("translation: beam size of generation (default 1: greedy)", min=1)


@dataclass
class CardSection:
    dataset_name: str | None = _key("the data's name on the model card (default: the Hub id, or the file names)")
    dataset_type: str | None = _key("the data's Hub id in the card's model-index (default: data.dataset, or custom)")
    datasets: list | None = _key("Hub dataset ids in the card's metadata (default: [data.dataset] for Hub data)")
    license: str | None = _key("the model's license on the card (e.g. apache-2.0)")
    language: typing.Union[str, list, None] = _key("language code(s) on the card (e.g. en)")


@dataclass
class RecipeConfig:
    """A recipe, typed (`config.data.block_size`); a field that is None was not set: its reader applies its default."""

    task: str = field(metadata={"help": "causal-lm, sequence-classification or translation (or a pipeline name)"})
    output_dir: str | None = _key(
        "where the run goes: OUTPUT_DIR/model, OUTPUT_DIR/results.json (default runs/TASK)", resume="may_change"
    )
    tokenizer: str | None = _key(
        "char (causal-lm: built from the text), bpe (translation: trained on the pairs), minilm, a Hub id or a folder"
        " (default: the base's)"
    )
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    # (what a resumed run may change: metadata "resume", read by recipes/resume.py)
    evaluation: EvaluationSection = field(default_factory=EvaluationSection, metadata={"resume": "may_change"})
    card: CardSection = field(default_factory=CardSection, metadata={"resume": "may_change"})
    training: dict = field(default_factory=dict)  # OTSeq2SeqTrainingArguments fields (checked as those, _schema)

    @classmethod
    def from_dict(cls, config: dict) -> RecipeConfig:
        """The typed config of a config dict (checked: unknown keys and wrong types raise UsageError)."""
        config = check_config(copy.deepcopy(config))
        sections = {k: SECTIONS[k](**(config.pop(k) or {})) for k in SECTIONS if k in config}
        return cls(**{k: v for k, v in config.items() if v is not None or k != "training"}, **sections)

    def to_dict(self) -> dict:
        """The config as a dict of sections with the keys that are set (YAML's shape; model.ot null: a baseline)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        for name in SECTIONS:
            out[name] = {k: v for k, v in out[name].items() if v is not None or (name, k) == ("model", "ot")}
        return out

    @property
    def is_ot(self) -> bool:
        """An OT model (model.ot set); model.ot null is the plain transformers model, a baseline."""
        return self.model.ot is not None

    def resolved_output_dir(self) -> Path:
        """output_dir (default runs/TASK), relative to the current folder."""
        return Path(self.output_dir or f"runs/{self.task}").expanduser().resolve()

    def trainer_dir(self, output_dir: Path | str) -> Path:
        """Where Trainer writes its checkpoints: training.output_dir, else OUTPUT_DIR/trainer."""
        return Path(self.training.get("output_dir") or Path(output_dir) / "trainer")


# The recipes' TrainingArguments defaults: evaluate and save every 1/5 of the run, keep 2 checkpoints; DDP: all used.
TRAINING_DEFAULTS = dict(report_to="none", logging_steps=10, seed=1337, dataloader_num_workers=0)
TRAINING_DEFAULTS |= dict(save_strategy="steps", eval_strategy="steps", eval_steps=0.2, save_steps=0.2)
TRAINING_DEFAULTS |= dict(save_total_limit=2, ddp_find_unused_parameters=False)

SECTIONS = {"model": ModelSection, "data": DataSection, "evaluation": EvaluationSection, "card": CardSection}


def scratch_config_class(family: typing.Any):
    """The family's transformers config class (GPT2Config for gpt2); an unknown family is refused, naming them."""
    from ..registry import FAMILIES

    if family not in FAMILIES:
        raise UsageError(f"model.scratch.family must be one of {sorted(FAMILIES)}, got {family!r}.")
    return next(k for k in FAMILIES[family].config_class.__mro__ if k.__dict__.get("model_type") == family)


MAX_RECIPE_BYTES = 1 << 20  # a recipe is a few KB; PyYAML would take minutes over a 50 MB line
MAX_NESTING = 50  # a recipe nests 3 deep; PyYAML composes recursively (a RecursionError thousands deep)


class _RecipeLoader(yaml.BaseLoader):
    """Scalars as text, each converted later by the type its key declares (`3e-4`, `no`, `010` as written); `null`,
    `~` and an empty value as None; a key twice refused, with its line."""

    def construct_mapping(self, node, deep=False):
        lines: dict = {}
        for key in (k for k, _ in node.value if isinstance(k, yaml.ScalarNode)):
            if key.value in lines:
                problem = f"the key {key.value!r} is given twice (first on line {lines[key.value]}): keep one of them"
                raise yaml.constructor.ConstructorError(None, None, problem, key.start_mark)
            lines[key.value] = key.start_mark.line + 1
        return super().construct_mapping(node, deep)


_RecipeLoader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), [*"~nN", ""])
_RecipeLoader.add_constructor("tag:yaml.org,2002:null", lambda loader, node: None)


def _load_yaml(text: str, what: str):
    try:  # aliases and deep nesting refused, with the line, before PyYAML composes (recursively) what they make
        depth = 0
        for event in yaml.parse(text, Loader=_RecipeLoader):
            depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
            if isinstance(event, yaml.AliasEvent) or depth > MAX_NESTING:
                problem = "aliases (*name) are not accepted in recipes: write the value out"
                if depth > MAX_NESTING:
                    problem = f"values nested more than {MAX_NESTING} deep are not accepted in recipes"
                raise yaml.MarkedYAMLError(problem=problem, problem_mark=event.start_mark)  # type: ignore[arg-type]
        return yaml.load(text, Loader=_RecipeLoader)  # noqa: S506 (a BaseLoader: text, lists, mappings, None)
    except yaml.YAMLError as err:
        # the message quotes the line: a token written on one is hidden
        remember_secrets({k: v.strip("'\" ") for k, v in re.findall(r"([\w.-]+)[ \t]*:[ \t]*(.+)", text)})
        unquoted = re.search("alias|anchor|cannot start", str(err)) is not None
        hint = " Put a value that starts with * & @ ` (a glob *.csv) in quotes." * unquoted
        hint = " Indent with spaces: YAML takes no tabs." if "'\\t'" in str(err) else hint
        raise UsageError(hide_secrets(f"{what}: {err}{hint}")) from None


def read_yaml(path: Path) -> dict:
    with open(path, "rb") as f:
        data = f.read(MAX_RECIPE_BYTES + 1)
    if len(data) > MAX_RECIPE_BYTES:
        raise UsageError(
            f"Recipe config {path} is larger than {MAX_RECIPE_BYTES >> 20} MB: a recipe is a few KB (data is in files)."
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UsageError(f"Recipe config {path} is not UTF-8 text (byte {err.start}): save it as UTF-8.") from None
    config = _load_yaml(text, f"Recipe config {path} is not valid YAML")
    if config is None:
        raise UsageError(f"Recipe config {path} is empty: give a recipe (e.g. a copy of a packaged one to edit).")
    if not isinstance(config, dict):
        raise UsageError(f"Recipe config {path} must be a mapping of sections, got {type(config).__name__}.")
    return config


def packaged_configs() -> dict[str, Path]:
    """name -> path of every config that ships with hf_ot (recipes/configs in a checkout)."""
    beside = Path(__file__).resolve().parents[2] / "recipes" / "configs"  # a checkout's: those of this code
    folder = beside if beside.is_dir() else resources.files("hf_ot.recipe_configs")
    return {Path(str(p)).stem: Path(str(p)) for p in folder.iterdir() if str(p).endswith(".yaml")}


def resolve_config(name_or_path: str) -> Path:
    """A YAML file's path, or a packaged config's name (quickstart, or recipes/configs/quickstart.yaml)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    packaged = packaged_configs()
    stem = path.name.removesuffix(".yaml")
    if stem in packaged and (len(path.parts) == 1 or path.parent.as_posix().endswith("recipes/configs")):
        return packaged[stem]
    if path.exists():  # a folder, device, pipe or socket
        problem = "is a folder" if path.is_dir() else "is not a regular file (a device, pipe or socket)"
        raise UsageError(f"Recipe config {name_or_path!r} {problem}: give a YAML file, or a packaged config's name.")
    raise UsageError(f"Recipe config {name_or_path!r} not found: give a YAML file or one of {sorted(packaged)}.")


class Key(typing.NamedTuple):  # one config key; `children`: the keys of a section (a mapping or null)
    type: typing.Any
    default: typing.Any = None
    help: str = ""
    children: dict | None = None
    bounds: Mapping = {}


def _keys(cls, defaults: Mapping = {}) -> dict[str, Key]:  # noqa: B006 (read only)
    """The Keys of a dataclass's fields; a field that is itself a dataclass is a section of its fields' Keys."""
    hints, keys = typing.get_type_hints(cls), {}
    for f in (f for f in dataclasses.fields(cls) if f.init):
        hint, help = hints[f.name], f.metadata.get("help", "").split("\n")[0]
        default = defaults.get(f.name, None if f.default is dataclasses.MISSING else f.default)
        children = _keys(hint) if dataclasses.is_dataclass(hint) else None
        bounds = {op: v for op, v in f.metadata.items() if op in _BOUNDS}  # (a TrainingArguments field has others)
        keys[f.name] = Key(dict if children else hint, default, help, children, bounds)
    return keys


@functools.cache
def _schema() -> dict[str, Key]:
    """Every recipe key: the sections' fields, OTSeq2SeqTrainingArguments' (the recipes' defaults), OT_SETTINGS'."""
    from ..models.ot_config import OT_SETTINGS
    from ..training import OTSeq2SeqTrainingArguments

    schema = _keys(RecipeConfig)
    training = dict(sorted(_keys(OTSeq2SeqTrainingArguments, TRAINING_DEFAULTS).items()))
    if fsdp := training.get("fsdp"):  # TrainingArguments takes fsdp=True (settings in fsdp_config), typed a string
        training["fsdp"] = fsdp._replace(type=typing.Union[bool, fsdp.type])  # noqa: UP007 (built at run time)
    schema["training"] = schema["training"]._replace(children=training)
    ot = {s.field: Key(s.type, s.default, f"{s.doc} ({s.bounds()})") for s in OT_SETTINGS}
    schema["model"].children["ot"] = schema["model"].children["ot"]._replace(children=ot)  # type: ignore[index]
    return schema


def _members(annotation) -> tuple:
    """The types a Union (or `X | None`) joins, else the annotation alone."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _structured(annotation) -> bool:
    """A list- or dict-typed key (or one of unknown type): its --set value is read as YAML (`[a, b]`, `{k: v}`)."""
    return annotation is typing.Any or any(
        (typing.get_origin(m) or m) in (list, dict, tuple) for m in _members(annotation)
    )


_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}  # as HfArgumentParser


def from_text(text: str, annotation):
    """text read as `annotation` declares, as HfArgumentParser reads a command-line string (`3e-4` a float, `no`
    False for a bool and text for a str); ValueError where it is none of the types. An untyped leaf (a bare `list`'s
    items, a `dict`'s values) is read as a JSON scalar where it is one (3, 0.5, true), else kept as text."""
    if annotation is typing.Any:
        try:
            value = json.loads(text)
        except ValueError:
            return text
        return value if isinstance(value, (int, float, bool)) else text
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # text last: a number or flag first
        for member in sorted(_members(annotation), key=lambda m: m is str):
            try:
                return from_text(text, member)
            except ValueError:
                continue
        raise ValueError(text)
    if typing.get_origin(annotation) is typing.Literal:  # its values as written (Literal[False]: false, False)
        for choice in typing.get_args(annotation):
            if text == str(choice) or isinstance(choice, bool) and text.lower() == str(choice).lower():
                return choice
        raise ValueError(text)
    if annotation is bool:
        if text.lower() not in _BOOLS:
            raise ValueError(text)
        return _BOOLS[text.lower()]
    if annotation in (int, float):
        return annotation(text)
    if annotation is type(None) or (typing.get_origin(annotation) or annotation) in (list, dict, tuple):
        raise ValueError(text)  # one value where a list or mapping is asked: named by the type check
    return text  # str, or a type the class checks itself (TrainingArguments' strategies: IntervalStrategy | str)


def _typed(value, annotation):
    """A recipe value as its key declares: text converted (`from_text`), a list's or mapping's items too, an integer
    as a float where only a float is asked (3 for 3.0); what does not convert is returned as it is, for `_check`."""
    if isinstance(value, str) and annotation is not str:
        try:
            return from_text(value, annotation)
        except ValueError:
            return value
    members = [m for m in _members(annotation) if m is not type(None)]
    if isinstance(value, list):
        kind = next((m for m in members if (typing.get_origin(m) or m) is list), None)
        item = (typing.get_args(kind) or [typing.Any])[0] if kind is not None else None
        return value if item is None else [_typed(v, item) for v in value]
    if isinstance(value, dict):
        kind = next((m for m in members if (typing.get_origin(m) or m) is dict), None)
        item = (typing.get_args(kind) or [typing.Any, typing.Any])[1] if kind is not None else None
        return value if item is None else {k: _typed(v, item) for k, v in value.items()}
    if isinstance(value, int) and not isinstance(value, bool) and float in members and int not in members:
        return float(value)
    return value


def _type_ok(value, annotation) -> bool:
    """value fits annotation, by huggingface_hub's strict-dataclass check (what it cannot check: the class's)."""
    try:
        type_validator("value", value, annotation)
    except TypeError as err:
        return str(err).startswith("Unsupported type")
    return True


def _type_name(annotation) -> str:
    if typing.get_origin(annotation) is typing.Literal:  # its values: Literal[False] is "False"
        return " or ".join(map(repr, typing.get_args(annotation)))
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    return " or ".join(
        _type_name(a) if typing.get_origin(a) is typing.Literal else getattr(a, "__name__", str(a)) for a in args
    )


def _dotted(keys: dict[str, Key], where: str = "") -> list[str]:
    return [k for name, key in keys.items() for k in (where + name, *_dotted(key.children or {}, f"{where}{name}."))]


RENAMED = {  # keys of earlier versions, and other libraries' names -> the key that does it here
    "data.split": "data.train_split",
    "training.batch_size": "training.per_device_train_batch_size",
    "training.lr": "training.learning_rate",
    "training.epochs": "training.num_train_epochs",
}
_BOUNDS = {"min": (">=", operator.ge), "gt": (">", operator.gt), "lt": ("<", operator.lt)}  # a key's bounds


def _check(section: dict, keys: dict[str, Key], where: str) -> None:
    """Each key of `section` one of `keys` (else the closest is named), converted to its type (text read by it, in
    place), within its bounds; sections too. model.ot's values are checked by the model config (OT_SETTINGS)."""
    for name, value in section.items():
        if name not in keys:  # a near key here (dataset: datasets), the key in another section, else the closest
            own = difflib.get_close_matches(name, keys, n=1, cutoff=0.8)
            other = [k for k in _dotted(_schema()) if k.endswith(f".{name}") and where != "model.scratch."]
            if not other:  # an earlier spelling (lambda): the key that took its place
                other = [v for k, v in old_keys().items() if k.rpartition(".")[2] == name][:1]
            close = [RENAMED[where + name]] if where + name in RENAMED else own or other
            close = close or difflib.get_close_matches(name, keys, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            shown = ", ".join(sorted(keys)[:40]) + (f", ... ({len(keys)} keys)" if len(keys) > 40 else "")
            raise UsageError(
                f"Unknown config key {where + name!r}.{hint} {where.rstrip('.') or 'The config'} takes: {shown}."
            )
        key, dotted = keys[name], where + name
        if key.children is None and dotted != "model.scratch":  # (its keys: the family's config class's types)
            section[name] = value = _typed(value, key.type)
        shown = "<hidden>" if is_secret_key(name) else repr(value)  # a credential is never printed
        if key.children is not None and (value is None or isinstance(value, dict)):
            _check(value or {}, key.children, dotted + ".")
        elif where != "model.ot." and not _type_ok(value, key.type):
            text = isinstance(value, (dict, list)) and _type_ok("", key.type)  # "Note: x" read as {"Note": "x"}
            quote = ': YAML reads "a: b" as a mapping and "[a]" as a list, put text in quotes' * text
            if isinstance(value, (str, int, float)) and _type_ok([], key.type):  # one value where a list is asked
                quote = f": write a list in brackets, e.g. {dotted}=[{', '.join(str(value).split(','))}]"
            raise UsageError(
                f"Config key {dotted!r} must be {_type_name(key.type)}, got {shown} ({type(value).__name__}){quote}."
            )
        elif value is not None and not all(_BOUNDS[op][1](value, bound) for op, bound in key.bounds.items()):
            within = " and ".join(f"{_BOUNDS[op][0]} {bound}" for op, bound in key.bounds.items())
            raise UsageError(f"Config key {dotted!r} must be {_type_name(key.type)} {within}, got {shown}.")


def _config_types(config_class) -> dict:
    """A transformers config class's field types (its dataclass fields' hints; torch named for `torch.dtype`)."""
    import torch

    try:
        return typing.get_type_hints(config_class, localns={"torch": torch})
    except (NameError, TypeError):  # a hint this Python cannot evaluate: those of the fields' defaults instead
        return {k: type(v) for k, v in config_class().to_dict().items() if v is not None}


def _check_scratch(scratch: dict) -> None:
    """model.scratch's keys and values, checked by the family's transformers config class (naming the key)."""
    from huggingface_hub.errors import StrictDataclassError

    base = scratch_config_class(scratch.get("family"))
    aliases = base.attribute_map  # hidden_size -> n_embd: an alias is set after the checks, so check its target
    hints = _config_types(base)  # text read by the config class's field types (n_layer: int, resid_pdrop: float)
    types_ = {k: hints.get(aliases.get(k, k), typing.Any) for k in {*base().to_dict(), *aliases}}
    _check(scratch, {"family": Key(str)} | {k: Key(t) for k, t in types_.items()}, "model.scratch.")
    try:
        config = base(**{aliases.get(k, k): v for k, v in scratch.items() if k != "family"})
    except (StrictDataclassError, ValueError, TypeError) as err:
        text = " ".join(str(err).split())
        found = re.match(r"Validation error for field '([^']+)': \w+: (.*)", text)
        if found is None:
            raise UsageError(f"model.scratch is not a valid {base.__name__}: {text}") from None
        key = [k for k in scratch if aliases.get(k, k) == found[1]][-1]  # the last of a field and its alias
        raise UsageError(f"Config key 'model.scratch.{key}' is not valid for {base.__name__}: {found[2]}") from None
    for size in ("num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size"):  # (by their aliases)
        if isinstance(value := getattr(config, size, None), int) and value < 1:
            key = next((k for k in scratch if aliases.get(k, k) == aliases.get(size, size)), size)
            raise UsageError(f"Config key 'model.scratch.{key}' must be >= 1, got {value}: a model needs one.")
    import torch
    from transformers import AutoModel

    try:  # shapes the config allows but the model does not (n_embd not a multiple of n_head): built without memory
        with torch.device("meta"):
            size = AutoModel.from_config(config).num_parameters() * 4  # bytes, float32
    except (ValueError, TypeError, AssertionError, ZeroDivisionError) as err:
        raise UsageError(f"model.scratch does not make a {scratch['family']} model: {err} Fix them.") from None
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else math.inf
    if size > memory:  # it is built in memory first
        raise UsageError(
            f"model.scratch makes a model of {size / 2**30:.0f} GiB (float32), more than this machine's memory "
            f"({memory / 2**30:.0f} GiB): lower its sizes (vocab_size, n_embd, n_layer, ...)."
        )


@functools.cache
def old_keys() -> dict[str, str]:
    """Earlier spellings of recipe keys -> the key of their setting's one name: model.ot.num_steps (model.ot.lambda,
    ...) -> model.ot.ot_num_steps, and training.ot_lambda -> model.ot.ot_lambda, lambda's one home. Still read, with
    a warning naming the new key."""
    from ..models.ot_config import OLD_NAMES

    ot = {f"model.ot.{old}": f"model.ot.{new}" for old, new in OLD_NAMES.items()}
    return ot | {"training.ot_lambda": "model.ot.ot_lambda"}


def override_key(dotted: str, stacklevel: int = 3) -> str:
    """`dotted`, or the key that took its place where it is an earlier spelling (warned about, naming that key)."""
    from ..models.ot_config import OTDeprecationWarning

    if (new := old_keys().get(dotted)) is not None:
        warnings.warn(f"{dotted} is deprecated: write {new}.", OTDeprecationWarning, stacklevel=stacklevel)
    return new or dotted


def _at(config: dict, dotted: str) -> typing.Any:
    """The section at `dotted`: {} where it is missing, ... where a value is in the way."""
    node: typing.Any = config
    for part in dotted.split("."):
        node = node.get(part, {}) if isinstance(node, dict) else ...
    return node


def _old_names(config: dict) -> None:
    """A recipe's earlier spellings moved to their keys (override_key; an override's key is renamed before it is set);
    both spellings with different values refused, naming both."""
    for old, new in old_keys().items():
        (where, _, name), (section, _, key) = old.rpartition("."), new.rpartition(".")
        source, target = _at(config, where), _at(config, section)
        if not isinstance(source, dict) or name not in source or not isinstance(target, (dict, type(None))):
            continue  # (a section that is no mapping: refused by the checks, naming it)
        if target is None:  # model.ot: null, a baseline: no OT setting is read
            warnings.warn(f"{old} is ignored: this recipe trains a baseline ({section}: null).", stacklevel=3)
            source.pop(name)
            continue
        kind = _key_type(new)
        value = _typed(source.pop(name), kind)  # (compared as read)
        if key in target and (given := _typed(target[key], kind)) != value:
            raise UsageError(
                f"{old}={value!r} and {new}={given!r} disagree: the setting has one name, {new} (saved in the "
                f"model's config). Keep that one and drop {old}."
            )
        set_value(config, override_key(old, stacklevel=4), value)


def check_config(config: dict) -> dict:
    """config with every key known and of its type (text read by it), before any data is read."""
    from ..registry import FAMILIES
    from ..task_names import recipe_task

    _old_names(config)
    config["task"] = recipe_task(config.get("task"), TASKS)  # transformers' pipeline names are aliases
    _check(config, _schema(), "")
    _check_classes(config.get("data") or {})
    for section in ("data", "evaluation"):  # a key of another task (its help says which) would be read by none
        for name, value in (config.get(section) or {}).items():
            help_task = _schema()[section].children[name].help.partition(":")[0]  # type: ignore[index]
            tasks = [t for t in TASKS if t.endswith(tuple(help_task.split("/")))]  # "classification/translation: ..."
            if value not in (None, False) and tasks and config["task"] not in tasks:
                only = f"{section}.{name} applies to {' and '.join(tasks)} only: this {config['task']} recipe"
                if name == "streaming":  # refused: a recipe that reads its data whole must not seem to stream it
                    raise UsageError(f"{only} reads its data whole. Drop data.streaming (or set it to false).")
                warnings.warn(f"{only} ignores it.", stacklevel=2)
    # an OT recipe unless model.ot is null: a recipe that leaves it out trains OT with its defaults, not a baseline
    config["model"] = model = {"ot": {}, **(config.get("model") or {})}
    scratch, ot = model.get("scratch"), model.get("ot")
    if scratch is not None and model.get("base") is not None:
        raise UsageError("model.base and model.scratch are both given: keep one (set the other to null).")
    if scratch is not None:
        _check_scratch(scratch)
    if ot is not None:  # a model.base is not loaded yet: checked as encoder-decoder, where decoder_* settings apply
        family = scratch["family"] if scratch is not None else "bert" if model.get("base") == "minilm" else "t5"
        try:
            FAMILIES[family].config_class(**ot)  # the one check of the OT settings: the model config's
        except ValueError as err:  # its fields named as recipe keys: ot_solver -> model.ot.ot_solver
            raise UsageError(re.sub(r"\b(ot_[a-z_]+)", r"model.ot.\1", str(err))) from None
    return config


# The keys that say which data a recipe reads: an override of any replaces the recipe's data whole (its other data
# keys and the card's dataset fields and language are dropped unless overridden too; only a validation file keeps the
# training data).
TRAIN_DATA_KEYS = ("source", "format", "train_file", "train_source", "train_target", "dataset", "dataset_config")
DATA_KEYS = (*TRAIN_DATA_KEYS, *"validation_file validation_source validation_target test_source test_target".split())
DATA_KEYS += ("train_split", "validation_split", "test_split")


def set_value(config: dict, dotted: str, value) -> dict:
    """config with `dotted` (section.key) set to value; sections are created where missing or null."""
    parts = dotted.split(".")
    if not all(parts):
        raise UsageError(f"{dotted!r} is not a config key (section.key, e.g. training.learning_rate).")
    node = config
    for i, part in enumerate(parts[:-1]):
        node[part] = {} if node.get(part) is None else node[part]
        node = node[part]
        if not isinstance(node, dict):
            raise UsageError(f"{'.'.join(parts[: i + 1])!r} is a value, not a section: cannot set {dotted!r}.")
    node[parts[-1]] = value
    return config


def _key_type(dotted: str):
    """The declared type of a recipe key (model.ot.ot_num_steps: int), or None where it is not known before the
    recipe is read (model.scratch's keys: the family's config class; a key no section has)."""
    keys: dict[str, Key] | None = _schema()
    key = None
    for part in dotted.split("."):
        key = (keys or {}).get(part)
        if key is None:
            return None
        keys = key.children
    return key.type if key is not None and key.children is None else dict


def parse_override(dotted: str, text: str):
    """A `--set KEY=VALUE` value, read as the key declares: the text as given, converted by the key's type (3e-4 a
    float, `no` text for a str key and False for a bool one, `*.csv` and `runs/exp #3` text); YAML only for a list-
    or dict-typed key ([a, b], {k: v}) and quoted text. null, ~ or nothing unsets the key."""
    annotation, value = _key_type(dotted), text.strip()
    if value in ("", "~", "null", "Null", "NULL"):
        return None
    quoted = len(value) > 1 and value[0] in "'\"" and value[-1] == value[0]
    if quoted or annotation is None and value[:1] in "[{" or annotation is not None and _structured(annotation):
        value = _load_yaml(value, f"Cannot parse {value if len(value) < 200 else value[:200] + ' ...'!r} as a value")
    return value if annotation is None else _typed(value, annotation)


def load_config(path: str | None, overrides: list[str] | None = None) -> RecipeConfig:
    """A recipe (a YAML path or a packaged name) with `section.key=value` overrides (parse_override), checked."""
    config = read_yaml(resolve_config(path)) if path else {}
    pairs = [(k.strip(), sep, v) for k, sep, v in (item.partition("=") for item in overrides or [])]
    for item, (key, sep, _) in zip(overrides or [], pairs):
        if not sep or not key:
            raise UsageError(f"Override {item!r} must look like section.key=value (e.g. training.learning_rate=3e-4).")
    # an earlier spelling renamed (warned about, once), unless its key's section is null (training.ot_lambda of a
    # baseline, model.ot: null: left for check_config, which says it is ignored)
    baseline = lambda k: k in old_keys() and _at(config, old_keys()[k].rpartition(".")[0]) is None  # noqa: E731
    renamed = [(k if baseline(k) else override_key(k), k, sep, v) for k, sep, v in pairs]
    spelt: dict[str, tuple[str, str]] = {}  # key -> the spelling given and its text: both spellings must agree
    for key, given, _, text in renamed:
        if key in spelt and spelt[key][0] != given and parse_override(key, spelt[key][1]) != parse_override(key, text):
            (other, before), fix = spelt[key], f"the setting has one name, {key}: give that one"
            raise UsageError(f"{other}={before.strip()} and {given}={text.strip()} disagree: {fix}.")
        spelt[key] = (given, text)
    pairs = [(key, sep, text) for key, _, sep, text in renamed]
    values = {k: v for k, _, v in pairs}
    card_keys = ("dataset_name", "dataset_type", "datasets", "language")
    for section, names, named_by in (("card", card_keys, DATA_KEYS), ("data", DATA_KEYS, TRAIN_DATA_KEYS)):
        if isinstance(old := config.get(section), dict) and any(f"data.{k}" in values for k in named_by):
            config[section] = {k: v for k, v in old.items() if k not in names or f"{section}.{k}" in values}
    for given, other in (("base", "scratch"), ("scratch", "base")):  # a model given replaces the recipe's other one
        if f"model.{given}" in values and f"model.{other}" not in values and isinstance(config.get("model"), dict):
            if parse_override(f"model.{given}", values[f"model.{given}"]) is not None and (
                config["model"].pop(other, None) is not None
            ):
                warnings.warn(f"model.{given} given: the recipe's model.{other} is not used.", stacklevel=2)
    for key, _, value in pairs:
        set_value(config, key, parse_override(key, value))
    remember_secrets(config)  # a hub_token is hidden wherever it appears in what hf_ot prints or writes
    return RecipeConfig.from_dict(config)


def config_help(config: RecipeConfig | None = None) -> str:
    """Every recipe key with its type, default, help and `config`'s value: `hf-ot train CONFIG --help`'s list."""
    lines = ["recipe keys (YAML sections, or --set KEY=VALUE):"]

    def walk(keys: dict[str, Key], values: dict, where: str) -> None:
        for name, key in keys.items():
            if name == "ot_lambda" and where == "training.":  # lambda lives in model.ot.ot_lambda
                continue
            value = values.get(name)
            if key.help or key.children is None:
                shown = name in values and not (key.children and isinstance(value, dict))
                here = f"  [this config: {value!r}]" * shown
                # a default of None: the key is unset, and its help names what applies then, if anything
                default = f", default {key.default!r}" if key.default is not None else ", unset by default"
                default = "" if key.default is None and "default" in key.help else default
                lines.append(f"  {where + name} ({_type_name(key.type)}{default}){here}")
                if key.help:  # (argparse's %%)
                    lines.append(f"      {' '.join(key.help.replace('%%', '%').split())}")
            if key.children:
                walk(key.children, value if isinstance(value, dict) else {}, f"{where}{name}.")

    walk(_schema(), config.to_dict() if config is not None else {}, "")
    return "\n".join(lines)
