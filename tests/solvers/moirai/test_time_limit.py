"""Time limits: the hard kill, PuLP's "Optimal" after a time limit, and the solver's end-to-end limit."""

from __future__ import annotations

import time
from functools import cache

import pytest

from solvers.base import ProgressEvent
from solvers.moirai.backends.runner import run_backend
from solvers.moirai.formulation import build
from solvers.moirai.gcof import identity_grouping
from solvers.moirai.instance import build_instance
from solvers.moirai.linear_model import Formulation
from solvers.moirai.warmstart import warm_start
from solvers.simulator import simulate
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.solvers.moirai.tiny import tiny_problem


@cache
def _hard() -> Formulation:
    """14 ops on 3 devices: CBC needs well over the limits used here to prove optimality."""
    problem = tiny_problem(11, 14, 3)
    inst = build_instance(problem, identity_grouping(problem.graph))
    return build(inst, warm_start(inst))


def test_overrunning_backend_is_killed_at_the_deadline() -> None:
    started = time.monotonic()
    result = run_backend(_hard(), "cbc", 60.0, 1.0, 1, 0, lambda a, b: None)
    assert time.monotonic() - started < 2.0
    assert result.status == "unknown" and "killed" in result.message


def test_pulp_optimal_after_a_time_limit_is_reported_feasible() -> None:
    result = run_backend(_hard(), "pulp-cbc", 1.0, 10.0, 1, 0, lambda a, b: None)
    assert result.status == "feasible", result.message
    assert result.objective is not None and result.bound is not None and result.bound < result.objective


@pytest.mark.parametrize("backend", ["cbc", "pulp-cbc", "cp-sat", "scip"])
def test_solver_honours_the_time_limit(backend: str) -> None:
    problem = tiny_problem(11, 14, 3, training=True)
    events: list[ProgressEvent] = []
    started = time.monotonic()
    plan = solve(problem, "moirai", {"backend": backend, "fusion": False}, time_limit_s=2.0, progress=events.append)
    assert time.monotonic() - started < 3.0
    resolve_plan(problem, plan)
    simulated = simulate(problem, plan).metrics["latency_s"]
    assert plan.claimed_objective_s == pytest.approx(simulated, rel=1e-12)
    assert plan.status in ("optimal", "feasible")
    if plan.status == "optimal":
        assert plan.stats["gap"] <= 1e-4
    assert plan.stats["warm_start_s"] >= simulated * (1 - 1e-9)  # never worse than the warm start
    fractions = [e.fraction for e in events]
    assert fractions == sorted(fractions) and all(0 <= f <= 1 for f in fractions)
    # the task DAG's bound is reported first, before the warm start finds an incumbent (auto's gap stop)
    assert events[0].incumbent_s is None and events[0].bound_s is not None and events[0].bound_s > 0
    assert events[1].incumbent_s is not None and events[1].incumbent_s > 0
