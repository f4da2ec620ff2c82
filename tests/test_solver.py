"""The integrator on ODEs with known solutions, without transformers: orders of accuracy and the integrated cost."""

import math

import pytest
import torch

from hf_ot.models.ot_config import check_ot_settings
from hf_ot.models.ot_solver import SOLVERS, integrate, num_stages

pytestmark = pytest.mark.core  # the model, cache and generation tests: CI runs them on the oldest transformers too

ORDERS = {"euler": 1, "heun": 2, "rk4": 4}


def decay_error(solver, steps, time=1.0):
    """|x(T) - e^{-T}| for dx/dt = -x, x(0) = 1 (float64)."""
    x, _, _ = integrate(lambda x, e: -x, torch.ones((), dtype=torch.float64), steps=steps, time=time, solver=solver)
    return abs(x.item() - math.exp(-time))


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_order_of_accuracy_on_exponential_decay(solver):
    # halving dt divides the global error by 2^order
    ratio = decay_error(solver, 16) / decay_error(solver, 32)
    assert ratio == pytest.approx(2 ** ORDERS[solver], rel=0.1)


def test_one_euler_step_is_one_residual_update():
    x0 = torch.tensor([1.0, -2.0])
    x, reg, _ = integrate(lambda x, e: 3 * x, x0, steps=1, time=1.0, cost=lambda v: v.pow(2).mean())
    assert torch.equal(x, x0 + 3 * x0)
    assert reg.item() == pytest.approx((9 * (1 + 4)) / 2)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_cost_of_a_constant_field_is_time_times_its_mean_square(solver):
    c = torch.tensor([1.0, 2.0, -2.0])
    _, reg, _ = integrate(
        lambda x, e: c, torch.zeros(3), steps=3, time=2.5, solver=solver, cost=lambda v: v.pow(2).mean()
    )
    assert reg.item() == pytest.approx(2.5 * 3.0, rel=1e-6)  # T * mean(c^2) = 2.5 * (1 + 4 + 4) / 3


def test_cost_integral_on_exponential_decay():
    # r(T) = int_0^T x(t)^2 dt = (1 - e^{-2T}) / 2 for dx/dt = -x, x(0) = 1 (RK4 accuracy with exact stages)
    time = 1.5
    _, reg, _ = integrate(
        lambda x, e: -x, torch.ones((), dtype=torch.float64), steps=40, time=time, solver="rk4", cost=lambda v: v.pow(2)
    )
    assert reg.item() == pytest.approx((1 - math.exp(-2 * time)) / 2, rel=1e-6)


def test_evaluations_are_numbered_step_times_stages_plus_stage_and_trajectory_is_recorded():
    seen = []

    def field(x, evaluation):
        seen.append(evaluation)
        return torch.zeros_like(x)

    _, reg, trajectory = integrate(field, torch.ones(2), steps=3, time=1.0, solver="rk4", record_trajectory=True)
    assert seen == list(range(3 * num_stages("rk4")))
    assert reg is None and len(trajectory) == 4


@pytest.mark.parametrize(
    "steps,time,solver,message",
    [
        (0, 1.0, "euler", "ot_num_steps must be an integer from 1 to"),
        (2.0, 1.0, "euler", "ot_num_steps must be an integer from 1 to"),
        (1, -1.0, "euler", "ot_terminal_time must be a finite number > 0"),
        (1, float("inf"), "euler", "ot_terminal_time must be a finite number > 0"),
        (1, float("nan"), "euler", "ot_terminal_time must be a finite number > 0"),
        (1, 1.0, "RK4", "ot_solver must be one of"),
    ],
)
def test_bad_settings_name_the_field(steps, time, solver, message):
    with pytest.raises(ValueError, match=message):
        check_ot_settings({"ot_num_steps": steps, "ot_terminal_time": time, "ot_solver": solver})


TOO_SMALL = [("ot_rtol", 1e-300), ("ot_rtol", 1e-8), ("ot_atol", 1e-300), ("ot_atol", 1e-10)]


@pytest.mark.parametrize("field,value", TOO_SMALL)
def test_tolerances_below_what_float32_resolves_are_refused(field, value):
    """ot_rtol >= 1e-7, ot_atol >= 1e-9: smaller ones underflow in the solver's error scale (1e-300 is 0 in float32,
    and the error ratio nan would blame the field)."""
    low = {"ot_rtol": "1e-07", "ot_atol": "1e-09"}[field]
    with pytest.raises(ValueError, match=f"{field} must be a finite number from {low} to"):
        check_ot_settings({field: value})
    check_ot_settings({field: float(low)})  # the bound itself is allowed


def test_adaptive_error_scale_is_float32_for_a_half_precision_state():
    """A zero field on a zero fp16 state: the error is 0 and its scale atol = 1e-9 (0 in fp16); the step is accepted
    (a scale computed in fp16 gives 0 / 0 = nan: 'the field diverges')."""
    x = torch.zeros(2, 3, dtype=torch.float16)
    out, _, _ = integrate(lambda y, e: y * 0, x, steps=1, time=1.0, solver="bosh3", rtol=1e-7, atol=1e-9)
    assert out.dtype == torch.float16 and torch.equal(out, x)
