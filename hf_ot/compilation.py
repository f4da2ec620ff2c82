"""Regional compilation of OT models: each block is compiled once and that code serves every application of it.

An OT model applies its L blocks M x stages times per forward. Whole-model `torch.compile(model)` traces the solver
loop unrolled (M x stages x L block bodies in one graph, traced again whenever M or the solver changes).
`hf_ot.compile(model)` (this module) compiles the blocks themselves instead, as `block.compile()` does (PyTorch's
regional compilation): dynamo treats a module's parameters as graph inputs, so the blocks of one class share one
compiled graph, and the solver loop around them stays Python, so changing `config.ot_num_steps` or
`config.ot_solver` between calls does not recompile. Embeddings, head and loss stay eager.

Block calls that carry a KV cache (generation) run eager: each block application writes its own cache slot
(`layer_idx` changes per application), which compiled code would be specialised, and recompiled, for.

Not saved with the model: call it again after loading. Whole-model `torch.compile(model)` works too and traces the
whole forward as one graph (fullgraph=True holds), as does transformers' compiled static-cache decoding
(`generate(..., cache_implementation="static")`), which needs one graph for CUDA graphs.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.cache_utils import Cache


def compile(model: nn.Module, **compile_kwargs) -> nn.Module:  # noqa: A001 (named after torch.compile)
    """Compile every block of every OT flow of `model` in place (regional compilation) and return `model`.

    compile_kwargs go to `torch.compile` (backend, mode, dynamic, fullgraph, options). Works on OT models and on
    wrappers that expose `ot_flows()` (a PEFT model passes the attribute through to the OT model it wraps).
    """
    flows_of = getattr(model, "ot_flows", None)
    if flows_of is None:
        raise ValueError(
            f"hf_ot.compile needs an OT model (one with ot_flows()), got {type(model).__name__}. Convert it first "
            "(hf_ot.convert), or use torch.compile(model) for other models."
        )
    for flow in flows_of():
        for block in flow:  # outside a forward, a flow yields its real blocks
            eager = block._call_impl
            compiled = torch.compile(eager, **compile_kwargs)
            # What nn.Module.compile() sets, with cached calls routed to the eager path (see the module doc).
            block._compiled_call_impl = _CompiledUnlessCached(compiled, eager)
    return model


class _CompiledUnlessCached:
    def __init__(self, compiled, eager):
        self.compiled = compiled
        self.eager = eager

    def __call__(self, *args, **kwargs):
        if any(isinstance(value, Cache) for value in (*args, *kwargs.values())):
            return self.eager(*args, **kwargs)
        return self.compiled(*args, **kwargs)
