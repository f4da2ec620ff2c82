"""Recipe configs: typed sections read from YAML plus `--set key=value` overrides, through ONE parser.

Sections (`hf-ot train CONFIG --help` lists every key): task, output_dir, tokenizer, model (base | scratch, ot: null
is the plain transformers baseline), data (DataSection), training (TrainingArguments / OTTrainingArguments fields),
evaluation, card. An unknown key is an error naming the closest allowed one; a value of the wrong type names the key.
Values are YAML 1.2 numbers and booleans (`3e-4` is a float; only true / false are booleans), in files and overrides.
Configs ship with the package (`hf_ot.recipe_configs`): `load_config("quickstart")` works from any folder.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import enum
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml
from huggingface_hub.dataclasses import type_validator

from ..errors import UsageError

TASKS = ("causal-lm", "sequence-classification", "translation")


# ------------------------------------------------------------------------------------------------- sections


def _key(help: str, default=None, **kwargs):
    """A config key: its default (None: the code that reads it applies the default the help names) and one line of
    help, which `hf-ot train CONFIG --help` lists (HfArgumentParser's `metadata={"help": ...}` convention)."""
    return field(default=default, metadata={"help": help}, **kwargs)


@dataclass
class ModelSection:
    base: str | None = _key("a Hub id, a local model folder or minilm (the embedded MiniLM), converted to OT")
    scratch: dict | None = _key("a model built from scratch: {family, ...that family's config fields}")
    ot: dict | None = _key(
        "OT settings (the model config's ot_* without the prefix; lambda lives here only); null: the plain "
        "transformers model (a baseline)"
    )


@dataclass
class DataSection:
    source: typing.Literal["embedded", "file", "hub"] | None = _key(
        "embedded (the Python manual), file (data.train_file / train_source) or hub (data.dataset); default: hub "
        "when data.dataset is set, file when a train file is, else embedded"
    )
    # local files
    train_file: str | None = _key(
        "training data: a CSV/TSV/JSON/JSONL/Parquet/text file (gz/bz2/xz too), a folder, a glob or a folder "
        "saved with datasets' save_to_disk"
    )
    validation_file: str | None = _key("validation data, as train_file (default: data.val_fraction of train_file)")
    format: typing.Literal["csv", "tsv", "json", "jsonl", "parquet", "arrow", "text"] | None = _key(
        "file format of the data files (default: by extension; text for causal-lm, csv for classification)"
    )
    encoding: str | None = _key("text encoding of the files (default utf-8; a byte order mark is skipped)")
    train_source: str | None = _key("translation: source sentences, one a line (aligned with train_target)")
    train_target: str | None = _key("translation: target sentences, one a line")
    validation_source: str | None = _key("translation: validation source sentences, one a line")
    validation_target: str | None = _key("translation: validation target sentences, one a line")
    test_source: str | None = _key("translation: test source sentences, one a line")
    test_target: str | None = _key("translation: test target sentences, one a line")
    # hub datasets
    dataset: str | None = _key("a Hub dataset id (downloaded: online) or a local dataset folder")
    dataset_config: str | None = _key("the Hub dataset's configuration name (e.g. sst2)")
    split: str | None = _key("causal-lm: the Hub split holding the training text (default train)")
    train_split: str | None = _key("the split to train on (default train)")
    validation_split: str | None = _key("the split to validate on (default validation; absent: val_fraction of train)")
    test_split: str | None = _key("translation: the test split (default test)")
    streaming: bool | None = _key("causal-lm: stream the text instead of caching it in Arrow files (default false)")
    validation_rows: int | None = _key("streaming without a validation file or split: rows held out (default 1000)")
    # columns and labels
    text_column: str | None = _key("column of the text (default: text, else sentence)")
    label_column: str | None = _key("classification: column of the labels (default label)")
    source_column: str | None = _key("translation: column of the source text (default source; Hub: de)")
    target_column: str | None = _key("translation: column of the target text (default target; Hub: en)")
    num_labels: int | None = _key("classification: number of classes (default: from the labels)")
    label_names: list | None = _key(
        "classification: the class names in id order (default: the labels found, sorted; integer labels: none)"
    )
    # sizes
    val_fraction: float | None = _key("share of the training data held out for validation when none is given (0.1)")
    block_size: int | None = _key("causal-lm: tokens per training block (default 128)")
    stride: int | None = _key("causal-lm: tokens between block starts (default block_size: no overlap)")
    max_length: int | None = _key("classification/translation: tokens per text, longer ones truncated (default 64)")
    max_train_blocks: int | None = _key("causal-lm: use at most this many training blocks")
    max_eval_blocks: int | None = _key("causal-lm: use at most this many validation blocks")
    max_train_samples: int | None = _key("use at most this many training examples (a seeded random subset)")
    max_eval_samples: int | None = _key("use at most this many validation examples (the first ones)")
    num_proc: int | None = _key("processes tokenizing the data (datasets' map num_proc)")
    # tokenization
    vocab_size: int | None = _key("tokenizer bpe: vocabulary size of the BPE tokenizer trained on the data (4000)")
    source_prefix: str | None = _key("translation: text put before every source (T5: 'translate German to English: ')")

    def kind(self) -> str:
        """Where the data comes from: data.source, else inferred from the keys that are set."""
        if self.source is not None:
            return self.source
        if self.dataset is not None:
            return "hub"
        return "file" if (self.train_file or self.train_source) is not None else "embedded"

    @classmethod
    def of(cls, data: DataSection | Mapping) -> DataSection:
        """`data` as a DataSection: a mapping of the same keys is checked (unknown keys and wrong types raise)."""
        if isinstance(data, DataSection):
            return data
        _check(dict(data), _hints(cls), "data.")
        return cls(**data)


@dataclass
class EvaluationSection:
    metrics: list | None = _key("text metrics: bleu, rouge, bertscore (default bleu, rouge)")
    batch_size: int | None = _key("evaluation batch size (default 16)")
    max_batches: int | None = _key("evaluate at most this many batches")
    elasticity: bool | None = _key(
        "after training, measure the validation metric at every solver x M' (1 .. 2M) and report the grid and the "
        "cheapest setting within tolerance in results.json and on the model card (the saved config keeps the "
        "trained setting)"
    )
    elasticity_max_steps: int | None = _key(
        "largest M' of the elasticity grid (default 2M; each M' of RK4 costs 4M' field evaluations)"
    )
    generate_samples: int | None = _key("translation: validation sentences translated for BLEU/ROUGE (default 100)")
    max_new_tokens: int | None = _key("translation: longest generated translation, in tokens")
    num_beams: int | None = _key("translation: beam size of generation (default 1: greedy)")


@dataclass
class CardSection:
    dataset_name: str | None = _key(
        "the data's name on the model card (default: from the data: the Hub id, or the file names)"
    )
    dataset_type: str | None = _key("the data's Hub id in the card's model-index (default: data.dataset, or custom)")
    datasets: list | None = _key("Hub dataset ids in the card's metadata (default: [data.dataset] for Hub data)")
    license: str | None = _key("the model's license on the card (e.g. apache-2.0)")
    language: typing.Union[str, list, None] = _key("language code(s) on the card (e.g. en)")


@dataclass
class RecipeConfig:
    """A recipe, typed: what `load_config` returns and the recipe code reads (`config.data.block_size`). A field that
    is None was not set (YAML null is the same): the code that reads it applies its default."""

    task: str = field(
        metadata={"help": "causal-lm, sequence-classification or translation (or a transformers pipeline name)"}
    )
    output_dir: str | None = _key("where the run goes: OUTPUT_DIR/model, OUTPUT_DIR/results.json (runs/TASK)")
    tokenizer: str | None = _key("char, bpe (trained on the data), minilm, a Hub id or a folder (default: the base's)")
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    training: dict = field(default_factory=dict)  # OTSeq2SeqTrainingArguments fields (_config_hints)
    evaluation: EvaluationSection = field(default_factory=EvaluationSection)
    card: CardSection = field(default_factory=CardSection)

    @classmethod
    def from_dict(cls, config: dict) -> RecipeConfig:
        """The typed config of a config dict (checked: unknown keys and wrong types raise UsageError)."""
        config = check_config(copy.deepcopy(config))
        return cls(
            **{
                k: SECTIONS[k](**(v or {})) if k in SECTIONS else v
                for k, v in config.items()
                if v is not None or k not in ("training",)
            }
        )

    def to_dict(self) -> dict:
        """The config as a dict of sections with the keys that are set (YAML's shape)."""
        out: dict = {"task": self.task}
        for name in ("output_dir", "tokenizer"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        for name in SECTIONS:
            out[name] = {
                k: copy.deepcopy(v) for k, v in dataclasses.asdict(getattr(self, name)).items() if v is not None
            }
        out["model"] = {**out["model"], "ot": copy.deepcopy(self.model.ot)}  # null ot: the plain baseline
        out["training"] = copy.deepcopy(self.training)
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


# The recipes' own TrainingArguments defaults: a validation curve and a resumable run without extra flags (evaluate
# and checkpoint every 1/5 of the run: TrainingArguments' fractional steps, the last 2 checkpoints kept); DDP: every
# parameter is used in every step. (output_dir defaults to OUTPUT_DIR/trainer, use_cpu to "no GPU".)
TRAINING_DEFAULTS = dict(
    report_to="none",
    logging_steps=10,
    save_strategy="steps",
    eval_strategy="steps",
    eval_steps=0.2,
    save_steps=0.2,
    save_total_limit=2,
    seed=1337,
    dataloader_num_workers=0,
    ddp_find_unused_parameters=False,
)

SECTIONS = {"model": ModelSection, "data": DataSection, "evaluation": EvaluationSection, "card": CardSection}


def scratch_config_class(family: str):
    """The family's transformers config class (GPT2Config for gpt2); an unknown family is refused, naming them."""
    from ..registry import FAMILIES

    if family not in FAMILIES:
        raise UsageError(f"model.scratch.family must be one of {sorted(FAMILIES)}, got {family!r}.")
    return next(k for k in FAMILIES[family].config_class.__mro__ if k.__dict__.get("model_type") == family)


# -------------------------------------------------------------------------------------------------- parsing


class _YAML12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 floats and booleans: 3e-4, 1E5, 1.0e-3 are numbers (YAML 1.1 needs
    '1.0e-3'); only true / false are booleans (YAML 1.1 also reads yes / no / on / off, which would make
    save_strategy=no the boolean False). Aliases (*name) are refused: a few hundred bytes of nested aliases (a
    "billion laughs") expand to gigabytes, and a recipe never needs them."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None,
                None,
                "aliases (*name) are not accepted in recipes: write the value out",
                self.peek_event().start_mark,
            )
        return super().compose_node(parent, index)


# the resolvers are a class attribute shared with SafeLoader: this loader gets its own copy, so yaml.safe_load
# elsewhere keeps reading YAML 1.1
_YAML12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_YAML12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)

