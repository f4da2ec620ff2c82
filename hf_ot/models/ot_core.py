"""OT-Transformer core: the depth integrator and the pieces every family shares.

A base transformer's layer stack S = block_L o ... o block_1 becomes one vector field f over depth t in [0, T]:

    residual mode:  f(X) = S(X) - X                  (T = 1, M = 1 reproduces the base model exactly)
    paper mode:     f(X) = final_norm(S(X))          (the official OT-Transformer code; no norm after the ODE)

integrated with M explicit Runge-Kutta steps of size dt = T / M. The transport cost is integrated alongside as an
extra state r' = mean over valid entries of f(X)^2, with the same solver weights, so for Euler

    reg = sum_k dt * mean(f(X_k)^2)                   (the official code's normalisation, padding excluded)

and for Heun / RK4 reg = sum_k dt * sum_s b_s * mean(f(stage_s)^2).

How it plugs in: the stack's ModuleList of blocks is replaced by a `DepthFlow`, a ModuleList holding the SAME blocks
(parameter names unchanged). When the base model's own forward loops over it, the loop sees one layer: the flow,
which runs the integrator over all blocks. Embeddings, masks, caches, heads and losses stay transformers' own code.

This file travels with checkpoints (trust_remote_code): it imports nothing from hf_ot, only torch and transformers.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
from typing import Any

import torch
from torch import nn

# Butcher tableaux of the explicit solvers: (a, b). Row s of `a` (s >= 1) weighs stages 0..s-1 for stage s.
SOLVERS: dict[str, tuple[tuple[tuple[float, ...], ...], tuple[float, ...]]] = {
    "euler": ((), (1.0,)),
    "heun": (((1.0,),), (0.5, 0.5)),
    "rk4": (((0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)), (1 / 6, 1 / 3, 1 / 3, 1 / 6)),
}
MODES = ("residual", "paper")


def num_stages(solver: str) -> int:
    """Field evaluations per step: each one applies every block once and owns its own KV-cache slots."""
    return len(SOLVERS[solver][1])


# --------------------------------------------------------------------------------------------------- configuration


@dataclasses.dataclass(kw_only=True, repr=False)
class OTConfigMixin:
    """OT settings shared by every family config. Put it FIRST in the bases: `class X(OTConfigMixin, BaseConfig)`.

    Fields are typed `Any` so that a bad value reaches our checks (a ValueError naming the field), not a type error.
    """

    ot_num_steps: Any = 1  # M, solver steps over depth
    ot_terminal_time: Any = 1.0  # T, dt = T / M
    ot_lambda: Any = 0.1  # weight of reg in the training loss (used by OTTrainer; the model's loss is the task's)
    ot_solver: Any = "euler"  # one of SOLVERS
    ot_mode: Any = "residual"  # one of MODES
    ot_block_layer_norms: Any = True  # paper mode only: False removes every LayerNorm in the field (nanoGPT run)
    ot_decoder_num_steps: Any = None  # encoder-decoder only: the decoder's M (None: same as the encoder's)
    ot_decoder_terminal_time: Any = None  # encoder-decoder only: the decoder's T (None: same as the encoder's)

    # Set by each family (class attributes, not dataclass fields): the attributes holding the decoder's layer count,
    # and the Auto class -> OT class name map written to `auto_map` so a saved folder loads with trust_remote_code.
    _ot_decoder_layer_attrs = ()
    _ot_auto_classes = {}

    def __post_init__(self, **kwargs):
        self.validate_ot_settings()
        if getattr(self, "auto_map", None) is None and self._ot_auto_classes:
            module = type(self).__module__.rsplit(".", 1)[-1]  # the family file, copied flat next to the weights
            self.auto_map = {"AutoConfig": f"{module}.{type(self).__name__}"} | {
                auto: f"{module}.{name}" for auto, name in self._ot_auto_classes.items()
            }
        super().__post_init__(**kwargs)

    def validate_ot_settings(self) -> None:
        def check_steps(name, value, optional=False):
            if optional and value is None:
                return
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1 (the number of solver steps M), got {value!r}.")

        def check_time(name, value, optional=False):
            if optional and value is None:
                return
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a number > 0 (the terminal time T), got {value!r}.")

        check_steps("ot_num_steps", self.ot_num_steps)
        check_time("ot_terminal_time", self.ot_terminal_time)
        if isinstance(self.ot_lambda, bool) or not isinstance(self.ot_lambda, (int, float)) or self.ot_lambda < 0:
            raise ValueError(f"ot_lambda must be a number >= 0 (the weight of reg in the loss), got {self.ot_lambda!r}.")
        if self.ot_solver not in SOLVERS:
            raise ValueError(f"ot_solver must be one of {sorted(SOLVERS)}, got {self.ot_solver!r}.")
        if self.ot_mode not in MODES:
            raise ValueError(f"ot_mode must be one of {list(MODES)}, got {self.ot_mode!r}.")
        if not isinstance(self.ot_block_layer_norms, bool):
            raise ValueError(f"ot_block_layer_norms must be True or False, got {self.ot_block_layer_norms!r}.")
        if not self.ot_block_layer_norms and self.ot_mode != "paper":
            raise ValueError(
                "ot_block_layer_norms=False is only allowed with ot_mode='paper' (residual mode must keep the base "
                "stack intact); set ot_mode='paper' or keep ot_block_layer_norms=True."
            )
        if self.is_encoder_decoder:
            check_steps("ot_decoder_num_steps", self.ot_decoder_num_steps, optional=True)
            check_time("ot_decoder_terminal_time", self.ot_decoder_terminal_time, optional=True)
        elif self.ot_decoder_num_steps is not None or self.ot_decoder_terminal_time is not None:
            raise ValueError(
                "ot_decoder_num_steps / ot_decoder_terminal_time apply to encoder-decoder families (T5, BART) only; "
                f"{type(self).__name__} has one stack: use ot_num_steps / ot_terminal_time."
            )

    def ot_steps_and_time(self, role: str) -> tuple[int, float]:
        """(M, T) of the stack with this role ('encoder', 'decoder'); a decoder-only model uses the shared ones."""
        if role == "decoder" and self.is_encoder_decoder:
            steps = self.ot_decoder_num_steps if self.ot_decoder_num_steps is not None else self.ot_num_steps
            time = self.ot_decoder_terminal_time if self.ot_decoder_terminal_time is not None else self.ot_terminal_time
            return steps, float(time)
        return self.ot_num_steps, float(self.ot_terminal_time)

    @classmethod
    def from_base_config(cls, base_config, **ot_settings):
        """The OT config of a base checkpoint's config (same architecture fields) plus OT settings."""
        base_type = next(k for k in cls.__mro__ if "model_type" in k.__dict__ and not issubclass(k, OTConfigMixin))
        if isinstance(base_config, OTConfigMixin):
            values = base_config.to_dict()
        elif isinstance(base_config, base_type):
            values = base_config.to_dict()
        else:
            raise ValueError(
                f"{cls.__name__} converts {base_type.model_type!r} checkpoints, but the base config is "
                f"{type(base_config).__name__} (model_type={getattr(base_config, 'model_type', None)!r}). "
                "Use the OT config class of that family (hf_ot.convert picks it from model_type)."
            )
        unknown = [k for k in ot_settings if not k.startswith("ot_")]
        if unknown:
            raise ValueError(f"Unknown OT settings {unknown}: OT fields are {sorted(OT_FIELDS)}.")
        for key in ("model_type", "transformers_version", "auto_map", "architectures"):
            values.pop(key, None)
        values.update(ot_settings)
        return cls(**values)

    def get_text_config(self, decoder=None, encoder=None):
        # Cache layout: transformers sizes every cache from get_text_config(decoder=True).num_hidden_layers. An OT
        # decoder applies each layer once per field evaluation, so its "unrolled" decoder has steps * stages * L
        # attention layers, one KV slot each. `_ot_unrolled` keeps the copy from being multiplied again.
        text_config = super().get_text_config(decoder=decoder, encoder=encoder)
        if not decoder or encoder or getattr(self, "_ot_unrolled", False):
            return text_config
        steps, _ = self.ot_steps_and_time("decoder")
        slots = self.ot_decoder_layers() * steps * num_stages(self.ot_solver)
        text_config = copy.copy(text_config) if text_config is self else text_config
        for attr in self._ot_decoder_layer_attrs:
            setattr(text_config, attr, slots)
        text_config._ot_unrolled = True
        return text_config

    def ot_decoder_layers(self) -> int:
        return getattr(self, self._ot_decoder_layer_attrs[0])


