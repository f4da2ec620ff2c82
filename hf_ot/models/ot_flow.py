"""How a base stack's own layer loop becomes one vector field integrated over depth.

The stack's block list is replaced by a `DepthFlow`: a ModuleList holding the SAME blocks under the same names
(checkpoints, PEFT targets and FSDP wrapping see the base model). During a forward of the stack, and only then, the
list hands the base loop one stand-in per block (by iteration, index or slice, whatever the loop does). Each
stand-in records its block's own call (masks per layer type, rotary embeddings, cache, ...) and passes the hidden
state through unchanged; the last one runs the solver, calling every block with ITS recorded arguments, and returns
X(T) to the loop. Attributes the loop reads on a layer (ModernBERT's `attention_type`) read through to the block.

Per-call state lives in a `_FlowCall` set up by a pre-hook on the stack and torn down by a post-hook that always runs;
blocks, the final norm and the config are looked up at call time (PEFT may have replaced the norm, DataParallel
replicas hold their own modules). A forward in which the loop did not call every block in order raises.

This file travels with checkpoints (trust_remote_code): it imports only torch, transformers and its siblings.
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch import nn
from transformers.cache_utils import Cache

from .ot_config import OTConfigMixin, copy_ot_settings
from .ot_solver import integrate


class StackAdapter:
    """How one family's stack calls its blocks. Subclasses set the class attributes and override what differs."""

    stack_classes: tuple[type, ...] = ()  # modules that own the layer loop (and receive the 2-D padding mask)
    layers: str = "layers"  # path from the stack to its ModuleList of blocks
    final_norm: str | None = None  # path from the stack to the norm it applies after its loop, if any
    mask_argument: str = "attention_mask"  # the stack forward's 2-D padding mask argument

    def role(self, stack: nn.Module) -> str:
        return "decoder"

    def self_attention(self, block: nn.Module) -> nn.Module | None:
        """The block's self-attention module, whose `layer_idx` picks its KV-cache slot."""
        return None

    def hidden_of(self, out):
        """The hidden state in a block's output."""
        return out[0] if isinstance(out, tuple) else out

    def thread(self, out, call: tuple[tuple, dict]) -> tuple[tuple, dict]:
        """The next block's (args, kwargs), given this block's output (T5 threads its position biases)."""
        return call

    def loop_output(self, hidden: torch.Tensor, call: tuple[tuple, dict]):
        """What the base loop expects back from a block call."""
        return hidden


class _ModelCall:
    """One forward of an OT model: its config, what to record, and what the flows report back."""

    __slots__ = ("config", "record", "valid_masks", "results")

    def __init__(self, config, record: bool, valid_masks: dict):
        self.config = config
        self.record = record
        self.valid_masks = valid_masks  # role -> 2-D mask, for stacks whose own mask argument is None
        self.results = []  # (role, reg, trajectory) per integrated stack


class _FlowCall:
    """One forward of a stack: the recorded block calls and the call-time modules."""

    def __init__(self, flow, config, final_norm, valid_mask):
        self.config = config
        self.final_norm = final_norm
        self.valid_mask = valid_mask
        n = len(flow._modules)
        self.stand_ins = [_BlockStandIn(flow, i, block) for i, block in enumerate(flow._modules.values())]
        self.calls: list = [None] * n
        self.hidden = None
        self.next_index = 0
        self.ran = False


class _BlockStandIn:
    """Block `index` as the base loop sees it during a forward: records the call; the last one integrates."""

    __slots__ = ("_flow", "_index", "_block")

    def __init__(self, flow, index, block):
        self._flow = flow
        self._index = index
        self._block = block

    def __call__(self, hidden, *args, **kwargs):
        return self._flow._record(self._index, hidden, args, kwargs)

    def __getattr__(self, name):  # layer attributes the loop reads (e.g. attention_type)
        if name in _BlockStandIn.__slots__:  # not set yet (torch.compile builds the object before __init__ runs)
            raise AttributeError(name)
        return getattr(self._block, name)

    def __repr__(self):
        return f"StandIn({self._index}, {type(self._block).__name__})"