_YAML12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                   |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def parse_value(text: str):
    """One value as the config files read it: YAML 1.2 scalars (numbers as numbers), lists, mappings, null. A plain
    value with ' #' in it is kept whole (output_dir=runs/exp #3), not cut at a YAML comment."""
    if re.search(r"\s#", text) and not text.lstrip().startswith(("'", '"', "[", "{")):
        return text.strip()
    try:
        return yaml.load(text, Loader=_YAML12Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as err:
        raise UsageError(f"Cannot parse {text!r} as a value: {err}") from None


def read_yaml(path: Path) -> dict:
    try:
        config = yaml.load(path.read_text(), Loader=_YAML12Loader) or {}  # noqa: S506
    except yaml.YAMLError as err:
        raise UsageError(f"Recipe config {path} is not valid YAML: {err}") from None
    if not isinstance(config, dict):
        raise UsageError(f"Recipe config {path} must be a mapping of sections, got {type(config).__name__}.")
    return config


# ------------------------------------------------------------------------------------------ packaged configs


def packaged_configs() -> dict[str, Path]:
    """name -> path of every config that ships with hf_ot (recipes/configs in a checkout)."""
    beside = Path(__file__).resolve().parents[2] / "recipes" / "configs"  # a checkout's: those of this code
    try:
        folder = beside if beside.is_dir() else resources.files("hf_ot.recipe_configs")
    except ModuleNotFoundError:  # a checkout used without installing
        folder = beside
    return {Path(str(p)).stem: Path(str(p)) for p in folder.iterdir() if str(p).endswith(".yaml")}


def resolve_config(name_or_path: str) -> Path:
    """A path to a YAML file, or the name of a packaged config ('quickstart', 'quickstart.yaml', or
    'recipes/configs/quickstart.yaml' from outside a checkout)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"Recipe config {name_or_path!r} is not a regular file (a device, pipe or socket): give a YAML file."
        )
    packaged = packaged_configs()
    stem = path.name[:-5] if path.name.endswith(".yaml") else path.name
    if stem in packaged and (len(path.parts) == 1 or path.parent.as_posix().endswith("recipes/configs")):
        return packaged[stem]
    raise UsageError(
        f"Recipe config {name_or_path!r} not found: give a YAML file or one of the packaged configs {sorted(packaged)}."
    )


# ------------------------------------------------------------------------------------------------- checking


def _unknown(key: str, where: str, allowed) -> UsageError:
    allowed = sorted(allowed)
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    shown = ", ".join(allowed) if len(allowed) <= 40 else ", ".join(allowed[:40]) + f", ... ({len(allowed)} keys)"
    return UsageError(f"Unknown config key {where + key!r}.{hint} {where.rstrip('.') or 'The config'} takes: {shown}.")


def _yaml_type(annotation):
    """The annotation as YAML writes its values: a float also as an integer (3 for 3.0), an Enum as its string."""
    if annotation is float:
        return int | float
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return annotation | str
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if not args or origin is typing.Literal:
        return annotation
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        return typing.Union[tuple(map(_yaml_type, args))]  # noqa: UP007 (built at run time)
    return origin[tuple(map(_yaml_type, args))]


def _type_ok(value, annotation) -> bool:
    """value fits annotation, by huggingface_hub's strict-dataclass type check (Literal[False] refuses 0, int refuses
    True); null only where the annotation allows None. A typing construct it cannot check is left to the class."""
    try:
        type_validator("value", value, _yaml_type(annotation))
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


def _hints(cls) -> dict:
    """key -> type of a dataclass's fields; a field that is itself a dataclass is a nested dict (a section)."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: _hints(hints[f.name]) if dataclasses.is_dataclass(hints[f.name]) else hints[f.name]
        for f in dataclasses.fields(cls)
        if f.init
    }


