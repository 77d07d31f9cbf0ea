"""``parmesan`` with tensor parallelism: the whole flow on the problem whose devices are tensor-parallel groups."""

from __future__ import annotations

import pytest

from solvers import solve
from solvers.partition.tp import expand_plan, group_problem, tp_groups
from solvers.simulator import simulate
from tests.solvers.exact.test_exact_tp import LAT, one_host, problem


def test_tp_wins_where_only_split_weights_fit_and_loses_on_a_slow_link() -> None:
    """The closed forms of tests/solvers/exact/test_exact_tp.py."""
    plan = solve(problem(one_host(2, 1e9, 23e6), 1), "parmesan", time_limit_s=20)
    assert [(s.devices, s.tp) for s in plan.stages] == [(("d0", "d1"), 2)]
    alone = solve(problem(one_host(2, 1e9, 23e6), 1), "parmesan", {"baseline_guard": False}, time_limit_s=20)
    assert alone.stats["tp"] == 2 and alone.to_document()["stages"] == plan.to_document()["stages"]  # its own flow on groups
    fwd = 3.0 / 2 + 0.75 + 4e6 / 1e9 + 2 * LAT
    bwd = 6.0 / 2 + 0.25 + 4e6 / 1e9 + 2 * LAT
    assert plan.metrics["objective_s"] == pytest.approx(fwd + bwd, rel=1e-12)
    slow = solve(problem(one_host(2, 1e7, 1e12), 8), "parmesan", time_limit_s=20)
    without = solve(problem(one_host(2, 1e7, 1e12), 8, max_tp=1), "parmesan", time_limit_s=20)
    assert slow.to_document()["stages"] == without.to_document()["stages"]
    fixed = solve(problem(one_host(4, 1e9, 1e12), 2, tp=2), "parmesan", time_limit_s=20)
    assert fixed.stages and all(s.tp == 2 for s in fixed.stages)


def test_the_group_problem_times_a_stage_as_the_simulator_times_it_split() -> None:
    """On one group the group problem's one-stage plan and its expansion simulate alike (one replica)."""
    p = problem(one_host(2, 1e9, 1e12), 1)
    groups = tp_groups(p.topology, 2)
    grouped = group_problem(p, 2, groups)
    assert grouped.topology.n_devices == 1 and grouped.settings.max_tp == 1
    plan = solve(grouped, "even", time_limit_s=10)
    expanded = expand_plan(p, plan, groups)
    assert [(s.devices, s.tp) for s in expanded.stages] == [(("d0", "d1"), 2)]
    assert simulate(p, expanded).metrics["iteration_s"] == pytest.approx(simulate(grouped, plan).metrics["iteration_s"],
                                                                          rel=1e-12)
