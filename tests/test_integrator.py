"""The integrator against independent references: hand-written solvers over the base blocks, an unrolled plain
model, and reg recomputed from the returned trajectory."""

import dataclasses

import pytest
import torch
from conftest import PAD, make_base
from transformers import GPT2Config, GPT2LMHeadModel

import hf_ot

pytestmark = pytest.mark.core  # the model, cache and generation tests: CI runs them on the oldest transformers too


def gpt2_pair(steps, solver, mode="residual", time=1.0, **base_overrides):
    base = make_base("gpt2", "GPT2LMHeadModel", attn_implementation="eager", **base_overrides)
    model = hf_ot.convert(base, ot_num_steps=steps, ot_solver=solver, ot_mode=mode, ot_terminal_time=time).eval()
    return base, model


def stack_by_hand(base, x):
    """S(x): the base GPT-2 blocks in order, with a causal mask built here (eager attention)."""
    n = x.shape[1]
    mask = torch.full((n, n), torch.finfo(x.dtype).min).triu(1)[None, None]
    for block in base.transformer.h:
        x = block(x, None, mask)
    return x


# Butcher tableaux written out by hand (not imported from the package)
HAND = {
    "euler": ([], [1.0]),
    "heun": ([[1.0]], [0.5, 0.5]),
    "rk4": ([[0.5], [0.0, 0.5], [0.0, 0.0, 1.0]], [1 / 6, 2 / 6, 2 / 6, 1 / 6]),
}


@pytest.mark.parametrize("solver", ["euler", "heun", "rk4"])
@pytest.mark.parametrize("mode", ["residual", "paper"])
def test_matches_hand_written_solver(solver, mode):
    steps, time = 3, 1.5
    base, model = gpt2_pair(steps, solver, mode, time)
    ids = torch.randint(4, 99, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        x = base.transformer.wte(ids) + base.transformer.wpe(torch.arange(7))[None]
        if mode == "residual":
            field = lambda z: stack_by_hand(base, z) - z  # noqa: E731
        else:
            field = lambda z: base.transformer.ln_f(stack_by_hand(base, z))  # noqa: E731
        a, b = HAND[solver]
        dt, reg = time / steps, 0.0
        for _ in range(steps):
            ks = []
            for s in range(len(b)):
                xs = x + dt * sum(c * k for c, k in zip(a[s - 1], ks)) if s else x
                ks.append(field(xs))
            x = x + dt * sum(w * k for w, k in zip(b, ks))
            reg += dt * sum(w * k.pow(2).mean() for w, k in zip(b, ks))
        head_in = base.transformer.ln_f(x) if mode == "residual" else x
        expected = base.lm_head(head_in)
        out = model(ids, output_reg=True)
    assert (out.logits - expected).abs().max().item() <= 1e-4
    assert abs(out.reg.item() - float(reg)) <= 1e-5 * max(1.0, float(reg))


@pytest.mark.parametrize("steps", [1, 2, 4])
def test_residual_euler_with_unit_steps_is_the_unrolled_plain_model(steps):
    # dt = 1: X_{k+1} = X_k + (S(X_k) - X_k) = S(X_k), so M steps are the stack applied M times.
    base, model = gpt2_pair(steps, "euler", time=float(steps))
    cfg = GPT2Config(**{**base.config.to_dict(), "n_layer": steps * base.config.n_layer})
    unrolled = GPT2LMHeadModel(cfg).eval()
    state = {k: v for k, v in base.state_dict().items() if ".h." not in k}
    for k in range(steps):
        for i, block in enumerate(base.transformer.h):
            for name, value in block.state_dict().items():
                state[f"transformer.h.{k * base.config.n_layer + i}.{name}"] = value
    unrolled.load_state_dict(state)
    ids = torch.randint(4, 99, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (model(ids).logits - unrolled(ids).logits).abs().max().item() <= 1e-4


@pytest.mark.parametrize("family,class_name", [("gpt2", "GPT2LMHeadModel"), ("bert", "BertForMaskedLM")])
def test_reg_recomputed_from_trajectory_over_valid_positions(family, class_name):
    steps, time = 4, 2.0
    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=steps, ot_terminal_time=time).eval()
    ids = torch.randint(4, 99, (3, 8), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    mask[1, 7:] = 0
    ids[mask == 0] = PAD
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_hidden_states=True, output_reg=True)
    traj = out.hidden_states
    assert len(traj) == steps + 1
    dt = time / steps
    valid = mask.bool()
    expected = sum(dt * ((traj[k + 1] - traj[k]) / dt)[valid].pow(2).mean() for k in range(steps))
    assert abs(out.reg.item() - expected.item()) <= 1e-5 * expected.item()


def test_outputs_declare_reg_and_trajectory_starts_at_embeddings():
    base, model = gpt2_pair(3, "heun")
    ids = torch.randint(4, 99, (2, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(ids, output_hidden_states=True, output_attentions=True)
        ref = base(ids, output_hidden_states=True)
    assert "reg" in {f.name for f in dataclasses.fields(type(out))}
    assert len(out.hidden_states) == 4 and torch.equal(out.hidden_states[0], ref.hidden_states[0])
    assert len(out.attentions) == 3 * 2 * base.config.n_layer  # steps x stages x layers
    as_dict = model(ids, output_hidden_states=True, output_reg=True)
    tuple_out = model(ids, output_hidden_states=True, output_reg=True, return_dict=False)
    assert torch.equal(tuple_out[-1], as_dict.reg)
    assert len(tuple_out) == len(as_dict.to_tuple())
    assert all(
        torch.equal(a, b) if torch.is_tensor(a) else len(a) == len(b) for a, b in zip(tuple_out, as_dict.to_tuple())
    )


def test_paper_mode_without_layer_norms():
    base = make_base("gpt2", "GPT2LMHeadModel")
    model = hf_ot.convert(base, ot_mode="paper", ot_block_layer_norms=False, ot_num_steps=5)
    names = set(model.state_dict())
    assert not any(".ln_" in n or "ln_f" in n for n in names)
    assert {n for n in base.state_dict() if "ln_" not in n} == names
    out = model(torch.randint(4, 99, (2, 6)), labels=torch.randint(4, 99, (2, 6)))
    out.loss.backward()
    assert torch.isfinite(out.reg)


@pytest.mark.parametrize(
    "family,class_name",
    [
        ("gpt2", "GPT2LMHeadModel"),
        ("t5", "T5ForConditionalGeneration"),
        ("bart", "BartForConditionalGeneration"),
        ("bert", "BertForMaskedLM"),
    ],
)
def test_gradient_checkpointing_gives_the_same_gradients(family, class_name):
    grads, block_calls = [], []
    for checkpointing in (False, True):
        model = hf_ot.convert(make_base(family, class_name), ot_num_steps=3, ot_solver="heun")
        model.train()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        calls = []
        for flow in model.ot_flows():  # a leaf of block 0: checkpointing re-runs block forwards, not their hooks
            leaf = next(m for m in flow[0].modules() if not list(m.children()) and list(m.parameters()))
            leaf.register_forward_hook(lambda *a, calls=calls: calls.append(1))
        ids = torch.randint(4, 99, (2, 6), generator=torch.Generator().manual_seed(0))
        kwargs = {"labels": ids}
        if model.config.is_encoder_decoder:
            kwargs["decoder_input_ids"] = ids
        out = model(ids, **kwargs)
        (out.loss + 0.1 * out.reg).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        block_calls.append(len(calls))
    assert block_calls[1] == 2 * block_calls[0]  # checkpointed blocks ran again in backward
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 0
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6), name