def _config_hints() -> dict:
    """The key -> type tree every config is checked against: the dataclasses above; `training` the fields of
    OTSeq2SeqTrainingArguments (their own types); model.ot its keys (values checked by the OT config, _check_ot_values).
    The task is checked by name afterwards (recipe_task)."""
    from ..models.ot_config import SETTING_OF_KEY
    from ..training import OTSeq2SeqTrainingArguments

    training = _hints(OTSeq2SeqTrainingArguments)
    if "fsdp" in training:  # TrainingArguments takes fsdp=True (settings in fsdp_config), though typed as a string
        typed = training["fsdp"]
        training["fsdp"] = typing.Union[bool, typed]  # noqa: UP007 (a typing object, built at run time)
    tree = {**_hints(RecipeConfig), "task": typing.Any, "training": training}
    tree["model"]["ot"] = dict.fromkeys(SETTING_OF_KEY, typing.Any)
    return tree


def _check(section: dict, hints: dict, where: str) -> None:
    """One check for every section: each key is in `hints` (else the closest key is named) and its value of the
    key's type; a nested dict of hints is a section (a mapping, or null)."""
    for key, value in section.items():
        if key not in hints:
            raise _unknown(key, where, hints)
        hint = hints[key]
        if isinstance(hint, dict):
            if value is not None and not isinstance(value, dict):
                raise UsageError(f"Config section {where + key!r} must be a mapping of keys, got {value!r}.")
            _check(value or {}, hint, f"{where}{key}.")
        elif not _type_ok(value, hint):
            name = type(value).__name__
            raise UsageError(f"Config key {where + key!r} must be {_type_name(hint)}, got {value!r} ({name}).")


