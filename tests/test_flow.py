"""The flow mechanism on a toy stack (no transformers model): whatever the loop does, every block gets its own
recorded call, the result is the hand-integrated ODE, and a forward that does not integrate raises."""

import pytest
import torch
from torch import nn

import hf_ot
from hf_ot.models.ot_flow import DepthFlow, StackAdapter, attach_depth_flow

pytestmark = pytest.mark.core  # the model, cache and generation tests: CI runs them on the oldest transformers too


class Block(nn.Module):
    def __init__(self, scale, kind):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.scale = scale
        self.kind = kind  # a layer attribute the loop reads (as ModernBERT's attention_type)

    def forward(self, x, bias, *, gain):
        return x + torch.tanh(self.linear(x)) * gain + bias


class ToyStack(nn.Module):
    """A loop with what modern transformers loops do: a slice, an index, per-layer arguments chosen by an attribute."""

    def __init__(self, config, mode="slice"):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList([Block(i + 1, "a" if i % 2 else "b") for i in range(3)])
        self.mode = mode

    def forward(self, x, attention_mask=None):
        biases = {"a": 0.1, "b": -0.2}
        if self.mode == "slice":
            for i, layer in enumerate(self.layers[: self.config.num_hidden_layers]):
                x = layer(x, biases[layer.kind], gain=float(i + 1))
        elif self.mode == "index":
            for i in range(len(self.layers)):
                x = self.layers[i](x, biases[self.layers[i].kind], gain=float(i + 1))
        elif self.mode == "skip":  # a loop that stops early
            for i, layer in enumerate(self.layers[:2]):
                x = layer(x, biases[layer.kind], gain=float(i + 1))
        elif self.mode == "between":  # work between layers
            for i, layer in enumerate(self.layers):
                x = layer(x, biases[layer.kind], gain=float(i + 1)) * 1.0
        return x


class ToyAdapter(StackAdapter):
    stack_classes = (ToyStack,)
    layers = "layers"


def toy(mode="slice", steps=3, solver="rk4"):
    config = hf_ot.OTGPT2Config(n_layer=3, ot_num_steps=steps, ot_solver=solver)
    config.num_hidden_layers = 3
    stack = ToyStack(config, mode)
    blocks = [stack.layers[i] for i in range(3)]
    attach_depth_flow(stack, ToyAdapter(), config, "toy")
    return stack, blocks


def by_hand(blocks, x, steps, solver):
    biases = {"a": 0.1, "b": -0.2}

    def field(z):
        y = z
        for i, b in enumerate(blocks):
            y = b(y, biases[b.kind], gain=float(i + 1))
        return y - z

    a, w = {"euler": ([], [1.0]), "rk4": ([[0.5], [0, 0.5], [0, 0, 1.0]], [1 / 6, 1 / 3, 1 / 3, 1 / 6])}[solver]
    dt = 1.0 / steps
    for _ in range(steps):
        ks = []
        for s in range(len(w)):
            ks.append(field(x + dt * sum(c * k for c, k in zip(a[s - 1], ks)) if s else x))
        x = x + dt * sum(c * k for c, k in zip(w, ks))
    return x


@pytest.mark.parametrize("mode", ["slice", "index"])
@pytest.mark.parametrize("steps,solver", [(1, "euler"), (3, "rk4")])
def test_every_block_gets_its_own_call_and_the_ode_is_integrated(mode, steps, solver):
    stack, blocks = toy(mode, steps, solver)
    x = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(stack(x), by_hand(blocks, x, steps, solver), atol=1e-6)


def test_outside_a_forward_the_list_is_the_real_blocks():
    stack, blocks = toy()
    flow = stack.layers
    assert isinstance(flow, DepthFlow)
    assert list(flow) == blocks and flow[1] is blocks[1] and list(flow[:2]) == blocks[:2]
    names = {f"layers.{i}.linear.{p}" for i in range(3) for p in ("weight", "bias")}
    assert set(dict(stack.named_parameters())) == names


@pytest.mark.parametrize("mode,message", [("skip", "without integrating"), ("between", "changed the hidden state")])
def test_a_loop_that_does_not_let_the_flow_run_raises(mode, message):
    stack, _ = toy(mode)
    with pytest.raises(RuntimeError, match=message):
        stack(torch.randn(1, 3, 4))
    # the per-call state was torn down: the next good call works
    stack.mode = "slice"
    stack(torch.randn(1, 3, 4))
