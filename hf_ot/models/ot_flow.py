"""How a base stack's own layer loop becomes one vector field integrated over depth.

The stack's block list is replaced by a `DepthFlow`: a ModuleList holding the SAME blocks under the same names
(checkpoints, PEFT targets and FSDP wrapping see the base model). During a forward of the stack, and only then, the
list hands the base loop one stand-in per block (by iteration, index or slice, whatever the loop does). Each
stand-in records its block's own call (masks per layer type, rotary embeddings, cache, ...) and passes the hidden
state through unchanged; the last one runs the solver, calling every block with ITS recorded arguments, and returns
X(T) to the loop. Attributes the loop reads on a layer (ModernBERT's `attention_type`) read through to the block.

A forward writes nothing on modules or configs. Its state (the recorded calls, the valid mask, the results) lives in
frames of a context variable (`_ACTIVE`), so threads and asyncio tasks that run one model at once each see their own:
the OT model's forward pushes its call's frame, a pre-hook on the stack pushes the stack's frame and a post-hook pops
it. torch runs no post-hook when a KeyboardInterrupt (a BaseException that is not an Exception) leaves a forward, so
each frame's extent is also held by a guard: the OT model's forward resets the context to what it was before it
pushed anything (a model that is its own stack pushes its stack's frame itself, inside that extent), and a stack's
forward (set at construction, `_GuardedForward`) drops its frame when such an exception leaves it. A frame belongs to
one OT model (`_CallKey`, shared by its inner models, flows, drafts and replicas): another OT model called inside a
forward starts its own call. KV-cache slots are routed by
handing each field evaluation a view of the cache that maps `layer_idx` l to slot e * L + l; in paper mode a permanent
hook on the final norm passes X(T) through when the stack's own call of it follows a finished integration.
A forward in which the loop did not call every block in order raises.

This file travels with checkpoints (trust_remote_code): it imports only torch, transformers and its siblings.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import weakref
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from transformers.cache_utils import Cache, EncoderDecoderCache

from .ot_solver import integrate, is_adaptive, num_stages

if TYPE_CHECKING:
    from collections.abc import Iterator

# The frames (_ModelCall, _FlowCall) of the forwards running in this thread / task, innermost last.
_ACTIVE: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar("hf_ot_active_forwards", default=())


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
    """Whose a forward's frames are: one per OT model, shared by its inner models, its flows (set at construction),
    and the shallow copies that run as the model (depth drafts, DataParallel replicas); a deep copy gets its own."""

    __slots__ = ("__weakref__",)


class _ModelCall:
    """One forward of an OT model: its config, what to record, and what the flows report back."""

    __slots__ = ("key", "config", "record", "valid_masks", "results", "want_reg", "evaluations")

    def __init__(
        self, key: _CallKey, config: Any, record: bool, valid_masks: dict[str, Any], want_reg: bool = True
    ) -> None:
        self.key = key  # the _CallKey of the model running this call
        self.config = config
        self.record = record
        self.want_reg = want_reg
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


def _current_model_call(key: _CallKey | None) -> _ModelCall | None:
    """The innermost model call if it is a call of the model with this _CallKey (the model itself, one of its inner
    models or flows), else None: another OT model called inside a forward (from a hook) starts its own call."""
    for frame in reversed(_ACTIVE.get()):
        if isinstance(frame, _ModelCall):
            return frame if frame.key is key else None
    return None


def _current_flow_call(flow: DepthFlow) -> _FlowCall | None:
    for frame in reversed(_ACTIVE.get()):
        if isinstance(frame, _FlowCall) and frame.flow is flow:
            return frame
    return None


def _push(frame: _ModelCall | _FlowCall) -> None:
    _ACTIVE.set(_ACTIVE.get() + (frame,))


def _pop(frame: _ModelCall | _FlowCall) -> None:
    _ACTIVE.set(tuple(f for f in _ACTIVE.get() if f is not frame))


class _BlockStandIn:
    """Block `index` as the base loop sees it during a forward: records the call; the last one integrates."""

    __slots__ = ("_call", "_index", "_block")

    def __init__(self, call: _FlowCall, index: int, block: nn.Module) -> None:
        self._call = call
        self._index = index
        self._block = block

    def __call__(self, hidden: Any, *args: Any, **kwargs: Any) -> Any:
        return self._call.flow._record(self._call, self._index, hidden, args, kwargs)

    def __getattr__(self, name: str) -> Any:  # layer attributes the loop reads (e.g. attention_type)
        if name in _BlockStandIn.__slots__:  # not set yet (torch.compile builds the object before __init__ runs)
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
        # weakref to the OT model whose config holds the settings (set once, by the model)
        self._owner: weakref.ref[nn.Module] | None = None
        self._ot_key: _CallKey | None = None  # the _CallKey of that model: its calls are this flow's (set once)

    # -- what the base loop sees: stand-ins during a forward of this flow's stack, the real blocks otherwise
    def __iter__(self) -> Iterator[Any]:
        call = _current_flow_call(self)
        if call is None:
            return super().__iter__()
        return iter(call.stand_ins)

    def __getitem__(self, idx: Any) -> Any:
        call = _current_flow_call(self)
        if call is not None:
            return call.stand_ins[idx]
        if isinstance(idx, slice):
            return nn.ModuleList(list(self._modules.values())[idx])
        return super().__getitem__(idx)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("A DepthFlow runs inside its stack's forward: call the model (or the stack), not the flow.")

    def owner_config(self) -> Any:
        """The config of the OT model this flow belongs to (where OT settings are read), or None."""
        owner = self._owner() if self._owner is not None else None
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
            cost=functools.partial(_mean_square, weights=weights) if want_reg else None,
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
    """The per-evaluation views of one forward's caches, built once per evaluation."""

    __slots__ = ("caches", "layers", "by_evaluation")

    def __init__(self, caches: list[Cache], layers: int) -> None:
        self.caches = caches
        self.layers = layers
        self.by_evaluation: dict[int, dict[int, Cache]] = {}

    def routed(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], evaluation: int
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if evaluation == 0:  # the first evaluation's slots are the cache's own layers
            return args, kwargs
        views = self.by_evaluation.get(evaluation)
        if views is None:
            offset = evaluation * self.layers
            views = {id(cache): _view(cache, offset) for cache in self.caches}
            self.by_evaluation[evaluation] = views
        if args:
            args = tuple(views.get(id(a), a) if isinstance(a, Cache) else a for a in args)
        if kwargs:
            kwargs = {k: views.get(id(v), v) if isinstance(v, Cache) else v for k, v in kwargs.items()}
        return args, kwargs


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
                "DynamicCache(config=model.config.ot_cache_config()), or use DynamicCache() (it grows as needed)."
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