def _check_scratch_values(scratch: dict) -> None:
    """model.scratch values checked by the family's config class itself (a strict dataclass: types, validators)."""
    from huggingface_hub.errors import StrictDataclassError

    base = scratch_config_class(scratch["family"])
    aliases = base.attribute_map  # hidden_size -> n_embd: an alias is set after the checks, so check its target
    values = {aliases.get(k, k): v for k, v in scratch.items() if k != "family"}
    try:
        base(**values)
    except (StrictDataclassError, ValueError, TypeError) as err:
        text = " ".join(str(err).split())
        field_name = re.match(r"Validation error for field '([^']+)'", text)
        if field_name:
            # the key whose value was checked: the last of a field and its alias
            key = [k for k in scratch if aliases.get(k, k) == field_name[1]][-1]
            cause = re.sub(r"^\w+Error: ", "", text.partition(": ")[2])  # "Field 'n_layer' expected int, ..."
            raise UsageError(f"Config key 'model.scratch.{key}' is not valid for {base.__name__}: {cause}") from None
        raise UsageError(f"model.scratch is not a valid {base.__name__}: {text}") from None


def _check_ot_values(ot: dict, family: str | None) -> None:
    """model.ot values checked by the OT config's own validation (its messages, in config key names), before any
    data or model is loaded. A `model.base` is not loaded yet: checked as an encoder-decoder family, where the
    decoder_* settings apply (a one-stack base refuses them when converted)."""
    from ..models.ot_config import SETTING_OF_KEY
    from ..registry import FAMILIES

    config_class = FAMILIES[family if family in FAMILIES else "t5"].config_class
    try:
        config_class(**{SETTING_OF_KEY[k].field: v for k, v in ot.items()})
    except ValueError as err:
        raise UsageError(re.sub(r"\bot_(?=[a-z])", "model.ot.", str(err))) from None  # ot_solver: model.ot.solver


