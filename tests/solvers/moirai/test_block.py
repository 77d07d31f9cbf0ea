"""The critical block's bound (solvers/moirai/block.py): exact on the relaxation it solves, never
above the brute-force optimum, and stronger than the whole-graph model on a classic instance."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings

from solvers.model.problem import Problem
from solvers.moirai.block import Block
from solvers.moirai.bounds import critical_block, task_bounds
from solvers.moirai.gcof import identity_grouping
from solvers.moirai.instance import build_instance
from solvers.moirai.pipeline import DECISION_TICKS
from solvers.moirai.warmstart import list_schedule
from tests.solvers.moirai.test_bounds import relaxation_optimum
from tests.solvers.moirai.test_exact import INSTANCES, _case
from tests.solvers.moirai.test_window_search import classic
from tests.strategies import examples, latency_cases


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=latency_cases(max_ops=6, max_devices=3))
def test_block_of_every_task_is_the_relaxation(case: tuple[Problem, object]) -> None:
    """With every task in the block, the block is the relaxation of bounds.py itself: it ends by
    the relaxation's brute-force optimum, and not 1e-5 earlier (floored ticks lose less)."""
    problem = case[0]
    inst = build_instance(problem, identity_grouping(problem.graph))
    assume(inst.n_tasks <= 7)
    optimum, _ = relaxation_optimum(inst)
    assume(optimum > 1e-9)  # the brute force reports 1e-300 for all-zero durations
    b = task_bounds(inst)
    assert b is not None
    block = Block(inst, b, range(inst.n_tasks), optimum * 1.01, DECISION_TICKS)
    assert block.decide(optimum * (1 + 1e-6), 10.0).status == "feasible"
    assert block.decide(optimum * (1 - 1e-5), 10.0).status == "infeasible"
    tasks = critical_block(inst, b)
    if tasks:  # the critical block is a relaxation of it: it never refutes the optimum
        assert Block(inst, b, tasks, optimum * 1.01, DECISION_TICKS).decide(optimum * (1 + 1e-6), 10.0).status == "feasible"


@pytest.mark.parametrize("case", range(len(INSTANCES)))
def test_critical_block_never_refutes_the_brute_force_optimum(case: int) -> None:
    problem, best_s = _case(case)
    inst = build_instance(problem, identity_grouping(problem.graph))
    b = task_bounds(inst)
    assert b is not None
    tasks = critical_block(inst, b)
    assert tasks
    block = Block(inst, b, tasks, best_s * 1.01, DECISION_TICKS)
    assert block.decide(best_s * (1 + 1e-9), 10.0).status == "feasible"


def test_critical_block_lifts_the_bound_on_a_classic_instance() -> None:
    """60 ops, 4 identical devices (seed 2): the optimum lies 4.0e-4 above the task bound; the
    whole-graph decision model needs about a minute to refute 2e-4 above it (two and a half
    minutes for 3e-4), the critical block (29 tasks) about 2 s for 2.5e-4."""
    problem = classic(60, 4, 2)
    inst = build_instance(problem, identity_grouping(problem.graph))
    start = list_schedule(inst)
    b = task_bounds(inst)
    assert b is not None and start is not None
    tasks = critical_block(inst, b)
    assert 20 <= len(tasks) <= 40
    block = Block(inst, b, tasks, start.makespan_s, DECISION_TICKS)
    assert block.decide(b.bound_s * (1 + 2.5e-4), 30.0).status == "infeasible"
    above = block.decide(b.bound_s * (1 + 1e-3), 30.0)
    assert above.status == "feasible" and above.end_s is not None and above.end_s <= b.bound_s * (1 + 1e-3)
