"""A pipeline plan whose largest stage holds the least memory: the solver under a shrinking cap.

A throughput solver balances time; where memory binds it returns the fastest plan whose stages
fit.  :func:`least_memory_plan` makes memory bind on purpose: one cap on every stage's bytes
(``settings.stage_memory_caps_bytes``, on top of each device's usable memory, docs/cost-model.md)
bisected down to the smallest with which the solver still finds a plan.  Every solver checks its
stages with the one memory model (:mod:`solvers.cost.memory`), so the plan it returns there spreads
memory as evenly as the op granularity allows, and is the fastest such spread it finds.
"""

from __future__ import annotations

from solvers.cost.memory import plan_memory_bytes
from solvers.model.errors import InvalidProblem
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.solving import solve
from solvers.validity import resolve_plan


def largest_stage_bytes(problem: Problem, plan: Plan) -> float:
    """The memory model's largest per-device bytes over a plan's stages (the process's base left out)."""
    return max(plan_memory_bytes(problem, resolve_plan(problem, plan)))


def least_memory_plan(problem: Problem, solver: str = "exact", *, tolerance_bytes: float = 2.0**20,
                      time_limit_s: float | None = None) -> Plan:
    """The plan of ``solver`` under the smallest per-stage cap with which it finds one (module doc).

    ``problem.settings.stages`` must be set (the caps are per stage index).  Bisection between 0 and
    the largest stage of the uncapped plan, to ``tolerance_bytes``; each solve has ``time_limit_s``.
    Returns the uncapped answer as it is when that has no plan (infeasible).
    """
    n_stages = problem.settings.stages
    if n_stages is None:
        raise InvalidProblem("least_memory_plan needs settings.stages (the caps are per stage)", field="stages")
    if tolerance_bytes <= 0:
        raise InvalidProblem(f"tolerance_bytes must be positive, got {tolerance_bytes}", field="tolerance_bytes")
    best = solve(problem, solver, time_limit_s=time_limit_s)
    if not best.stages:
        return best
    low, high = 0.0, largest_stage_bytes(problem, best)
    while high - low > tolerance_bytes:
        cap = (low + high) / 2
        capped = problem.with_settings(stage_memory_caps_bytes=dict.fromkeys(range(n_stages), cap))
        plan = solve(capped, solver, time_limit_s=time_limit_s)
        if plan.stages:
            best, high = plan, min(cap, largest_stage_bytes(problem, plan))
        else:
            low = cap
    return best