def check_config(config: dict) -> dict:
    """Every key known and every value of its type, checked before any data is read; returns config."""
    from ..task_names import recipe_task

    _check(config, _config_hints(), "")
    config["task"] = recipe_task(config.get("task"), TASKS)  # transformers' pipeline names are aliases
    model = config.get("model") or {}
    scratch = model.get("scratch")
    if scratch is not None:
        base = scratch_config_class(scratch.get("family"))
        # its keys: the fields of the family's transformers config
        _check(scratch, dict.fromkeys({"family", *base().to_dict(), *base.attribute_map}, typing.Any), "model.scratch.")
        _check_scratch_values(scratch)
    _one_lambda(config)
    if model.get("ot") is not None:
        family = scratch["family"] if scratch is not None else "bert" if model.get("base") == "minilm" else None
        _check_ot_values(model["ot"], family)
    largest = (config.get("evaluation") or {}).get("elasticity_max_steps")
    if largest is not None and largest < 1:  # its type is checked with the section; here before any training
        raise UsageError(f"evaluation.elasticity_max_steps must be an integer >= 1 (the largest M'), got {largest!r}.")
    return config


def _one_lambda(config: dict) -> None:
    """lambda lives in model.ot.lambda (saved in the model's config). training.ot_lambda, OTTrainingArguments' name
    for it, is moved there when model.ot has none or the same value; a different value is an error naming both."""
    training, ot = config.get("training"), (config.get("model") or {}).get("ot")
    if not isinstance(training, dict) or training.get("ot_lambda") is None or not isinstance(ot, dict):
        return
    from ..models.ot_config import SETTING_OF_FIELD

    value = training["ot_lambda"]
    problem = SETTING_OF_FIELD["ot_lambda"].problem(value, "training.ot_lambda")
    if problem:
        raise UsageError(problem)
    if "lambda" in ot and ot["lambda"] != value:
        raise UsageError(
            f"training.ot_lambda={value!r} and model.ot.lambda={ot['lambda']!r} disagree: lambda has one home, "
            "model.ot.lambda (saved in the model's config). Set it there and drop training.ot_lambda."
        )
    ot["lambda"] = training.pop("ot_lambda")


# ------------------------------------------------------------------------------------------------ overrides

# The keys that say which data a recipe reads. An override of any of them replaces the recipe's data as a whole: the
# config's other data keys of this kind (its validation file, its Hub split) and the card's dataset fields describe
# the recipe's own data, so they are dropped unless the overrides set them too.
DATA_KEYS = tuple(
    "source format train_file validation_file train_source train_target validation_source validation_target "
    "test_source test_target dataset dataset_config split train_split validation_split test_split".split()
)
CARD_DATA_KEYS = ("dataset_name", "dataset_type", "datasets")
TRAIN_DATA_KEYS = ("source", "format", "train_file", "train_source", "train_target", "dataset", "dataset_config")


