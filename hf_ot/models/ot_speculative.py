"""Depth-speculative decoding: draft tokens with the same vector field at a cheaper setting (fewer solver steps, another
solver), verify them at the model's own setting, with transformers' assisted decoding.

A model trained with lambda ~ 1 is an ODE model: its field integrated with 1 Heun step gives nearly the logits of its
trained grid, so the draft's tokens are mostly accepted, and no extra weights or training are needed. The draft is a
weight-sharing view of the model (`draft_model`): the same modules, its own config copy holding the draft settings
(read by the draft's forwards only: nothing is written on the model's config or modules) and its own generation
config; transformers gives it its own KV cache, sized for the draft's setting. Greedy decoding returns the tokens of
plain generation at the model's setting; sampling keeps transformers' speculative-sampling guarantee.

    model.generate(ids, draft_num_steps=1, draft_solver="heun")                 # or
    model.generate(ids, assistant_model=model.ot_draft_model(ot_num_steps=1, ot_solver="heun"))

transformers' assisted decoding takes batch size 1.

This file travels with checkpoints (trust_remote_code): it imports only torch, transformers and its siblings.
"""

from __future__ import annotations

import contextvars
import copy
import inspect
from typing import TYPE_CHECKING, Any

from .ot_config import check_ot_value, renamed
from .ot_flow import CALL_ARGUMENT, _ModelCall
from .ot_solver import is_adaptive

if TYPE_CHECKING:
    from collections.abc import Callable

# (draft, encoder outputs) while a model builds the candidate generator of its own depth draft: the draft takes the
# model's encoder output instead of running its encoder (transformers runs an encoder-decoder assistant's encoder).
_SHARED_ENCODER: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar(
    "hf_ot_draft_encoder_outputs", default=None
)


def draft_model(
    model: Any,
    ot_num_steps: int | None = None,
    ot_solver: str | None = None,
    num_draft_tokens: int | None = None,
    confidence_threshold: float | None = None,
    *,
    num_steps: int | None = None,
    solver: str | None = None,
) -> Any:
    """A weight-sharing draft of `model` usable as `assistant_model`: the same modules, integrating at `ot_num_steps`
    steps (default 1) of `ot_solver` (default 'heun'); `num_steps=` and `solver=` are deprecated spellings. Of an
    encoder-decoder, the draft's decoder drafts at that setting, and its encoder does not run when it assists `model`:
    transformers would run an encoder-decoder assistant's encoder a second time, and the draft takes the encoder output
    `model.generate` computed at the model's own setting (the encoder runs once per generate, as in plain generation).
    `draft.generate(...)` on its own runs the encoder at the draft's setting; a stack called directly
    (`draft.get_encoder()(...)`) is the model's own module and integrates at the model's.

    `num_draft_tokens`: tokens drafted per round, every round (default: transformers' assistant default, 20, cut
    short where the draft's confidence falls under `confidence_threshold`). `confidence_threshold`: the draft stops a
    round at a token it gives less probability than this (transformers' `assistant_confidence_threshold`; default
    0.4, tuned as decoding goes, when `num_draft_tokens` is not given, and 0 (off) when it is: a depth draft agrees
    with its model far more often than a separate small model, so a fixed round length is usually faster)."""
    can_generate = getattr(model, "can_generate", None)
    if not callable(can_generate) or not can_generate():
        raise ValueError(
            f"{type(model).__name__} does not generate text (no generate()): a depth draft assists the generation of "
            "a model with a language-model head (a decoder or an encoder-decoder)."
        )
    if num_steps is not None:
        ot_num_steps = renamed("draft_model", "num_steps", "ot_num_steps", num_steps, ot_num_steps)
    if solver is not None:
        ot_solver = renamed("draft_model", "solver", "ot_solver", solver, ot_solver)
    num_steps, solver = 1 if ot_num_steps is None else ot_num_steps, "heun" if ot_solver is None else ot_solver
    config = copy.deepcopy(model.config)
    config.ot_num_steps = num_steps
    if getattr(config, "ot_decoder_num_steps", None) is not None:
        config.ot_decoder_num_steps = num_steps
    config.ot_solver = solver
    config.validate_ot_settings()  # (the draft's values checked by its config, naming ot_num_steps / ot_solver)
    if is_adaptive(solver):
        raise ValueError(
            f"draft_solver={solver!r} is adaptive, and a draft decodes with a KV cache (a fixed grid): use 'euler', "
            "'heun' or 'rk4'."
        )
    draft = copy.copy(model)  # a new object over the SAME submodules, parameters and buffers
    object.__setattr__(draft, "config", config)
    object.__setattr__(draft, "generation_config", copy.deepcopy(model.generation_config))
    object.__setattr__(draft, "_ot_draft_of", model)
    if num_draft_tokens is not None:
        if isinstance(num_draft_tokens, bool) or not isinstance(num_draft_tokens, int) or num_draft_tokens < 1:
            raise ValueError(f"num_draft_tokens={num_draft_tokens!r}: give a whole number of tokens >= 1 per round.")
        draft.generation_config.num_assistant_tokens = int(num_draft_tokens)
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        if confidence_threshold is None:
            confidence_threshold = 0.0
    if confidence_threshold is not None:
        real = isinstance(confidence_threshold, (int, float)) and not isinstance(confidence_threshold, bool)
        if not real or not 0.0 <= confidence_threshold < 1.0:  # (a str or bool is no probability either)
            raise ValueError(
                f"draft confidence threshold {confidence_threshold!r}: give a probability in [0, 1) (0: draft every "
                "token of the round)."
            )
        draft.generation_config.assistant_confidence_threshold = float(confidence_threshold)
    return draft


