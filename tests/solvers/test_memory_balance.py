"""least_memory_plan: the solver under the smallest per-stage cap it can meet."""

from __future__ import annotations

import pytest

from solvers.memory_balance import largest_stage_bytes, least_memory_plan
from solvers.model.errors import InvalidProblem
from solvers.model.problem import Problem, ProblemSettings
from solvers.solving import solve
from tests.solvers.cost.test_stage_memory_agree import ACT, _chain, _devices


def _problem(**settings: object) -> Problem:
    base = {"micro_batches": (1,), "schedule": "1f1b", "stages": 2, "replicas": 1, "recompute": False}
    return Problem(_chain(), _devices(2, 1e12), "throughput", ProblemSettings(**{**base, **settings}))


@pytest.mark.parametrize("solver", ["exact", "parmesan"])
def test_the_memory_balanced_split_of_a_chain(solver: str) -> None:
    """Time balances 4 | 4 (the second stage then holds 4 activations and the received tensor, 6 in
    all); memory balances 5 | 3 (5 and 3 + 2)."""
    problem = _problem()
    fastest = solve(problem, solver, time_limit_s=20)
    assert [len(s.ops) for s in fastest.stages] == [4, 4]
    assert largest_stage_bytes(problem, fastest) == pytest.approx(6 * ACT)
    plan = least_memory_plan(problem, solver, tolerance_bytes=ACT / 100, time_limit_s=20)
    assert [len(s.ops) for s in plan.stages] == [5, 3]
    assert largest_stage_bytes(problem, plan) == pytest.approx(5 * ACT)


def test_it_needs_a_stage_count_and_a_positive_tolerance() -> None:
    with pytest.raises(InvalidProblem, match=r"settings\.stages"):
        least_memory_plan(_problem(stages=None))
    with pytest.raises(InvalidProblem, match="tolerance_bytes"):
        least_memory_plan(_problem(), tolerance_bytes=0.0)
