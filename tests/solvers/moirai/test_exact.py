"""The MILP's optimum equals brute force over all placements and orders, for every back-end."""

from __future__ import annotations

from functools import cache

import pytest

from solvers.model.problem import Problem
from solvers.moirai.backends.result import BACKENDS
from solvers.simulator import simulate
from solvers.solving import solve
from tests.solvers.moirai.brute import brute_force_latency_s
from tests.solvers.moirai.tiny import tiny_problem

# (seed, ops, devices, training, memory GiB per device); the 1.5 GiB case makes memory bind
INSTANCES = [(1, 5, 3, False, 16.0), (2, 5, 3, True, 16.0), (3, 6, 2, False, 16.0), (4, 6, 2, True, 16.0),
             (7, 5, 3, False, 1.5)]
# CP-SAT times are whole ticks of horizon / 1e6 (rounded down), so its objective is that close
OBJECTIVE_REL = {"cp-sat": 2e-5}


@cache
def _case(i: int) -> tuple[Problem, float]:
    seed, n_ops, n_dev, training, mem = INSTANCES[i]
    problem = tiny_problem(seed, n_ops, n_dev, training, mem)
    return problem, brute_force_latency_s(problem)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", range(len(INSTANCES)))
def test_optimum_equals_brute_force(case: int, backend: str) -> None:
    problem, best_s = _case(case)
    plan = solve(problem, "moirai", {"backend": backend, "fusion": False}, time_limit_s=30)
    assert plan.status == "optimal", plan.stats
    simulated = simulate(problem, plan).metrics["latency_s"]
    assert simulated == pytest.approx(best_s, rel=1e-9)  # the schedule replays to the optimum
    assert plan.claimed_objective_s == pytest.approx(simulated, rel=1e-12)
    assert plan.stats["milp_objective_s"] == pytest.approx(simulated, rel=OBJECTIVE_REL.get(backend, 1e-6))
    assert plan.lower_bound_s is not None and plan.lower_bound_s <= simulated
    assert plan.stats["gap"] <= 1e-4
    assert plan.micro_batches == 1 and all(len(s.devices) == 1 for s in plan.stages)


def test_memory_binds_in_the_memory_case() -> None:
    _, best_s = _case(len(INSTANCES) - 1)
    unconstrained = tiny_problem(*INSTANCES[-1][:4], memory_gib=64.0)
    assert brute_force_latency_s(unconstrained) < best_s


def test_infeasible_memory_is_reported() -> None:
    problem = tiny_problem(2, 5, 3, True, 0.3)  # every op alone exceeds 0.3 GiB
    plan = solve(problem, "moirai", {"backend": "cbc"}, time_limit_s=10)
    assert plan.status == "infeasible" and not plan.stages and plan.notes


def test_pinned_ops_stay_on_their_device() -> None:
    problem = tiny_problem(1, 5, 3).with_settings(pinned={"v0": "d2", "v3": "d0"})
    plan = solve(problem, "moirai", {"backend": "cp-sat", "fusion": False}, time_limit_s=10)
    where = {op: stage.devices[0] for stage in plan.stages for op in stage.ops}
    assert where["v0"] == "d2" and where["v3"] == "d0"
    assert plan.status == "optimal"
