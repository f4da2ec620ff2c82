"""Explicit Runge-Kutta integration of dX/dt = f(X) over depth, with the transport cost as an extra state.

Pure: knows nothing of transformers. A field is any callable `field(x, evaluation) -> dx/dt`, where `evaluation`
counts field evaluations (step * stages + stage): the flow uses it to give every evaluation its own KV-cache slots.

The cost r' = cost(f(X)) does not depend on r, so integrating it with the same tableau gives
    r_{k+1} = r_k + dt * sum_s b_s * cost(k_s)
which for Euler is the official code's reg = sum_k dt * mean(f(X_k)^2).

Embedded pairs (ADAPTIVE_SOLVERS: Heun-Euler 2(1), Bogacki-Shampine 3(2), Dormand-Prince 5(4)) choose the grid
themselves: each trial step also gives a lower-order estimate, the difference is the local error, and the step is
accepted when its error norm (tolerance atol + rtol * |x|) is <= 1; the next dt follows the standard controller
(torchdiffeq's: safety 0.9, factor in [0.2, 10], exponent 1 / order). The first trial step is time / steps.

Settings are not checked here: ot_config.check_ot_value checks M, T and the solver against the bounds of OT_SETTINGS.

This file travels with checkpoints (trust_remote_code): it imports only torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.utils.checkpoint

# Butcher tableaux (a, b): row s of `a` (s >= 1) weighs stages 0..s-1 for stage s; b weighs the stages in the update.
SOLVERS: dict[str, tuple[tuple[tuple[float, ...], ...], tuple[float, ...]]] = {
    "euler": ((), (1.0,)),
    "heun": (((1.0,),), (0.5, 0.5)),
    "rk4": (((0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)), (1 / 6, 1 / 3, 1 / 3, 1 / 6)),
}


@dataclasses.dataclass(frozen=True)
class EmbeddedPair:
    """An embedded Runge-Kutta pair: tableau `a`, weights `b` of the propagated solution (order `order`), weights
    `b_low` of the embedded one (order - 1). `fsal`: the last stage is f(x_next) (first same as last), so an accepted
    step hands it to the next one and a step costs one evaluation less."""

    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    b_low: tuple[float, ...]
    order: int
    fsal: bool = False


ADAPTIVE_SOLVERS: dict[str, EmbeddedPair] = {
    "heun_euler": EmbeddedPair(((1.0,),), (0.5, 0.5), (1.0, 0.0), order=2),
    "bosh3": EmbeddedPair(
        ((1 / 2,), (0.0, 3 / 4), (2 / 9, 1 / 3, 4 / 9)),
        (2 / 9, 1 / 3, 4 / 9, 0.0),
        (7 / 24, 1 / 4, 1 / 3, 1 / 8),
        order=3,
        fsal=True,
    ),
    "dopri5": EmbeddedPair(
        (
            (1 / 5,),
            (3 / 40, 9 / 40),
            (44 / 45, -56 / 15, 32 / 9),
            (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
            (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
            (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
        ),
        (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0),
        (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40),
        order=5,
        fsal=True,
    ),
}

# Step-size controller (torchdiffeq's defaults) and the bound on trial steps of one integration: a tolerance a field
# cannot meet raises instead of running for hours.
SAFETY, MIN_FACTOR, MAX_FACTOR = 0.9, 0.2, 10.0
MAX_ADAPTIVE_STEPS = 1024


def is_adaptive(solver: str) -> bool:
    return solver in ADAPTIVE_SOLVERS


def num_stages(solver: str) -> int:
    """Field evaluations per step (an embedded pair: per trial step, counting the FSAL stage)."""
    if solver in ADAPTIVE_SOLVERS:
        return len(ADAPTIVE_SOLVERS[solver].b)
    return len(SOLVERS[solver][1])


def integrate(
    field: Callable[[torch.Tensor, int], torch.Tensor],
    x: torch.Tensor,
    *,
    steps: int,
    time: float,
    solver: str = "euler",
    cost: Callable[[torch.Tensor], torch.Tensor] | None = None,
    record_trajectory: bool = False,
    checkpoint_steps: bool = False,
    rtol: float = 1e-2,
    atol: float = 1e-2,
    error_norm: Callable[[torch.Tensor], torch.Tensor] | None = None,
    stats: dict[str, Any] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor, ...] | None]:
    """Integrate dx/dt = field(x) over [0, time] in `steps` steps.

    Returns (x(time), r(time), trajectory): r is the integral of cost(field(x)) (None without `cost`), trajectory the
    states (x(t_0), ..., x(t_steps)) when recorded, else None.
    checkpoint_steps: recompute each whole step in backward (torch.utils.checkpoint), so autograd keeps one state per
    step instead of every activation of its field evaluations; costs one more forward of each step.
    An adaptive solver (ADAPTIVE_SOLVERS) starts with dt = time / steps and controls the step by rtol / atol;
    error_norm(scaled error) -> scalar is the norm of the error divided by its tolerance (default: root mean square),
    and reg sums over accepted steps only. `stats`, when given, receives evaluations, accepted and rejected steps.
    """
    if solver in ADAPTIVE_SOLVERS:
        return _integrate_adaptive(
            field,
            x,
            pair=ADAPTIVE_SOLVERS[solver],
            dt=time / steps,
            time=time,
            cost=cost,
            record_trajectory=record_trajectory,
            checkpoint_steps=checkpoint_steps,
            rtol=rtol,
            atol=atol,
            error_norm=error_norm or _rms,
            stats=stats,
        )
    a, b = SOLVERS[solver]
    dt = time / steps

    def one_step(x: torch.Tensor, step: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        stages: list[torch.Tensor] = []
        for s in range(len(b)):
            x_s = x
            for coeff, k in zip(a[s - 1] if s else (), stages):
                if coeff:
                    x_s = torch.add(x_s, k, alpha=dt * coeff)
            stages.append(field(x_s, step * len(b) + s))
        terms = []
        for coeff, k in zip(b, stages):
            x = torch.add(x, k, alpha=dt * coeff)
            if cost is not None:
                terms.append((dt * coeff) * cost(k))
        return x, terms

    reg = None
    trajectory = [x] if record_trajectory else None
    for step in range(steps):
        if checkpoint_steps:
            x, terms = torch.utils.checkpoint.checkpoint(one_step, x, step, use_reentrant=False)
        else:
            x, terms = one_step(x, step)
        for term in terms:
            reg = term if reg is None else reg + term
        if trajectory is not None:
            trajectory.append(x)
    if stats is not None:
        stats.update(evaluations=steps * len(b), accepted=steps, rejected=0)
    return x, reg, (tuple(trajectory) if trajectory is not None else None)


def _rms(v: torch.Tensor) -> torch.Tensor:
    rms: torch.Tensor = torch.linalg.vector_norm(v.float()) / math.sqrt(max(v.numel(), 1))
    return rms


def _trial_step(
    field: Callable[[torch.Tensor, int], torch.Tensor],
    pair: EmbeddedPair,
    x: torch.Tensor,
    dt: float,
    first: torch.Tensor | None,
    evaluation: int,
) -> tuple[torch.Tensor, Any, list[torch.Tensor]]:
    """One trial step of an embedded pair from x: (x_next, local error estimate, stages). `first`: f(x) when known
    (FSAL), else evaluated here as evaluation number `evaluation`."""
    stages = [first if first is not None else field(x, evaluation)]
    evaluation += first is None
    for row in pair.a:
        x_s = x
        for coeff, k in zip(row, stages):
            if coeff:
                x_s = torch.add(x_s, k, alpha=dt * coeff)
        stages.append(field(x_s, evaluation))
        evaluation += 1
    x_next, error = x, None
    for coeff, coeff_low, k in zip(pair.b, pair.b_low, stages):
        if coeff:
            x_next = torch.add(x_next, k, alpha=dt * coeff)
        if coeff != coeff_low:
            term = k * (dt * (coeff - coeff_low))
            error = term if error is None else error + term
    return x_next, error, stages


def _integrate_adaptive(
    field: Callable[[torch.Tensor, int], torch.Tensor],
    x: torch.Tensor,
    *,
    pair: EmbeddedPair,
    dt: float,
    time: float,
    cost: Callable[[torch.Tensor], torch.Tensor] | None,
    record_trajectory: bool,
    checkpoint_steps: bool,
    rtol: float,
    atol: float,
    error_norm: Callable[[torch.Tensor], torch.Tensor],
    stats: dict[str, Any] | None,
) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor, ...] | None]:
    t = 0.0
    reg = None
    trajectory = [x] if record_trajectory else None
    first = None  # f(x) at the current state, from the last accepted step's FSAL stage
    evaluations = accepted = rejected = 0
    while time - t > 1e-9 * time:
        if accepted + rejected >= MAX_ADAPTIVE_STEPS:
            raise RuntimeError(
                f"The adaptive solver took {MAX_ADAPTIVE_STEPS} trial steps and reached depth time {t:.4g} of {time:g}:"
                f" the field cannot meet ot_rtol={rtol:g} / ot_atol={atol:g}. Loosen them, or use a fixed-grid "
                "solver (ot_solver='euler', 'heun' or 'rk4' with ot_num_steps)."
            )
        dt = min(dt, time - t)
        if checkpoint_steps:
            x_next, error, stages = torch.utils.checkpoint.checkpoint(
                _trial_step, field, pair, x, dt, first, evaluations, use_reentrant=False
            )
        else:
            x_next, error, stages = _trial_step(field, pair, x, dt, first, evaluations)
        evaluations += len(stages) - (first is not None)
        with torch.no_grad():
            # in float32 (an fp16 state would round atol to 0); ot_config bounds rtol, atol so it cannot underflow
            scale = atol + rtol * torch.maximum(x.detach().abs(), x_next.detach().abs()).float()
            ratio = float(error_norm(error.detach().float() / scale))
        if not math.isfinite(ratio):
            raise RuntimeError(
                f"The adaptive solver's error estimate is {ratio} at depth time {t:.4g}: the field diverges. Use a "
                "fixed-grid solver (ot_solver='euler', 'heun' or 'rk4')."
            )
        if ratio <= 1.0:
            accepted += 1
            if cost is not None:
                for coeff, k in zip(pair.b, stages):
                    if coeff:
                        term = (dt * coeff) * cost(k)
                        reg = term if reg is None else reg + term
            t += dt
            x = x_next
            first = stages[-1] if pair.fsal else None
            if trajectory is not None:
                trajectory.append(x)
        else:
            rejected += 1
            first = stages[0]  # f(x) stays valid: the retry starts from the same state
        # torchdiffeq's _optimal_step_size: never shrink after an accepted step
        if ratio == 0.0:
            factor = MAX_FACTOR
        else:
            factor = min(MAX_FACTOR, max(SAFETY / ratio ** (1.0 / pair.order), 1.0 if ratio < 1.0 else MIN_FACTOR))
        dt = dt * factor
    if stats is not None:
        stats.update(evaluations=evaluations, accepted=accepted, rejected=rejected)
    return x, reg, (tuple(trajectory) if trajectory is not None else None)