OT_FIELDS = {f.name for f in dataclasses.fields(OTConfigMixin)}


# ---------------------------------------------------------------------------------------------------- the adapters


class StackAdapter:
    """How one family's stack calls its blocks. Subclasses set the class attributes and override what differs."""

    stack_classes: tuple[type, ...] = ()  # modules that own the layer loop and receive the 2-D attention mask
    layers: str = "layers"  # path from the stack to its ModuleList of blocks
    final_norm: str | None = None  # attribute of the norm the stack applies after its loop, if any
    mask_argument: str = "attention_mask"  # the stack forward's 2-D padding mask argument

    def role(self, stack: nn.Module) -> str:
        return "decoder"

    def self_attention(self, block: nn.Module) -> nn.Module | None:
        """The block's self-attention module, whose `layer_idx` picks its KV-cache slot."""
        return None

    def block_output(self, out, args: tuple, kwargs: dict):
        """Split a block's output into the hidden state and the (args, kwargs) for the next block call."""
        return out, args, kwargs

    def loop_output(self, hidden: torch.Tensor, args: tuple, kwargs: dict):
        """What the base loop expects back from one layer call."""
        return hidden


# ------------------------------------------------------------------------------------------------------ the flow


class DepthFlow(nn.ModuleList):
    """The stack's blocks as ONE vector field, integrated over depth when the base loop calls it.

    Holds the same block modules under the same names as the ModuleList it replaces. Iterating it yields only
    itself, so the base model's `for block in self.layers: hidden = block(hidden, ...)` runs the whole ODE.
    """

    def __init__(self, blocks, *, config, adapter: StackAdapter, role: str, final_norm=None, layerdrop=0.0):
        super().__init__(blocks)
        self.config = config  # the model's config: M, T, solver and mode are read at each call
        self.adapter = adapter
        self.role = role
        self.layerdrop = layerdrop
        self.__dict__["final_norm"] = final_norm  # not registered: the stack owns it under its base name
        self.valid_mask = None  # 2-D padding mask of the current call, set by the stack's pre-hook
        self.record_trajectory = False
        self.last_reg = None
        self.last_trajectory = None

    def __iter__(self):
        return iter((self,))

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return nn.ModuleList(list(self._modules.values())[idx])
        return super().__getitem__(idx)

    def blocks(self) -> list[nn.Module]:
        return list(self._modules.values())

    def start(self, record_trajectory: bool = False) -> None:
        self.last_reg = None
        self.last_trajectory = None
        self.record_trajectory = record_trajectory

    def forward(self, hidden, *args, **kwargs):
        steps, time = self.config.ot_steps_and_time(self.role)
        a, b = SOLVERS[self.config.ot_solver]
        dt = time / steps
        blocks = self.blocks()
        weights = self._valid_weights(hidden)
        call = [args, kwargs]  # the block call's arguments; T5 threads its position biases through them
        x = hidden
        reg = hidden.new_zeros((), dtype=torch.float32)
        trajectory = [x] if self.record_trajectory else None
        try:
            for step in range(steps):
                stages = []
                for s in range(len(b)):
                    x_s = x
                    for coeff, k in zip(a[s - 1] if s else (), stages):
                        if coeff:
                            x_s = torch.add(x_s, k, alpha=dt * coeff)
                    stages.append(self._field(x_s, step * len(b) + s, blocks, call))
                for coeff, k in zip(b, stages):
                    x = torch.add(x, k, alpha=dt * coeff)
                    reg = reg + (dt * coeff) * _mean_square(k, weights)
                if trajectory is not None:
                    trajectory.append(x)
        finally:
            self._route_cache(blocks, None)
        self.last_reg = reg
        self.last_trajectory = tuple(trajectory) if trajectory is not None else None
        self.valid_mask = None
        return self.adapter.loop_output(x, *call)

    def _field(self, x, evaluation: int, blocks, call):
        """f(x): every block once, in order, with this evaluation's KV-cache slots."""
        self._route_cache(blocks, evaluation)
        y = x
        for block in blocks:
            if self.training and self.layerdrop > 0.0 and torch.rand([]) < self.layerdrop:
                continue  # LayerDrop, moved here from the base loop (which sees only the flow)
            out = block(y, *call[0], **call[1])
            y, call[0], call[1] = self.adapter.block_output(out, call[0], call[1])
        if self.config.ot_mode == "residual":
            return y - x
        return self.final_norm.forward(y) if self.final_norm is not None else y  # .forward: skip the pass-through hook

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

    def _valid_weights(self, hidden):
        mask = self.valid_mask
        if mask is None or mask.dim() != 2:
            return None
        q = hidden.shape[1]
        if mask.shape[1] < q:
            return None
        return mask[:, -q:].to(dtype=torch.float32, device=hidden.device).unsqueeze(-1)


