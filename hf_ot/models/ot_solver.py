"""Explicit Runge-Kutta integration of dX/dt = f(X) over depth, with the transport cost as an extra state.

Pure: knows nothing of transformers. A field is any callable `field(x, evaluation) -> dx/dt`, where `evaluation`
counts field evaluations (step * stages + stage): the flow uses it to give every evaluation its own KV-cache slots.

The cost r' = cost(f(X)) does not depend on r, so integrating it with the same tableau gives
    r_{k+1} = r_k + dt * sum_s b_s * cost(k_s)
which for Euler is the official code's reg = sum_k dt * mean(f(X_k)^2).

This file travels with checkpoints (trust_remote_code): it imports only torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.utils.checkpoint

# Butcher tableaux (a, b): row s of `a` (s >= 1) weighs stages 0..s-1 for stage s; b weighs the stages in the update.
SOLVERS: dict[str, tuple[tuple[tuple[float, ...], ...], tuple[float, ...]]] = {
    "euler": ((), (1.0,)),
    "heun": (((1.0,),), (0.5, 0.5)),
    "rk4": (((0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)), (1 / 6, 1 / 3, 1 / 3, 1 / 6)),
}


def num_stages(solver: str) -> int:
    """Field evaluations per step."""
    return len(SOLVERS[solver][1])


def check_solver_settings(steps, time, solver) -> None:
    """The integration settings, with messages naming the config field (shared by the config's validation)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"ot_num_steps must be an integer from 1 to (the number of solver steps M), got {steps!r}.")
    if isinstance(time, bool) or not isinstance(time, (int, float)) or not math.isfinite(time) or not time > 0:
        raise ValueError(f"ot_terminal_time must be a finite number > 0 (the terminal time T), got {time!r}.")
    if solver not in SOLVERS:
        raise ValueError(f"ot_solver must be one of {sorted(SOLVERS)}, got {solver!r}.")


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
):
    """Integrate dx/dt = field(x) over [0, time] in `steps` steps.

    Returns (x(time), r(time), trajectory): r is the integral of cost(field(x)) (None without `cost`), trajectory the
    states (x(t_0), ..., x(t_steps)) when recorded, else None.
    checkpoint_steps: recompute each whole step in backward (torch.utils.checkpoint), so autograd keeps one state per
    step instead of every activation of its field evaluations; costs one more forward of each step.
    """
    a, b = SOLVERS[solver]
    dt = time / steps

    def one_step(x, step):
        stages = []
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
    return x, reg, (tuple(trajectory) if trajectory is not None else None)