def _replace_data(config: dict, overrides: list[str]) -> None:
    """Where the overrides name other data (DATA_KEYS), the card's dataset fields are dropped; where they name other
    training data (TRAIN_DATA_KEYS), the config's data keys too (only a validation file keeps the training data)."""
    keys = {item.partition("=")[0].strip() for item in overrides}
    drop: list[tuple[str, tuple[str, ...]]] = (
        [("card", CARD_DATA_KEYS)] if any(f"data.{k}" in keys for k in DATA_KEYS) else []
    )
    if any(f"data.{k}" in keys for k in TRAIN_DATA_KEYS):
        drop.append(("data", DATA_KEYS))
    for section, names in drop:
        if isinstance(config.get(section), dict):
            for name in names:
                if f"{section}.{name}" not in keys:
                    config[section].pop(name, None)


def set_value(config: dict, dotted: str, value) -> dict:
    """config with `dotted` (section.key) set to value; sections are created where missing or null."""
    parts = dotted.split(".")
    if not all(parts):
        raise UsageError(f"{dotted!r} is not a config key (section.key, e.g. training.learning_rate).")
    node = config
    for i, part in enumerate(parts[:-1]):
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise UsageError(f"{'.'.join(parts[: i + 1])!r} is a value, not a section: cannot set {dotted!r}.")
    node[parts[-1]] = value
    return config


def apply_override(config: dict, item: str) -> dict:
    """One `section.key=value` override (the value parsed as in the YAML files)."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"Override {item!r} must look like section.key=value (e.g. training.learning_rate=3e-4).")
    return set_value(config, key.strip(), parse_value(value))


def load_config(path: str | None, overrides: list[str] | None = None) -> RecipeConfig:
    """Read a recipe (a YAML path or a packaged name), apply `section.key=value` overrides, check every key and
    type; returns the typed config."""
    config = read_yaml(resolve_config(path)) if path else {}
    _replace_data(config, overrides or [])
    for item in overrides or []:
        apply_override(config, item)
    return RecipeConfig.from_dict(config)


# ----------------------------------------------------------------------------------------------------- help


def config_help(config: RecipeConfig | None = None) -> str:
    """Every recipe key with its type, default and help, generated from the dataclasses above, OT_SETTINGS and
    TrainingArguments' own field metadata (HfArgumentParser's `metadata={"help": ...}`); where `config` sets a key,
    its value there. What `hf-ot train CONFIG --help` prints after the options."""
    from ..models.ot_config import OT_SETTINGS
    from ..training import OTSeq2SeqTrainingArguments

    values = _flat(config.to_dict()) if config is not None else {}
    lines: list[str] = []

    def add(key: str, annotation, default, help_text: str) -> None:
        value = f"  [this config: {values[key]!r}]" if key in values else ""
        lines.append(f"  {key} ({_type_name(annotation)}, default {default!r}){value}")
        if help_text:
            lines.append(f"      {' '.join(help_text.split())}")

    def section(cls, prefix: str, skip=(), defaults: Mapping = {}) -> None:  # noqa: B006 (read only)
        hints = typing.get_type_hints(cls)
        for f in sorted(dataclasses.fields(cls), key=lambda f: f.name) if defaults else dataclasses.fields(cls):
            if f.init and f.name not in skip:
                default = defaults.get(f.name, f.default if f.default is not dataclasses.MISSING else None)
                add(prefix + f.name, hints[f.name], default, (f.metadata.get("help") or "").split("\n")[0])

    lines.append("recipe keys (YAML sections, or --set KEY=VALUE):")
    section(RecipeConfig, "", skip=("model", *SECTIONS, "training"))
    section(ModelSection, "model.")
    for setting in OT_SETTINGS:
        add(f"model.ot.{setting.key}", setting.type, setting.default, f"{setting.doc} ({setting.bounds()})")
    lines.append("  model.scratch.* : the fields of the family's transformers config (e.g. GPT2Config's n_layer)")
    for name, cls in SECTIONS.items():
        if name != "model":
            section(cls, f"{name}.")
    # lambda lives in model.ot.lambda; the recipes' own defaults shown where they differ from TrainingArguments'
    section(OTSeq2SeqTrainingArguments, "training.", skip=("ot_lambda",), defaults=TRAINING_DEFAULTS)
    return "\n".join(lines)


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and (prefix + key) not in ("model.scratch",):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out
