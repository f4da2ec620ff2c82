"""Embedded Runge-Kutta pairs with error control: ODEs with known solutions, and OT models choosing their own grid."""

import math

import pytest
import torch

import hf_ot
from hf_ot.models.ot_solver import ADAPTIVE_SOLVERS, integrate

PAIRS = sorted(ADAPTIVE_SOLVERS)


def solve(field, x0, solver, time=1.0, rtol=1e-6, atol=1e-9, steps=1, cost=None):
    stats = {}
    x, reg, _ = integrate(
        field, x0, steps=steps, time=time, solver=solver, rtol=rtol, atol=atol, cost=cost, stats=stats
    )
    return x, reg, stats


@pytest.mark.parametrize("solver", PAIRS)
def test_error_on_exponential_decay_stays_within_tolerance(solver):
    x0 = torch.tensor([1.0, 2.0, -0.5], dtype=torch.float64)
    for rtol in (1e-3, 1e-5):
        x, _, stats = solve(lambda x, e: -x, x0, solver, time=2.0, rtol=rtol, atol=rtol * 1e-2)
        error = (x - x0 * math.exp(-2.0)).abs().max().item()
        # global error of a controlled local error: a small multiple of the tolerance times |x|
        assert error <= 10 * rtol * x0.abs().max().item(), (rtol, error)
        assert stats["evaluations"] > 0 and stats["accepted"] >= 1


@pytest.mark.parametrize("solver", PAIRS)
def test_tighter_tolerance_costs_more_evaluations_and_is_more_accurate(solver):
    x0 = torch.ones((), dtype=torch.float64)
    field = lambda x, e: torch.cos(x) * 2.0  # noqa: E731  (a nonlinear field; the exact solution below)
    errors, costs = [], []
    for rtol in (1e-2, 1e-6):
        x, _, stats = solve(field, x0, solver, time=1.5, rtol=rtol, atol=rtol)
        exact = 2 * math.atan(math.tanh(1.5 + math.atanh(math.tan(0.5))))  # x' = 2 cos x, x(0) = 1
        errors.append(abs(x.item() - exact))
        costs.append(stats["evaluations"])
    assert costs[1] > costs[0] and errors[1] < errors[0]
    assert errors[1] < 1e-4


@pytest.mark.parametrize("solver", PAIRS)
def test_straighter_field_needs_fewer_evaluations(solver):
    # a constant field is exact in one step; a rotation (curved trajectory) needs many
    x0 = torch.tensor([1.0, 0.0], dtype=torch.float64)
    rotation = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64) * 6.0
    _, _, straight = solve(lambda x, e: torch.tensor([1.0, 2.0], dtype=torch.float64), x0, solver, rtol=1e-4, atol=1e-6)
    x, _, curved = solve(lambda x, e: rotation @ x, x0, solver, rtol=1e-4, atol=1e-6)
    assert straight["accepted"] == 1 and straight["rejected"] == 0
    assert curved["evaluations"] > 3 * straight["evaluations"]
    assert x.tolist() == pytest.approx([math.cos(6.0), math.sin(6.0)], abs=1e-2)


@pytest.mark.parametrize("solver", PAIRS)
def test_cost_is_integrated_along_accepted_steps(solver):
    # r(T) = int_0^T x(t)^2 dt = (1 - e^{-2T}) / 2 for dx/dt = -x, x(0) = 1
    time = 1.5
    _, reg, stats = solve(
        lambda x, e: -x,
        torch.ones((), dtype=torch.float64),
        solver,
        time=time,
        rtol=1e-5,
        atol=1e-7,
        cost=lambda v: v.pow(2),
    )
    assert stats["rejected"] >= 0
    assert reg.item() == pytest.approx((1 - math.exp(-2 * time)) / 2, rel=1e-3)


def test_fsal_pairs_reuse_the_last_stage():
    x0 = torch.tensor([1.0, 2.0], dtype=torch.float64)
    seen = []

    def field(x, e):
        seen.append(e)
        return -x

    _, _, stats = solve(field, x0, "dopri5", time=3.0, rtol=1e-8, atol=1e-10)
    accepted, rejected = stats["accepted"], stats["rejected"]
    # 7 stages per trial step, the first shared with the previous step's last
    assert stats["evaluations"] == len(seen) == 1 + 6 * (accepted + rejected)
    assert seen == list(range(len(seen)))


def test_unmeetable_tolerance_raises_naming_the_settings():
    with pytest.raises(RuntimeError, match="ot_rtol.*fixed-grid solver"):
        solve(lambda x, e: x.pow(2) * 50, torch.ones(()), "heun_euler", time=1.0, rtol=1e-9, atol=1e-12)