def speculative_generate(
    model: Any, generate: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """generate(...) with draft_num_steps / draft_solver / num_draft_tokens / draft_confidence_threshold: assisted
    decoding with a depth draft."""
    names = {
        "draft_num_steps": "ot_num_steps",
        "draft_solver": "ot_solver",
        "num_draft_tokens": "num_draft_tokens",
        "draft_confidence_threshold": "confidence_threshold",
    }
    # what is not given takes draft_model's defaults (written once, in its signature)
    given = {name: kwargs.pop(key) for key, name in names.items() if kwargs.get(key) is not None}
    for key in names:
        kwargs.pop(key, None)
    if not given:
        return generate(model, *args, **kwargs)
    if kwargs.get("assistant_model") is not None:
        raise ValueError("Give either draft_num_steps / draft_solver (a depth draft of this model) or assistant_model.")
    for key in ("draft_num_steps", "draft_solver"):
        if names[key] in given:  # checked here, where an error can name generate's argument
            check_ot_value(names[key], given[names[key]], key)
    kwargs["assistant_model"] = draft_model(model, **given)
    return generate(model, *args, **kwargs)


def candidate_generator(
    model: Any, get_candidate_generator: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """`model._get_candidate_generator(...)` (assisted decoding's set-up): a depth draft of this encoder-decoder model
    takes the model's encoder output, which generate has already computed at the model's setting."""
    bound = inspect.signature(get_candidate_generator).bind(*args, **kwargs).arguments
    assistant = bound.get("assistant_model")
    encoder_outputs = (bound.get("model_kwargs") or {}).get("encoder_outputs")
    if (
        assistant is None
        or assistant.__dict__.get("_ot_draft_of") is not model
        or not model.config.is_encoder_decoder
        or encoder_outputs is None
    ):
        return get_candidate_generator(*args, **kwargs)
    token = _SHARED_ENCODER.set((assistant, encoder_outputs))
    try:
        return get_candidate_generator(*args, **kwargs)
    finally:
        _SHARED_ENCODER.reset(token)


def prepare_encoder_outputs(
    model: Any,
    prepare: Callable[..., Any],
    inputs_tensor: Any,
    model_kwargs: dict[str, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """`model._maybe_prepare_encoder_kwargs_for_generation(...)`, generate's encoder pass. A depth draft assisting its
    model reuses the model's encoder output; a draft generating on its own runs its encoder at its own setting (the
    encoder stack, called on its own, would read the settings of the model that owns the shared modules)."""
    draft_of = model.__dict__.get("_ot_draft_of")
    if draft_of is None or not model.config.is_encoder_decoder or model_kwargs.get("encoder_outputs") is not None:
        return prepare(inputs_tensor, model_kwargs, *args, **kwargs)
    shared = _SHARED_ENCODER.get()
    if shared is not None and shared[0] is model:
        # what the step returns once encoder_outputs are there (transformers 5.17's name of it encodes regardless)
        model_kwargs["encoder_outputs"] = shared[1]
        return model_kwargs
    # the draft's call, to its encoder stack through generate's encoder keyword arguments (taken out again after)
    call = _ModelCall(model.__dict__["_ot_key"], model.config, record=False, valid_masks={}, want_reg=False)
    model_kwargs[CALL_ARGUMENT] = call
    try:
        return prepare(inputs_tensor, model_kwargs, *args, **kwargs)
    finally:
        model_kwargs.pop(CALL_ARGUMENT, None)