def _mean_square(v: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Mean of v^2 over entries at valid positions (all positions when weights is None)."""
    v = v.float()
    if weights is None:
        return torch.linalg.vector_norm(v).square() / v.numel()  # one fused reduction
    total = (v.pow(2).sum(-1, keepdim=True) * weights).sum()
    count = weights.sum() * v.shape[-1]
    return total / count.clamp_min(1.0)


class _CaptureValidMask:
    """Forward pre-hook on a stack: hands the call's 2-D padding mask to its flow (for reg over valid positions)."""

    def __init__(self, layers_path: str, argument: str):
        self.layers_path = layers_path
        self.argument = argument

    def __call__(self, module, args, kwargs):
        if self.argument in kwargs:
            mask = kwargs[self.argument]
        else:
            index = _positional_index(type(module), self.argument)
            mask = args[index] if index is not None and index < len(args) else None
        module.get_submodule(self.layers_path).valid_mask = mask if isinstance(mask, torch.Tensor) else None


@functools.lru_cache(maxsize=None)
def _positional_index(stack_class: type, argument: str) -> int | None:
    params = list(inspect.signature(stack_class.forward).parameters)[1:]  # without self
    return params.index(argument) if argument in params else None


class _NormInsideField:
    """Forward hook on the stack's final norm: in paper mode the norm is part of f, so after the ODE it passes through."""

    def __init__(self, config):
        self.config = config

    def __call__(self, module, args, output):
        return args[0] if self.config.ot_mode == "paper" else None


def _is_norm(module: nn.Module) -> bool:
    return isinstance(module, nn.LayerNorm) or type(module).__name__.endswith("LayerNorm")


def _remove_norms(root: nn.Module) -> None:
    for name, child in list(root.named_children()):
        if _is_norm(child):
            setattr(root, name, nn.Identity())
        else:
            _remove_norms(child)


def attach_depth_flow(stack: nn.Module, adapter: StackAdapter, config) -> DepthFlow:
    """Replace `stack`'s block list by a DepthFlow over the same blocks (idempotent)."""
    parent_path, _, attr = adapter.layers.rpartition(".")
    parent = stack.get_submodule(parent_path) if parent_path else stack
    blocks = getattr(parent, attr)
    if isinstance(blocks, DepthFlow):
        return blocks
    final_norm = getattr(stack, adapter.final_norm) if adapter.final_norm else None
    if not config.ot_block_layer_norms:
        for block in blocks:
            _remove_norms(block)
        if final_norm is not None and _is_norm(final_norm):
            final_norm = nn.Identity()
            setattr(stack, adapter.final_norm, final_norm)
    layerdrop = float(getattr(stack, "layerdrop", 0.0) or 0.0)
    if hasattr(stack, "layerdrop"):
        stack.layerdrop = 0.0  # the base loop would drop the whole flow; the flow drops single blocks instead
    flow = DepthFlow(
        list(blocks), config=config, adapter=adapter, role=adapter.role(stack), final_norm=final_norm,
        layerdrop=layerdrop,
    )
    setattr(parent, attr, flow)
    stack.register_forward_pre_hook(_CaptureValidMask(adapter.layers, adapter.mask_argument), with_kwargs=True)
    if final_norm is not None:
        final_norm.register_forward_hook(_NormInsideField(config))
    return flow


# ------------------------------------------------------------------------------------------------------- outputs

_OUTPUT_CLASSES: dict[type, type] = {}


def ot_output_class(base: type) -> type:
    """`base` (a ModelOutput dataclass) with one more declared field, `reg`: the transport cost of this forward."""
    if base not in _OUTPUT_CLASSES:
        name = "OT" + base.__name__
        namespace = {
            "__annotations__": {"reg": "torch.FloatTensor | None"},
            "reg": None,
            "__module__": __name__,
            "__qualname__": name,
            "__doc__": f"{base.__name__} plus `reg`, the kinetic (transport) cost of the depth trajectory.",
        }
        cls = dataclasses.dataclass(type(name, (base,), namespace))
        globals()[name] = cls  # importable by name, so outputs pickle
        _OUTPUT_CLASSES[base] = cls
    return _OUTPUT_CLASSES[base]


# --------------------------------------------------------------------------------------------------------- models


class OTModelMixin:
    """Turns a transformers model class into its OT variant: `class OTX(OTModelMixin, X)`.

    After the base __init__ builds the model, every stack of the family gets a DepthFlow. forward is the base forward
    plus: `reg` in the output, and `output_hidden_states` returning the depth trajectory (X(t_0), ..., X(t_M)) of each
    stack instead of per-block states.
    """

    ot_adapter: StackAdapter = StackAdapter()

    def __init__(self, config, *args, **kwargs):
        if not isinstance(config, OTConfigMixin):
            raise ValueError(
                f"{type(self).__name__} needs an OT config ({self.config_class.__name__}), got {type(config).__name__}."
                f" Build one with {self.config_class.__name__}.from_base_config(config, ot_num_steps=...)."
            )
        super().__init__(config, *args, **kwargs)
        flows = [
            attach_depth_flow(module, self.ot_adapter, config)
            for module in list(self.modules())
            if isinstance(module, self.ot_adapter.stack_classes)
        ]
        self._ot_flow_list = flows
        # Sub-models built from a copy of the config (T5's stacks) size their caches from it: keep it in sync.
        copies = {id(m.config): m.config for m in self.modules() if isinstance(getattr(m, "config", None), OTConfigMixin)}
        copies.pop(id(config), None)
        self._ot_config_copies = list(copies.values())

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        base_forward = next(k.__dict__["forward"] for k in cls.__mro__[1:] if "forward" in k.__dict__)
        if getattr(base_forward, "_ot_forward", False) or "forward" in cls.__dict__:
            return

        @functools.wraps(base_forward)  # keeps the base signature: Trainer, PEFT and generate inspect it
        def forward(self, *args, **kwargs):
            return self._ot_call(base_forward, args, kwargs)

        forward._ot_forward = True
        cls.forward = forward

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except RuntimeError as err:
            if "ignore_mismatched_sizes" not in str(err) or kwargs.get("ignore_mismatched_sizes"):
                raise
            # transformers logs the mismatch report and raises a generic error: name the offending weights instead.
            retry = {**kwargs, "ignore_mismatched_sizes": True, "output_loading_info": True}
            _, info = super().from_pretrained(pretrained_model_name_or_path, *args, **retry)
            details = "; ".join(
                f"{key}: checkpoint {tuple(found)} vs model {tuple(expected)}"
                for key, found, expected in sorted(info.get("mismatched_keys", []), key=lambda item: item[0])
            )
            raise ValueError(
                f"Weights of the wrong shape in {pretrained_model_name_or_path}: {details}. The config.json does not "
                "describe these weights (a different size or a corrupted file); fix or re-save the checkpoint."
            ) from err

    def ot_flows(self) -> list[DepthFlow]:
        return list(self._ot_flow_list)

    def _ot_call(self, base_forward, args, kwargs):
        flows = self._ot_flow_list
        for copied in self._ot_config_copies:  # OT settings may be changed on model.config between calls
            for name in OT_FIELDS:
                if getattr(copied, name) != getattr(self.config, name):
                    setattr(copied, name, getattr(self.config, name))
        record = kwargs.pop("output_hidden_states", None)
        if record is None:
            record = self.config.output_hidden_states
        for flow in flows:
            flow.start(record_trajectory=bool(record))
        out = base_forward(self, *args, output_hidden_states=False, **kwargs)
        regs = [flow.last_reg for flow in flows if flow.last_reg is not None]
        reg = torch.stack(regs).sum() if regs else None
        trajectories = {flow.role: flow.last_trajectory for flow in flows if flow.last_trajectory is not None}
        for flow in flows:
            flow.start()  # drop references to this call's tensors
        if isinstance(out, tuple):  # return_dict=False
            return out + (reg,)
        fields = dict(out)
        names = {f.name for f in dataclasses.fields(out)}
        for role, trajectory in trajectories.items():
            if "encoder_last_hidden_state" in names:
                fields[f"{role}_hidden_states"] = trajectory
            elif "hidden_states" in names:
                fields["hidden_states"] = trajectory
        return ot_output_class(type(out))(**fields, reg=reg)
