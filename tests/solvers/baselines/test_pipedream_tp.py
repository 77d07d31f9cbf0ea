"""``pipedream`` with tensor parallelism: the flat DP over (S, t, R) beside PipeDream's own plan."""

from __future__ import annotations

import pytest

from solvers import generate_graph, generate_topology, solve
from solvers.model.problem import Problem, ProblemSettings
from tests.solvers.exact.test_exact_tp import LAT, one_host, problem


def test_tp_wins_where_only_split_weights_fit() -> None:
    """The closed form of tests/solvers/exact/test_exact_tp.py: one stage split two ways on a 1 GB/s link."""
    plan = solve(problem(one_host(2, 1e9, 25e6), 1), "pipedream", time_limit_s=20)
    assert [(s.devices, s.tp) for s in plan.stages] == [(("d0", "d1"), 2)]
    fwd = 3.0 / 2 + 0.75 + 4e6 / 1e9 + 2 * LAT
    bwd = 6.0 / 2 + 0.25 + 4e6 / 1e9 + 2 * LAT
    assert plan.metrics["objective_s"] == pytest.approx(fwd + bwd, rel=1e-12)
    assert plan.stats["tp"] == 2
    without = solve(problem(one_host(2, 1e9, 25e6), 1, max_tp=1), "pipedream", time_limit_s=20)
    assert all(s.tp == 1 for s in without.stages) and without.metrics["objective_s"] > 10.0


def test_fixed_tp_and_max_tp_1() -> None:
    plan = solve(problem(one_host(4, 1e9, 1e12), 2, tp=2), "pipedream", time_limit_s=20)
    assert plan.stages and all(s.tp == 2 for s in plan.stages)
    graph = generate_graph("transformer", layers=4, causal=True)
    topo = generate_topology("hierarchical", nodes=2, gpus_per_node=4)
    plans = [solve(Problem(graph, topo, settings=ProblemSettings(micro_batches=(8,), max_tp=m)), "pipedream",
                   time_limit_s=30) for m in (1, 8)]
    assert plans[0].stats["mode"] == "hierarchical" and all(s.tp == 1 for s in plans[0].stages)
    # the split LM head lets two 4-device stages of 2 x 2 beat PipeDream's hierarchical plan here
    assert plans[1].stats["tp"] == 2 and plans[1].metrics["objective_s"] < plans[0].metrics["objective_s"]