def _mean_square(v: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Mean of v^2 over entries at valid positions (all positions when weights is None), in fp32."""
    v = v.float()
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


class _FlowSetup:
    """Forward pre-hook on a stack: pushes the stack's frame (config, mask and final norm looked up now)."""

    def __init__(self, adapter: StackAdapter) -> None:
        self.adapter = adapter

    def __call__(
        self, stack: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        flow = cast(DepthFlow, stack.get_submodule(self.adapter.layers))
        model_call = _current_model_call(flow._ot_key)
        if model_call is None and getattr(type(stack).forward, "_ot_forward", False):
            return None  # an OT model that is its own stack, starting its call: its forward pushes this frame
        return self.push(stack, args, kwargs, model_call)

    def push(
        self, stack: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], model_call: _ModelCall | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """Push the stack's frame; (args, kwargs) to call the stack with, or None where they are unchanged."""
        flow = cast(DepthFlow, stack.get_submodule(self.adapter.layers))
        config: Any
        if model_call is not None:
            config = model_call.config
        else:  # the stack called on its own (generate's encoder pass, model.get_decoder()(...))
            config = flow.owner_config() or stack.config
            config.validate_ot_settings()
        argument = self.adapter.mask_argument
        if argument in kwargs:
            mask = kwargs[argument]
        else:
            index = _positional_index(type(stack), argument)
            mask = args[index] if index is not None and index < len(args) else None
        if mask is None and model_call is not None:
            mask = model_call.valid_masks.get(flow.role)
        _push(_FlowCall(stack, flow, config, model_call, _final_norm(stack, self.adapter), mask))
        if flow.role == "decoder" and not self.training_forward(stack, kwargs):
            if is_adaptive(config.ot_solver):
                return _without_default_cache(stack, args, kwargs)
            cache = _new_decoder_cache(stack, args, kwargs, config)
            if cache is not None:  # the stack would build one slot per block; hand it one per block application
                return args, {**kwargs, cache[0]: cache[1]}
        return None

    @staticmethod
    def training_forward(stack: nn.Module, kwargs: dict[str, Any]) -> bool:
        return stack.training and kwargs.get("use_cache") is None


class _FlowTeardown:
    """Forward post-hook on a stack (torch calls it on return and on an Exception; a KeyboardInterrupt is left to the
    guards, `_GuardedForward` and the OT model's forward): pops the frame and checks that the flow ran."""

    def __init__(self, adapter: StackAdapter) -> None:
        self.adapter = adapter

    def __call__(self, stack: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        flow = cast(DepthFlow, stack.get_submodule(self.adapter.layers))
        call = _current_flow_call(flow)
        if call is None:
            return None
        _pop(call)
        if output is not None and not call.ran:
            raise RuntimeError(
                f"The {flow.family} {flow.role} stack finished its forward without integrating the OT flow (its loop "
                f"called {call.next_index} of {len(call.calls)} blocks): the output would be the base model's. This "
                "transformers version loops over the layers in a way the adapter does not know; please report it."
            )
        return None


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


def _paper_norm_pass_through(norm: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
    """Forward hook on a stack's final norm: in paper mode the norm is part of f (applied in every field evaluation),
    so the stack's own call of it after a finished integration passes X(T) through. Other calls are untouched."""
    for call in reversed(_ACTIVE.get()):
        if isinstance(call, _FlowCall):
            return args[0] if call.ran and call.config.ot_mode == "paper" else None
    return None


class _GuardedForward:
    """A stack's forward (an instance attribute, set at construction): the class's forward, and when a BaseException
    that is not an Exception (KeyboardInterrupt) leaves it, for which torch runs no post-hook, it drops the frame the
    stack's pre-hook pushed. The signature is the class forward's (generate filters encoder arguments by it)."""

    def __init__(self, stack: nn.Module) -> None:
        self.stack = stack  # strong: a deep copy of the stack gets a guard of the copy

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(functools.partial(type(self.stack).forward, self.stack))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stack = self.stack
        frames = _ACTIVE.get()
        if frames and isinstance(frames[-1], _FlowCall) and frames[-1].stack is not stack:
            called = frames[-1].stack  # a shallow copy sharing this guard (a DataParallel replica): its frame
            if called.__dict__.get("forward") is self:
                stack = called
        try:
            return type(stack).forward(stack, *args, **kwargs)
        except BaseException as err:
            if not isinstance(err, Exception):
                _ACTIVE.set(tuple(f for f in _ACTIVE.get() if not (isinstance(f, _FlowCall) and f.stack is stack)))
            raise


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
    stack.register_forward_pre_hook(_FlowSetup(adapter), with_kwargs=True)
    stack.register_forward_hook(_FlowTeardown(adapter), with_kwargs=True, always_call=True)
    if not getattr(type(stack).forward, "_ot_forward", False):  # an OT model's own forward guards its frames
        stack.forward = _GuardedForward(stack)
    norm = _final_norm(stack, adapter)
    if norm is not None:
        norm.register_forward_hook(_paper_norm_pass_through)
    return flow


def set_owner(flow: DepthFlow, model: nn.Module, key: _CallKey) -> None:
    """Construction time: the OT model whose config the flow reads when its stack is called on its own, and whose
    calls (`key`) the flow's frames belong to."""
    flow._owner = weakref.ref(model)
    flow._ot_key = key