class DepthFlow(nn.ModuleList):
    """The stack's blocks as ONE vector field, integrated over depth inside the base loop (see the module doc)."""

    def __init__(self, blocks, *, adapter: StackAdapter, role: str, family: str, layerdrop: float = 0.0):
        super().__init__(blocks)
        self.adapter = adapter
        self.role = role
        self.family = family
        self.layerdrop = layerdrop  # moved here from the base loop, which must call every block
        self._call = None  # the current _FlowCall (only during a forward of the stack)
        self._model_call = None  # the current _ModelCall (only during a forward of the OT model)
        self._model_config = None  # the OT model's own config (set by the model): where OT settings are read

    # -- what the base loop sees: stand-ins during a forward, the real blocks otherwise
    def __iter__(self):
        if self._call is None:
            return super().__iter__()
        return iter(self._call.stand_ins)

    def __getitem__(self, idx):
        if self._call is not None:
            return self._call.stand_ins[idx]
        if isinstance(idx, slice):
            return nn.ModuleList(list(self._modules.values())[idx])
        return super().__getitem__(idx)

    def forward(self, *args, **kwargs):
        raise TypeError("A DepthFlow runs inside its stack's forward: call the model (or the stack), not the flow.")

    # -- recording the base loop's calls
    def _record(self, index, hidden, args, kwargs):
        call = self._call
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
    def _integrate(self, call):
        blocks = list(self._modules.values())
        config = call.config
        steps, time = config.ot_steps_and_time(self.role)
        adapter = self.adapter
        paper = config.ot_mode == "paper"
        norm = call.final_norm
        weights = _valid_weights(call.valid_mask, call.hidden)
        calls = list(call.calls)  # adapters thread block outputs into the next block's call
        _size_cross_attention_cache(calls[0], len(blocks))
        drop = self.layerdrop if self.training else 0.0
        # KV slots matter only with a cache (training forwards have none): routing costs a pass over the blocks
        cached = any(isinstance(value, Cache) for args, kwargs in calls for value in (*args, *kwargs.values()))
        if cached:
            _check_cache_settings(calls[0], (steps, time, config.ot_solver, paper), self.role)

        def field(x, evaluation):
            if cached:
                self._route_cache(blocks, evaluation)
            y = x
            for layer, block in enumerate(blocks):
                if drop > 0.0 and torch.rand([]) < drop:
                    continue  # LayerDrop of one block application
                args, kwargs = calls[layer]
                out = block(y, *args, **kwargs)
                y = adapter.hidden_of(out)
                if layer + 1 < len(blocks):
                    calls[layer + 1] = adapter.thread(out, calls[layer + 1])
            if not paper:
                return y - x
            return norm(y) if norm is not None else y

        model_call = self._model_call  # read now: a model that is itself the stack sets it after the pre-hook
        record = model_call is not None and model_call.record
        checkpoint_steps = config.ot_checkpoint_steps and self.training and torch.is_grad_enabled()
        if checkpoint_steps:
            _check_step_checkpointing(blocks, cached, self.family)
        try:
            x, reg, trajectory = integrate(
                field, call.hidden, steps=steps, time=time, solver=config.ot_solver,
                cost=functools.partial(_mean_square, weights=weights), record_trajectory=record,
                checkpoint_steps=checkpoint_steps,
            )
        finally:
            if cached:
                self._route_cache(blocks, None)
        if model_call is not None:
            model_call.results.append((self.role, reg, trajectory))
        return x, calls[-1]

    def _route_cache(self, blocks, evaluation: int | None) -> None:
        # Each (evaluation, layer) application owns KV slot evaluation * L + layer; None restores the base numbering.
        for layer, block in enumerate(blocks):
            attn = self.adapter.self_attention(block)
            if attn is None or not hasattr(attn, "layer_idx"):
                continue
            if not hasattr(attn, "ot_base_layer_idx"):
                attn.ot_base_layer_idx = attn.layer_idx if attn.layer_idx is not None else layer
            base = attn.ot_base_layer_idx
            attn.layer_idx = base if evaluation is None else evaluation * len(blocks) + base


def _check_cache_settings(call, settings: tuple, role: str) -> None:
    """A KV cache holds keys/values of every field evaluation at the depth times of the settings it was filled under
    (slot e * L + l): continuing it after M, T, the solver or the mode changed would read other depth times (fewer
    evaluations: silently wrong logits; more: slots that do not exist). An empty cache takes the current settings."""
    args, kwargs = call
    for cache in (value for value in (*args, *kwargs.values()) if isinstance(value, Cache)):
        if torch.compiler.is_compiling():  # a static cache's length is a tensor (no branching on it): tag only
            cache._ot_settings = settings
            continue
        filled = getattr(cache, "_ot_settings", None)
        if cache.get_seq_length() == 0 or filled is None:
            cache._ot_settings = settings
        elif filled != settings:
            def describe(steps, time, solver, paper):
                return f"M={steps}, T={time}, solver {solver!r}, {'paper' if paper else 'residual'} mode"
            raise ValueError(
                f"This KV cache was filled with the {role} integrating at {describe(*filled)}, and the model now "
                f"integrates at {describe(*settings)}: its keys and values belong to other depth times. Start a new "
                "cache (past_key_values=None, or cache.reset()), or restore the settings to continue this one."
            )


def _check_step_checkpointing(blocks, cached: bool, family: str) -> None:
    """Whole-step checkpointing recomputes every block in backward: checkpointed blocks would be recomputed twice,
    and a KV cache would be written twice."""
    if any(getattr(block, "gradient_checkpointing", False) for block in blocks):
        raise ValueError(
            f"ot_checkpoint_steps=True checkpoints whole solver steps, and the {family} blocks are checkpointed as well "
            "(gradient_checkpointing_enable()), so every block would be recomputed twice. Use one of them: "
            "model.gradient_checkpointing_disable(), or model.config.ot_checkpoint_steps = False."
        )
    if cached:
        raise ValueError(
            "ot_checkpoint_steps=True recomputes whole solver steps in backward, which would write the KV cache twice:"
            " train without a cache (use_cache=False, the default in training) or set ot_checkpoint_steps = False."
        )


