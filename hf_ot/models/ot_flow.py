"""How a base stack's own layer loop becomes one vector field integrated over depth.

The stack's block list is replaced by a `DepthFlow`: a ModuleList holding the SAME blocks under the same names
(checkpoints, PEFT targets and FSDP wrapping see the base model). During a forward of the stack, and only then, the
base loop is handed one stand-in per block (by iteration, index or slice, whatever the loop does). Each stand-in
records its block's own call (masks per layer type, rotary embeddings, cache, ...) and passes the hidden state through
unchanged; the last one runs the solver, calling every block with ITS recorded arguments, and returns X(T) to the
loop. Attributes the loop reads on a layer (ModernBERT's `attention_type`) read through to the block.

A forward writes nothing on modules or configs, and looks nothing up in global or thread state: its state travels
down the call. The OT model's forward passes its call (`_ModelCall`: config, what to record, where results go) to its
stacks as a keyword argument (transformers 5.x forwards thread **kwargs from a head to its stacks); a stack's forward
(`_StackForward`, set at construction) takes it out, starts the stack's call (`_FlowCall`) and runs the stack's class
forward with `self` a per-call view of the stack (`_StackView`): its block list reads as that call's stand-ins and,
in paper mode, its final norm as a pass-through after the integration. Everything else reads through to the stack.
Threads and asyncio tasks running one model at once therefore share nothing but the modules, an interrupted forward
leaves nothing behind, another OT model called inside a forward (from a hook) starts its own call, and TorchDynamo
traces the whole forward as one graph (it cannot trace context variables; plain objects passed down it can).
KV-cache slots are routed by handing each field evaluation a view of the cache that maps `layer_idx` l to slot
e * L + l. A forward in which the loop did not call every block in order raises.

This file travels with checkpoints (trust_remote_code): it imports only torch, transformers and its siblings.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from transformers.cache_utils import Cache, EncoderDecoderCache

from .ot_solver import integrate, is_adaptive, num_stages

if TYPE_CHECKING:
    from collections.abc import Callable

# Keyword arguments that carry a call down the modules (never reaching a block: the stack's forward takes them out).
CALL_ARGUMENT = "_ot_call"  # the OT model's _ModelCall, from its forward to its stacks (and inner OT models)
_FLOW_ARGUMENT = "_ot_flow"  # a stack's _FlowCall, to the submodule that runs its loop (BertModel -> encoder)
_MODULE_ARGUMENT = "_ot_module"  # the stack module called (a DataParallel replica shares its original's forward)


class StackAdapter:
    """How one family's stack calls its blocks. Subclasses set the class attributes and override what differs."""

    stack_classes: tuple[type, ...] = ()  # modules that own the layer loop (and receive the 2-D padding mask)
    layers: str = "layers"  # path from the stack to its ModuleList of blocks
    final_norm: str | None = None  # path from the stack to the norm it applies after its loop, if any
    mask_argument: str = "attention_mask"  # the stack forward's 2-D padding mask argument

    def role(self, stack: nn.Module) -> str:
        return "decoder"

    def hidden_of(self, out: Any) -> Any:
        """The hidden state in a block's output."""
        return out[0] if isinstance(out, tuple) else out

    def thread(self, out: Any, call: tuple[tuple[Any, ...], dict[str, Any]]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The next block's (args, kwargs), given this block's output (T5 threads its position biases)."""
        return call

    def loop_output(self, hidden: torch.Tensor, call: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
        """What the base loop expects back from a block call."""
        return hidden


class _CallKey:
    """Whose a call is: one per OT model, shared by its inner models, its flows (set at construction), and the
    shallow copies that run as the model (depth drafts, DataParallel replicas); a deep copy gets its own."""

    __slots__ = ()


class _ModelCall:
    """One forward of an OT model: its config, what to record, and what the flows report back."""

    __slots__ = ("key", "config", "record", "valid_masks", "results", "want_reg", "per_example", "evaluations")

    def __init__(
        self,
        key: _CallKey,
        config: Any,
        record: bool,
        valid_masks: dict[str, Any],
        want_reg: bool = True,
        per_example: bool = False,
    ) -> None:
        self.key = key  # the _CallKey of the model running this call
        self.config = config
        self.record = record
        self.want_reg = want_reg
        self.per_example = per_example  # reg of each example (batch,), not of the batch
        self.valid_masks = valid_masks  # role -> 2-D mask, for stacks whose own mask argument is None
        self.results: list[tuple[str, Any, Any]] = []  # (role, reg, trajectory) per integrated stack
        self.evaluations = 0  # field evaluations of every integrated stack (trial steps of adaptive solvers included)


class _FlowCall:
    """One forward of a stack: the recorded block calls and the call-time modules."""

    __slots__ = (
        "stack",
        "flow",
        "config",
        "model_call",
        "final_norm",
        "valid_mask",
        "stand_ins",
        "calls",
        "hidden",
        "next_index",
        "ran",
    )

    def __init__(
        self,
        stack: nn.Module,
        flow: DepthFlow,
        config: Any,
        model_call: _ModelCall | None,
        final_norm: nn.Module | None,
        valid_mask: Any,
    ) -> None:
        self.stack = stack
        self.flow = flow
        self.config = config
        self.model_call = model_call
        self.final_norm = final_norm
        self.valid_mask = valid_mask
        blocks = flow._modules.values()
        self.stand_ins = [_BlockStandIn(self, i, block) for i, block in enumerate(blocks)]
        self.calls: list[Any] = [None] * len(self.stand_ins)
        self.hidden: Any = None
        self.next_index = 0
        self.ran = False


class _BlockStandIn:
    """Block `index` as the base loop sees it during a forward: records the call; the last one integrates."""

    def __init__(self, call: _FlowCall, index: int, block: nn.Module) -> None:
        self._call = call
        self._index = index
        self._block = block

    def __call__(self, hidden: Any, *args: Any, **kwargs: Any) -> Any:
        return self._call.flow._record(self._call, self._index, hidden, args, kwargs)

    def __getattr__(self, name: str) -> Any:  # layer attributes the loop reads (e.g. attention_type)
        if name in ("_call", "_index", "_block"):  # not set yet (torch.compile builds the object before __init__ runs)
            raise AttributeError(name)
        return getattr(self._block, name)

    def __repr__(self) -> str:
        return f"StandIn({self._index}, {type(self._block).__name__})"


class DepthFlow(nn.ModuleList):
    """The stack's blocks as ONE vector field, integrated over depth inside the base loop (see the module doc)."""

    def __init__(self, blocks: Any, *, adapter: StackAdapter, role: str, family: str, layerdrop: float = 0.0) -> None:
        super().__init__(blocks)
        self.adapter = adapter
        self.role = role
        self.family = family
        self.layerdrop = layerdrop  # moved here from the base loop, which must call every block
        # the OT model whose config holds the settings, and its _CallKey (set once, by the model; in __dict__: the
        # model is no submodule of its own flow)
        self.__dict__["_owner"] = None
        self.__dict__["_ot_key"] = None

    # Outside a forward the list is its blocks (a forward's loop sees its call's stand-ins through the stack's view).
    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, slice):  # ModuleList would build a DepthFlow of the slice
            return nn.ModuleList(list(self._modules.values())[idx])
        return super().__getitem__(idx)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("A DepthFlow runs inside its stack's forward: call the model (or the stack), not the flow.")

    def owner_config(self) -> Any:
        """The config of the OT model this flow belongs to (where OT settings are read), or None."""
        owner = self.__dict__["_owner"]
        return owner.config if owner is not None else None

    # -- recording the base loop's calls
    def _record(self, call: _FlowCall, index: int, hidden: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        n = len(call.calls)
        if index != call.next_index:
            raise RuntimeError(
                f"The {self.family} {self.role} loop called block {index} where block {call.next_index} was due: "
                "an OT flow needs every block called once, in order, per forward."
            )
        if index == 0:
            call.hidden = hidden
        elif hidden is not call.hidden:
            raise RuntimeError(
                f"The {self.family} {self.role} loop changed the hidden state between blocks {index - 1} and {index}: "
                "this family's adapter needs a hook for the work its loop does between layers."
            )
        call.calls[index] = (args, kwargs)
        call.next_index += 1
        if index < n - 1:
            return self.adapter.loop_output(hidden, (args, kwargs))
        x, last_call = self._integrate(call)
        call.ran = True
        return self.adapter.loop_output(x, last_call)

    # -- the integration
    def _integrate(self, call: _FlowCall) -> tuple[Any, Any]:
        blocks = list(self._modules.values())
        config = call.config
        steps, time = config.ot_steps_and_time(self.role)
        solver = config.ot_solver
        adapter = self.adapter
        paper = config.ot_mode == "paper"
        norm = call.final_norm
        weights = _valid_weights(call.valid_mask, call.hidden)
        calls = list(call.calls)  # adapters thread block outputs into the next block's call
        drop = self.layerdrop if self.training else 0.0
        caches = _caches_in(calls[0])  # training forwards have none; slot routing only when there is one
        views = None
        if caches and is_adaptive(solver):
            raise ValueError(
                f"ot_solver={solver!r} chooses its depth grid per forward, and a KV cache holds keys and values of one"
                " fixed grid: cached decoding needs a fixed-grid solver. Set model.config.ot_solver to 'euler', "
                "'heun' or 'rk4' (with ot_num_steps) for cached generation, or decode without a cache "
                "(generate(..., use_cache=False) recomputes the prefix with the adaptive grid at every token)."
            )
        if caches:
            evaluations = steps * num_stages(solver)
            _check_cache(caches, (steps, time, solver, paper), evaluations * len(blocks), self.role)
            views = _SlotViews(caches, len(blocks))

        dtype = call.hidden.dtype
        # Low-precision models: the state (and the increments dt * f added to it) in float32, the blocks in the
        # model's dtype; small increments would otherwise round away at large M (ot_state_dtype).
        wide = config.ot_state_dtype == "float32" and dtype in (torch.float16, torch.bfloat16)

        def field(x: torch.Tensor, evaluation: int) -> torch.Tensor:
            y = x.to(dtype) if wide else x
            for layer, block in enumerate(blocks):
                if drop > 0.0 and torch.rand([]) < drop:
                    continue  # LayerDrop of one block application
                args, kwargs = calls[layer]
                if views is not None:
                    args, kwargs = views.routed(args, kwargs, evaluation)
                out = block(y, *args, **kwargs)
                y = adapter.hidden_of(out)
                if layer + 1 < len(blocks):
                    calls[layer + 1] = adapter.thread(out, calls[layer + 1])
            if not paper:
                return (y.float() - x) if wide else y - x
            v = norm(y) if norm is not None else y
            return v.float() if wide else v

        model_call = call.model_call
        record = model_call is not None and model_call.record
        want_reg = model_call is not None and model_call.want_reg
        per_example = model_call is not None and model_call.per_example
        checkpoint_steps = config.ot_checkpoint_steps and self.training and torch.is_grad_enabled()
        if checkpoint_steps:
            _check_step_checkpointing(blocks, bool(caches), self.family)
        stats: dict[str, Any] = {}
        x, reg, trajectory = integrate(
            field,
            call.hidden.float() if wide else call.hidden,
            steps=steps,
            time=time,
            solver=solver,
            cost=functools.partial(_mean_square, weights=weights, per_example=per_example) if want_reg else None,
            record_trajectory=record,
            checkpoint_steps=checkpoint_steps,
            rtol=config.ot_rtol,
            atol=config.ot_atol,
            error_norm=functools.partial(_error_norm, weights=weights),
            stats=stats,
        )
        if wide:
            x = x.to(dtype)
            trajectory = tuple(state.to(dtype) for state in trajectory) if trajectory is not None else None
        if model_call is not None:
            model_call.results.append((self.role, reg, trajectory))
            model_call.evaluations += stats["evaluations"]
        return x, calls[-1]


def _caches_in(call: tuple[tuple[Any, ...], dict[str, Any]]) -> list[Cache]:
    args, kwargs = call
    return [value for value in (*args, *kwargs.values()) if isinstance(value, Cache)]


class _SlotView(Cache):
    """A cache as block applications of field evaluation e see it: layer l is slot e * L + l of the real cache.
    Built from the public Cache API (update, get_seq_length, get_mask_sizes, layers); the rest reads through."""

    def __init__(self, base: Cache, offset: int):  # no Cache.__init__: the view owns no layers
        self._base = base
        self._offset = offset

    def update(self, key_states: Any, value_states: Any, layer_idx: int, *args: Any, **kwargs: Any) -> Any:
        return self._base.update(key_states, value_states, layer_idx + self._offset, *args, **kwargs)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._base.get_seq_length(layer_idx + self._offset)

    def get_mask_sizes(self, *args: Any, **kwargs: Any) -> Any:
        if "layer_idx" in kwargs:
            kwargs["layer_idx"] += self._offset
        else:
            args = (*args[:-1], args[-1] + self._offset)
        return self._base.get_mask_sizes(*args, **kwargs)

    @property
    def layers(self) -> Any:  # type: ignore[override]  # a view: the base cache's layers from the offset, read-only
        return self._base.layers[self._offset :]

    def __getattr__(self, name: str) -> Any:
        if name in ("_base", "_offset"):
            raise AttributeError(name)
        return getattr(self._base, name)

    def __len__(self) -> int:
        return max(len(self._base) - self._offset, 0)


class _EncoderDecoderSlotView(EncoderDecoderCache):
    """An EncoderDecoderCache as field evaluation e sees it: its self-attention cache through a slot view; the
    cross-attention cache (K/V of the encoder output, the same at every depth time) and `is_updated` shared."""

    def __init__(self, base: EncoderDecoderCache, offset: int):  # no EncoderDecoderCache.__init__
        self._base = base
        self._offset = offset
        # transformers types the attribute as DynamicCache; it holds any Cache (a StaticCache for static decoding)
        self.self_attention_cache = _SlotView(base.self_attention_cache, offset)  # type: ignore[assignment]

    @property
    def cross_attention_cache(self) -> Any:  # type: ignore[override]  # the base cache's, shared and read-only
        return self._base.cross_attention_cache

    @property
    def is_updated(self) -> Any:  # type: ignore[override]  # the base cache's, shared and read-only
        return self._base.is_updated

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.self_attention_cache.get_seq_length(layer_idx)

    def __getattr__(self, name: str) -> Any:
        if name in ("_base", "_offset"):
            raise AttributeError(name)
        return getattr(self._base, name)


class _SlotViews:
    """The per-evaluation views of one forward's caches, built once per evaluation. Caches are matched by identity
    (`is`), not by id(): a compiled forward would be specialised to the id of one generate's cache."""

    __slots__ = ("caches", "layers", "by_evaluation")

    def __init__(self, caches: list[Cache], layers: int) -> None:
        self.caches = caches
        self.layers = layers
        self.by_evaluation: dict[int, list[Cache]] = {}

    def routed(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], evaluation: int
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if evaluation == 0:  # the first evaluation's slots are the cache's own layers
            return args, kwargs
        views = self.by_evaluation.get(evaluation)
        if views is None:
            views = [_view(cache, evaluation * self.layers) for cache in self.caches]
            self.by_evaluation[evaluation] = views
        if args:
            args = tuple(self._swap(a, views) for a in args)
        if kwargs:
            kwargs = {k: self._swap(v, views) for k, v in kwargs.items()}
        return args, kwargs

    def _swap(self, value: Any, views: list[Cache]) -> Any:
        if isinstance(value, Cache):
            for cache, view in zip(self.caches, views):
                if value is cache:
                    return view
        return value


def _view(cache: Cache, offset: int) -> Cache:
    if offset == 0:
        return cache
    if isinstance(cache, EncoderDecoderCache):
        return _EncoderDecoderSlotView(cache, offset)
    return _SlotView(cache, offset)


def _check_cache(caches: list[Any], settings: tuple[Any, ...], slots: int, role: str) -> None:
    """A KV cache holds keys/values of every field evaluation at the depth times of the settings it was filled under
    (slot e * L + l): continuing it after M, T, the solver or the mode changed would read other depth times (fewer
    evaluations: silently wrong logits; more: slots that do not exist). An empty cache takes the current settings.
    A cache of fixed size must have a slot per block application."""
    for cache in caches:
        if torch.compiler.is_compiling():  # a static cache's length is a tensor (no branching on it): tag only
            cache._ot_settings = settings
            continue
        filled = getattr(cache, "_ot_settings", None)
        if filled is None or cache.get_seq_length() == 0:
            cache._ot_settings = settings  # the cache (per-generation state, not the model) records its settings
        elif filled != settings:

            def describe(steps: Any, time: Any, solver: Any, paper: Any) -> str:
                return f"M={steps}, T={time}, solver {solver!r}, {'paper' if paper else 'residual'} mode"

            raise ValueError(
                f"This KV cache was filled with the {role} integrating at {describe(*filled)}, and the model now "
                f"integrates at {describe(*settings)}: its keys and values belong to other depth times. Start a new "
                "cache (past_key_values=None, or cache.reset()), or restore the settings to continue this one."
            )
        self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        if getattr(self_cache, "layer_class_to_replicate", None) is None and len(self_cache.layers) < slots:
            raise ValueError(
                f"This KV cache has {len(self_cache.layers)} layers, and the OT {role} applies its blocks {slots} "
                "times per forward, one cache slot each. Let the model build its cache (generate() and "
                "forward(use_cache=True) do), or size it with the unrolled config: "
                "DynamicCache(config=model.config.ot_cache_config()), or use DynamicCache() (it grows as needed). "
                "(PEFT's prefix tuning passes such a cache, one prefix per block: it does not apply to an OT model, "
                "whose blocks run several times per forward; prompt tuning, P-tuning and LoRA do.)"
            )


def _check_step_checkpointing(blocks: list[nn.Module], cached: bool, family: str) -> None:
    """Whole-step checkpointing recomputes every block in backward: checkpointed blocks would be recomputed twice,
    and a KV cache would be written twice."""
    if any(getattr(block, "gradient_checkpointing", False) for block in blocks):
        raise ValueError(
            f"ot_checkpoint_steps=True checkpoints whole solver steps, and the {family} blocks are checkpointed as "
            "well (gradient_checkpointing_enable()), so every block would be recomputed twice. Use one of them: "
            "model.gradient_checkpointing_disable(), or model.config.ot_checkpoint_steps = False."
        )
    if cached:
        raise ValueError(
            "ot_checkpoint_steps=True recomputes whole solver steps in backward, which would write the KV cache twice:"
            " train without a cache (use_cache=False, the default in training) or set ot_checkpoint_steps = False."
        )


def _valid_weights(mask: Any, hidden: torch.Tensor) -> torch.Tensor | None:
    """Per-position weights (B, Q, 1) of valid positions from a 2-D padding mask, or None (all positions count)."""
    if mask is None or not isinstance(mask, torch.Tensor) or mask.dim() != 2:
        return None
    q = hidden.shape[1]
    if mask.shape[0] != hidden.shape[0] or mask.shape[1] < q:
        return None
    return mask[:, -q:].to(dtype=torch.float32, device=hidden.device).unsqueeze(-1)


def _mean_square(v: torch.Tensor, weights: torch.Tensor | None, per_example: bool = False) -> torch.Tensor:
    """Mean of v^2 over entries at valid positions (all positions when weights is None), in fp32; per_example: one
    mean per row (batch,), each what the row alone gives."""
    v = v.float()
    if per_example:
        squares = v.pow(2).sum(-1, keepdim=True)
        if weights is None:
            return squares.flatten(1).sum(1) / (squares[0].numel() * v.shape[-1])
        total = (squares * weights).flatten(1).sum(1)
        return total / (weights.flatten(1).sum(1) * v.shape[-1]).clamp_min(1.0)
    if weights is None:
        mean: torch.Tensor = torch.linalg.vector_norm(v).square() / v.numel()  # one fused reduction
        return mean
    total = (v.pow(2).sum(-1, keepdim=True) * weights).sum()
    count = weights.sum() * v.shape[-1]
    return total / count.clamp_min(1.0)


def _error_norm(scaled: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """An adaptive solver's error norm: root mean square of the scaled error over each sequence's valid positions,
    the largest over the batch (every sequence meets the tolerance; padding does not count)."""
    v = scaled.float().pow(2)
    if v.dim() < 2:
        return v.mean().sqrt()
    if weights is None:
        return v.flatten(1).mean(1).max().sqrt()
    total = (v.sum(-1, keepdim=True) * weights).flatten(1).sum(1)
    count = weights.flatten(1).sum(1) * v.shape[-1]
    return (total / count.clamp_min(1.0)).max().sqrt()


def run_stack(
    stack: nn.Module,
    adapter: StackAdapter,
    forward: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    model_call: _ModelCall | None,
) -> Any:
    """One forward of `stack` (its class forward, `forward`) as an OT flow: the stack's call is started here, the loop
    runs over its stand-ins, and the flow must have integrated when the forward returns. `model_call` is the OT
    model's call this forward is part of, or None (the stack called on its own: generate's encoder pass)."""
    flow = cast(DepthFlow, stack.get_submodule(adapter.layers))
    kwargs = _cache_keyword(stack, kwargs)
    if model_call is not None and model_call.key is not flow.__dict__["_ot_key"]:
        model_call = None  # another OT model's call (never passed on by hf_ot; a caller's stray argument)
    config: Any
    if model_call is not None:
        config = model_call.config
    else:
        config = flow.owner_config() or stack.config
        config.validate_ot_settings()
    mask = _argument(stack, args, kwargs, adapter.mask_argument)
    if mask is None and model_call is not None:
        mask = model_call.valid_masks.get(flow.role)
    norm = _final_norm(stack, adapter)
    call = _FlowCall(stack, flow, config, model_call, norm, mask)
    if flow.role == "decoder" and not (stack.training and kwargs.get("use_cache") is None):
        if is_adaptive(config.ot_solver):
            changed = _without_default_cache(stack, args, kwargs)
            args, kwargs = changed if changed is not None else (args, kwargs)
        else:
            cache = _new_decoder_cache(stack, args, kwargs, config)
            if cache is not None:  # the stack would build one slot per block; hand it one per block application
                kwargs = {**kwargs, cache[0]: cache[1]}
    overrides: dict[str, Any] = {}
    if norm is not None and config.ot_mode == "paper":
        overrides[adapter.final_norm or ""] = _NormAfterFlow(norm, call)
    parent, _, name = adapter.layers.rpartition(".")
    if parent:  # the loop runs in a submodule (BertModel: encoder.layer): the call goes down to it
        kwargs = {**kwargs, _FLOW_ARGUMENT: call}
    else:
        overrides[name] = call.stand_ins
    out = forward(_VIEW_CLASSES[type(stack)](stack, overrides) if overrides else stack, *args, **kwargs)
    if out is not None and not call.ran:
        raise RuntimeError(
            f"The {flow.family} {flow.role} stack finished its forward without integrating the OT flow (its loop "
            f"called {call.next_index} of {len(call.calls)} blocks): the output would be the base model's. This "
            "transformers version loops over the layers in a way the adapter does not know; please report it."
        )
    return out


class _StackView:
    """A module as its own class forward sees it during one call: the attributes in `overrides` (the block list as
    the call's stand-ins, the final norm as its pass-through) are the call's; every other read goes to the module.
    Writes go to the module too (transformers marks a model whose output-capturing hooks it installed). Its class
    prints as the module's (`_view_class`), so transformers' per-class registries (output capturing) find it."""

    def __init__(self, module: nn.Module, overrides: dict[str, Any]) -> None:
        object.__setattr__(self, "_ot_view_of", module)
        for name, value in overrides.items():
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        if name == "_ot_view_of":  # not set yet (copy, pickle)
            raise AttributeError(name)
        return getattr(self._ot_view_of, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._ot_view_of, name, value)


class _NormAfterFlow:
    """Paper mode: the final norm is part of f (applied in every field evaluation), so the stack's own call of it
    after the integration passes X(T) through. A call before the integration normalises."""

    def __init__(self, norm: nn.Module, call: _FlowCall) -> None:
        self._norm = norm
        self._call = call

    def __call__(self, hidden: Any, *args: Any, **kwargs: Any) -> Any:
        return hidden if self._call.ran else self._norm(hidden, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in ("_norm", "_call"):
            raise AttributeError(name)
        return getattr(self._norm, name)


class _StackForward:
    """A stack's forward (an instance attribute, set at construction): its class forward run as an OT flow, with the
    OT model's call taken from the keyword arguments (or none: the stack called on its own). The signature is the
    class forward's (generate filters encoder arguments by it)."""

    def __init__(self, stack: nn.Module, adapter: StackAdapter) -> None:
        self.stack = stack  # strong: a deep copy of the stack gets a forward of the copy
        self.adapter = adapter

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(functools.partial(type(self.stack).forward, self.stack))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stack = kwargs.pop(_MODULE_ARGUMENT, None)
        if stack is None:  # stack.forward(...) called directly, without the module's __call__
            stack = self.stack
        model_call = kwargs.pop(CALL_ARGUMENT, None)
        return run_stack(stack, self.adapter, type(stack).forward, args, kwargs, model_call)


class _LoopForward:
    """The forward of the submodule that runs a stack's loop when that is not the stack (BertModel's encoder): with a
    stack's call in its keyword arguments, the class forward over a view whose block list is the call's stand-ins."""

    def __init__(self, module: nn.Module, path: str, name: str) -> None:
        self.module = module
        self.path = path  # from the stack to this module
        self.name = name  # of the block list on this module

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(functools.partial(type(self.module).forward, self.module))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call = kwargs.pop(_FLOW_ARGUMENT, None)
        if call is None:  # called on its own: the plain module over the real blocks
            return type(self.module).forward(self.module, *args, **kwargs)
        module = call.stack.get_submodule(self.path)  # of the stack called (a replica's own)
        view = _VIEW_CLASSES[type(module)](module, {self.name: call.stand_ins})
        return type(module).forward(view, *args, **kwargs)


def _called_module(
    module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Forward pre-hook on a stack: names the module called for its forward (a replica's forward is its original's)."""
    return args, {**kwargs, _MODULE_ARGUMENT: module}


def _argument(stack: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
    """The stack call's value of argument `name` (by keyword or position), or None."""
    if kwargs.get(name) is not None:
        return kwargs[name]
    index = _positional_index(type(stack), name)
    return args[index] if index is not None and index < len(args) else None


def _without_default_cache(
    stack: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """An adaptive solver's decoder call: (args, kwargs) with use_cache=False where the call gives neither use_cache
    nor a cache (the stack would build one from its config's use_cache, and a cache is refused: it holds one fixed
    grid), else None. Asked for explicitly, a cache reaches the flow, which raises."""
    index = _positional_index(type(stack), "use_cache")
    if index is None or _argument(stack, args, kwargs, "use_cache") is not None:
        return None
    if any(_argument(stack, args, kwargs, name) is not None for name in ("cache", "past_key_values")):
        return None
    if index < len(args):
        return (*args[:index], False, *args[index + 1 :]), kwargs
    return args, {**kwargs, "use_cache": False}


def _cache_keyword(stack: nn.Module, kwargs: dict[str, Any]) -> dict[str, Any]:
    """kwargs with a caller's cache under the deprecated `past_key_values` moved to `cache` (as the stack's own
    deprecate_kwarg would, with its warning): looked for under `cache` only, it would be replaced by a new one."""
    if "past_key_values" not in kwargs or _positional_index(type(stack), "past_key_values") is not None:
        return kwargs
    if _positional_index(type(stack), "cache") is None:
        return kwargs
    if not torch.compiler.is_compiling():
        warnings.warn(
            f"`past_key_values` is deprecated and will be removed in version 5.40.0 for `{type(stack).__name__}"
            ".forward`. Use `cache` instead.",
            FutureWarning,
            stacklevel=4,
        )
    kwargs = dict(kwargs)
    old = kwargs.pop("past_key_values")
    return {**kwargs, "cache": old if kwargs.get("cache") is None else kwargs["cache"]}


def _new_decoder_cache(
    stack: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], config: Any
) -> tuple[str, Cache] | None:
    """(argument name, cache) when a decoder stack called without a cache would build its own, else None."""
    name = next((n for n in ("cache", "past_key_values") if _positional_index(type(stack), n) is not None), None)
    if name is None or kwargs.get(name) is not None:
        return None
    index = _positional_index(type(stack), name)
    if index is not None and index < len(args) and args[index] is not None:
        return None
    use_cache = kwargs.get("use_cache")
    if use_cache is None:
        use_cache = getattr(stack.config, "use_cache", False)
    if not use_cache:
        return None
    from transformers.cache_utils import DynamicCache

    cache: Cache = DynamicCache(config=config.ot_cache_config())
    if config.is_encoder_decoder:
        cache = EncoderDecoderCache(cache, DynamicCache(config=config.ot_cache_config(evaluations=1)))
    return name, cache


def _final_norm(stack: nn.Module, adapter: StackAdapter) -> nn.Module | None:
    """The stack's final norm now, or None: no path, or a stack built without one (OPT, do_layer_norm_before=False)."""
    if not adapter.final_norm:
        return None
    parent_path, _, name = adapter.final_norm.rpartition(".")
    return getattr(stack.get_submodule(parent_path) if parent_path else stack, name, None)


def _set_submodule(root: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = root.get_submodule(parent_path) if parent_path else root
    parent._modules[name] = module


_POSITIONS: dict[tuple[type, str], int | None] = {}


def _positional_index(stack_class: type[nn.Module], argument: str) -> int | None:
    key = (stack_class, argument)
    if key not in _POSITIONS:
        params = list(inspect.signature(stack_class.forward).parameters)[1:]  # without self
        _POSITIONS[key] = params.index(argument) if argument in params else None
    return _POSITIONS[key]


def _is_norm(module: nn.Module) -> bool:
    name = type(module).__name__
    return isinstance(module, nn.LayerNorm) or name.endswith("LayerNorm") or name.endswith("RMSNorm")


def _remove_norms(root: nn.Module) -> None:
    for name, child in list(root.named_children()):
        if _is_norm(child):
            setattr(root, name, nn.Identity())
        else:
            _remove_norms(child)


def attach_depth_flow(stack: nn.Module, adapter: StackAdapter, config: Any, family: str) -> DepthFlow:
    """Replace `stack`'s block list by a DepthFlow over the same blocks (idempotent). Construction time only."""
    blocks = stack.get_submodule(adapter.layers)
    if isinstance(blocks, DepthFlow):
        return blocks
    if not isinstance(blocks, (nn.ModuleList, nn.Sequential)):
        raise TypeError(f"{family}: {adapter.layers} of {type(stack).__name__} is {type(blocks).__name__}, not a list.")
    if not config.ot_block_layer_norms:
        for block in blocks:
            _remove_norms(block)
        final_norm = _final_norm(stack, adapter)
        if adapter.final_norm and final_norm is not None and _is_norm(final_norm):
            _set_submodule(stack, adapter.final_norm, nn.Identity())
    layerdrop = float(getattr(stack, "layerdrop", 0.0) or 0.0)
    if hasattr(stack, "layerdrop"):
        # the base loop must call every block; the flow drops single block applications (torch types
        # Module.__setattr__'s value as a Tensor or Module; any value is set)
        stack.layerdrop = 0.0  # type: ignore[assignment]
    flow = DepthFlow(list(blocks), adapter=adapter, role=adapter.role(stack), family=family, layerdrop=layerdrop)
    _set_submodule(stack, adapter.layers, flow)
    # What a forward reads about the classes, found now (a compiled forward traces no signature inspection).
    for argument in (adapter.mask_argument, "use_cache", "cache", "past_key_values"):
        _positional_index(type(stack), argument)
    _view_class(type(stack))
    if not getattr(type(stack).forward, "_ot_forward", False):  # an OT model's own forward runs its flow
        stack.register_forward_pre_hook(_called_module, with_kwargs=True)
        stack.forward = _StackForward(stack, adapter)
    parent, _, name = adapter.layers.rpartition(".")
    if parent:
        loop = stack.get_submodule(parent)
        _view_class(type(loop))
        loop.forward = _LoopForward(loop, parent, name)
    if adapter.final_norm and "." in adapter.final_norm:
        raise TypeError(f"{family}: the final norm must be an attribute of the stack, not {adapter.final_norm!r}.")
    return flow


def set_owner(flow: DepthFlow, model: nn.Module, key: _CallKey) -> None:
    """Construction time: the OT model whose config the flow reads when its stack is called on its own, and whose
    calls (`key`) reach this flow."""
    flow.__dict__["_owner"] = model
    flow.__dict__["_ot_key"] = key


_VIEW_CLASSES: dict[type, type[_StackView]] = {}


def _view_class(module_class: type) -> type[_StackView]:
    """The view class of a module class: prints as the module class (transformers keys its registry of what a model
    class records, `output_attentions` and friends, by str(class)). Made at construction, never in a forward."""
    if module_class not in _VIEW_CLASSES:
        namespace = {"__module__": module_class.__module__, "__qualname__": module_class.__qualname__}
        _VIEW_CLASSES[module_class] = type(module_class.__name__, (_StackView,), namespace)
    return _VIEW_CLASSES[module_class]