def test_gradients_flow_through_accepted_steps():
    w = torch.tensor(-0.7, dtype=torch.float64, requires_grad=True)
    x, reg, _ = solve(
        lambda x, e: w * x, torch.ones((), dtype=torch.float64), "bosh3", rtol=1e-8, atol=1e-10, cost=lambda v: v.pow(2)
    )
    x.backward()
    assert w.grad.item() == pytest.approx(math.exp(-0.7), rel=1e-5)  # d/dw e^{w}


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("ot_rtol", 0.0, "ot_rtol must be a finite number from 1e-07 to 1 "),
        ("ot_rtol", 2.0, "ot_rtol must be a finite number from 1e-07 to 1 "),
        ("ot_atol", float("nan"), "ot_atol must be a finite number from 1e-09 to 1000 "),
        ("ot_atol", -1.0, "ot_atol must be a finite number from 1e-09 to 1000 "),
        ("ot_solver", "rk45", "ot_solver must be one of"),
    ],
)
def test_bad_tolerances_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        hf_ot.models.ot_config.check_ot_value(field, value)


def _tiny_gpt2(**ot):
    from transformers import GPT2Config

    base = GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=2, n_head=2)
    torch.manual_seed(0)
    return hf_ot.OTGPT2LMHeadModel(hf_ot.OTGPT2Config.from_base_config(base, **ot)).eval()


def test_model_reports_field_evaluations_and_matches_a_fine_fixed_grid():
    model = _tiny_gpt2(ot_num_steps=1, ot_solver="dopri5", ot_rtol=1e-6, ot_atol=1e-6)
    ids = torch.randint(0, 50, (2, 10))
    with torch.no_grad():
        out = model(ids, labels=ids)
        assert out.num_field_evaluations.min() >= 6 and out.reg is not None
        model.config.ot_solver, model.config.ot_num_steps = "rk4", 64
        fine = model(ids, labels=ids)
        assert fine.num_field_evaluations is None  # fixed grid: M x stages
    torch.testing.assert_close(out.logits, fine.logits, atol=1e-4, rtol=1e-4)
    assert out.reg.item() == pytest.approx(fine.reg.item(), rel=1e-3)


def test_model_forward_without_cache_by_default_and_cached_decoding_refused():
    model = _tiny_gpt2(ot_solver="bosh3")
    ids = torch.randint(0, 50, (1, 6))
    with torch.no_grad():
        out = model(ids)  # scoring: no cache is built
        assert out.past_key_values is None and out.num_field_evaluations >= 3
        with pytest.raises(ValueError, match="fixed-grid solver.*use_cache=False"):
            model(ids, use_cache=True)
        with pytest.raises(ValueError, match="fixed-grid solver"):
            model.generate(ids, max_new_tokens=3, do_sample=False)
        full = model.generate(ids, max_new_tokens=3, do_sample=False, use_cache=False)
    assert full.shape == (1, 9)


def test_padding_does_not_change_the_adaptive_grid_of_a_sequence():
    model = _tiny_gpt2(ot_solver="bosh3", ot_rtol=1e-3, ot_atol=1e-3)
    ids = torch.randint(0, 50, (1, 6))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], 1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 6, dtype=torch.long)], 1)
    with torch.no_grad():
        alone = model(ids)
        left = model(padded, attention_mask=mask)
    assert alone.num_field_evaluations == left.num_field_evaluations


@pytest.mark.parametrize(
    "family, class_name", [("bert", "BertForMaskedLM"), ("gpt2", "GPT2LMHeadModel"), ("bart", "BartModel")]
)
def test_field_evaluations_are_the_block_calls_of_the_forward_one_per_row(family, class_name):
    from conftest import inputs_for, make_base

    from hf_ot.models.ot_flow import DepthFlow

    model = hf_ot.convert(make_base(family, class_name), ot_num_steps=2, ot_solver="bosh3").eval()
    calls = []  # every field evaluation applies each stack's first block once (the encoder's and the decoder's)
    for flow in (m for m in model.modules() if isinstance(m, DepthFlow)):
        flow[0].register_forward_hook(lambda *_: calls.append(1))
    inputs = inputs_for(family, class_name, batch=3)
    with torch.no_grad():
        out = model(**inputs)
    assert len(calls) >= 3 and out.num_field_evaluations.dtype == torch.long
    assert out.num_field_evaluations.tolist() == [len(calls)] * 3