def _valid_weights(mask, hidden):
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
        return torch.linalg.vector_norm(v).square() / v.numel()  # one fused reduction
    total = (v.pow(2).sum(-1, keepdim=True) * weights).sum()
    count = weights.sum() * v.shape[-1]
    return total / count.clamp_min(1.0)


def _size_cross_attention_cache(call, num_layers: int) -> None:
    """Cross-attention K/V depend only on the encoder output and the weights, so every field evaluation shares the
    L layers of the cross-attention cache. Caches built from the unrolled decoder config have M x stages x L: drop
    the never-used ones (still empty) so every layer of the cache holds data, as cache consumers assume."""
    args, kwargs = call
    for value in (*args, *kwargs.values()):
        cross = getattr(value, "cross_attention_cache", None)
        layers = getattr(cross, "layers", None)
        if isinstance(layers, list) and len(layers) > num_layers:
            if not any(getattr(layer, "is_initialized", True) for layer in layers[num_layers:]):
                del layers[num_layers:]


class _FlowSetup:
    """Forward pre-hook on a stack: starts the flow's call (config, mask and final norm looked up now)."""

    def __init__(self, adapter: StackAdapter):
        self.adapter = adapter

    def __call__(self, stack, args, kwargs):
        flow = stack.get_submodule(self.adapter.layers)
        model_call = flow._model_call
        if model_call is not None:
            config = model_call.config
        else:  # the stack called on its own (generate's encoder pass, model.get_decoder()(...))
            config = flow._model_config if flow._model_config is not None else stack.config
            if isinstance(getattr(stack, "config", None), OTConfigMixin):
                copy_ot_settings(config, stack.config)  # a stack built from a copy sizes its cache from it
        config.validate_ot_settings()
        argument = self.adapter.mask_argument
        if argument in kwargs:
            mask = kwargs[argument]
        else:
            index = _positional_index(type(stack), argument)
            mask = args[index] if index is not None and index < len(args) else None
        if mask is None and model_call is not None:
            mask = model_call.valid_masks.get(flow.role)
        norm = _final_norm(stack, self.adapter)
        if norm is not None and config.ot_mode == "paper":
            # In paper mode the final norm is part of f: the stack's own call after the loop passes X(T) through.
            _set_submodule(stack, self.adapter.final_norm, _PASS_THROUGH)
        flow._call = _FlowCall(flow, config, norm, mask)


class _FlowTeardown:
    """Forward post-hook on a stack (always called, also on errors): ends the call and checks that the flow ran."""

    def __init__(self, adapter: StackAdapter):
        self.adapter = adapter

    def __call__(self, stack, args, kwargs, output):
        flow = stack.get_submodule(self.adapter.layers)
        call, flow._call = flow._call, None
        if call is None:
            return None
        if call.final_norm is not None and stack.get_submodule(self.adapter.final_norm) is _PASS_THROUGH:
            _set_submodule(stack, self.adapter.final_norm, call.final_norm)
        if output is not None and not call.ran:
            raise RuntimeError(
                f"The {flow.family} {flow.role} stack finished its forward without integrating the OT flow (its loop "
                f"called {call.next_index} of {len(call.calls)} blocks): the output would be the base model's. This "
                "transformers version loops over the layers in a way the adapter does not know; please report it."
            )
        return None


_PASS_THROUGH = nn.Identity()


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


@functools.lru_cache(maxsize=None)
def _positional_index(stack_class: type, argument: str) -> int | None:
    params = list(inspect.signature(stack_class.forward).parameters)[1:]  # without self
    return params.index(argument) if argument in params else None


def _is_norm(module: nn.Module) -> bool:
    name = type(module).__name__
    return isinstance(module, nn.LayerNorm) or name.endswith("LayerNorm") or name.endswith("RMSNorm")


def _remove_norms(root: nn.Module) -> None:
    for name, child in list(root.named_children()):
        if _is_norm(child):
            setattr(root, name, nn.Identity())
        else:
            _remove_norms(child)


def attach_depth_flow(stack: nn.Module, adapter: StackAdapter, config, family: str) -> DepthFlow:
    """Replace `stack`'s block list by a DepthFlow over the same blocks (idempotent)."""
    blocks = stack.get_submodule(adapter.layers)
    if isinstance(blocks, DepthFlow):
        return blocks
    if not config.ot_block_layer_norms:
        for block in blocks:
            _remove_norms(block)
        if _is_norm(_final_norm(stack, adapter)):
            _set_submodule(stack, adapter.final_norm, nn.Identity())
    layerdrop = float(getattr(stack, "layerdrop", 0.0) or 0.0)
    if hasattr(stack, "layerdrop"):
        stack.layerdrop = 0.0  # the base loop must call every block; the flow drops single block applications
    flow = DepthFlow(list(blocks), adapter=adapter, role=adapter.role(stack), family=family, layerdrop=layerdrop)
    _set_submodule(stack, adapter.layers, flow)
    stack.register_forward_pre_hook(_FlowSetup(adapter), with_kwargs=True)
    stack.register_forward_hook(_FlowTeardown(adapter), with_kwargs=True, always_call=True)
    return flow
