"""The band DP (:mod:`solvers.parmesan.bands`): never worse than the partition it starts from,
and its partitions follow the edges."""

from __future__ import annotations

import time

import numpy as np
import pytest

from solvers.generate import generate_graph
from solvers.parmesan.bands import BandBudgets, band_refine
from solvers.parmesan.refine import Partition
from solvers.partition.costs import reference_costs
from solvers.partition.shapes import StagePartition
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.solvers.parmesan.strategies import compute_only_problem


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_band_dp_keeps_or_lowers_the_objective(seed: int) -> None:
    problem = compute_only_problem(generate_graph("random_dag", n_ops=80, width=4, seed=seed))
    costs = reference_costs(problem)
    plan = solve(problem, "parmesan", {"baseline_guard": False, "band_rounds": 0, "clusters": 12}, time_limit_s=10)
    stage_of = resolve_plan(problem, plan).stage_of
    before = Partition.of(problem.graph, costs, stage_of, 6).objective_s(1)
    found = band_refine(problem, costs, StagePartition(stage_of, 6, 1, 1), {}, BandBudgets(3, 3000, 250_000))
    assert found is not None
    after, stats = found
    g = problem.graph
    assert (after[g.edge_src] <= after[g.edge_dst]).all()  # stages follow the edges
    assert set(np.unique(after).tolist()) == set(range(6))
    value = Partition.of(g, costs, after, 6).objective_s(1)
    assert value == pytest.approx(stats["band_dp_objective_s"], rel=1e-9)
    assert value <= before * (1 + 1e-12)
    assert band_refine(problem, costs, StagePartition(stage_of, 6, 1, 1), {}, BandBudgets(3, 3000, 250_000),
                       deadline=time.monotonic() - 1) is None


def test_band_rounds_option_only_acts_on_clustered_graphs() -> None:
    problem = compute_only_problem(generate_graph("random_dag", n_ops=80, width=4, seed=2))
    clustered = solve(problem, "parmesan", {"baseline_guard": False, "clusters": 12}, time_limit_s=10)
    plain = solve(problem, "parmesan", {"baseline_guard": False, "clusters": 12, "band_rounds": 0},
                  time_limit_s=10)
    assert clustered.metrics is not None and plain.metrics is not None
    assert "band_rounds" in clustered.stats and "band_rounds" not in plain.stats
    assert clustered.metrics["bottleneck_stage_s"] <= plain.metrics["bottleneck_stage_s"] * (1 + 1e-9)
