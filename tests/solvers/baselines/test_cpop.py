"""CPOP (Topcuoglu, Hariri & Wu 2002, §4.2): the paper's critical path and processor, valid plans."""

from __future__ import annotations

import numpy as np
import pytest

from solvers.base import Budget, no_progress
from solvers.baselines.cpop import CPOPOptions, CPOPSolver, cpop_priority, critical_path
from solvers.baselines.heft import upward_rank
from solvers.listsched import latency_costs, levels, op_task_graph
from solvers.simulator import simulate
from tests.solvers.baselines.test_heft import RANK_U, C, W, heft_example


def test_critical_path_of_the_paper_example() -> None:
    problem = heft_example()
    tasks, costs = op_task_graph(problem), latency_costs(problem)
    tlevel, _ = levels(tasks.succ, tasks.succ_bytes, tasks.pred, tasks.pred_bytes, tasks.dur_s.mean(axis=1),
                       costs.msg_factor * costs.mean_latency_s, costs.msg_factor * costs.mean_inv_bandwidth_sPB,
                       np.argsort(tasks.rank, kind="stable"))
    priority = upward_rank(tasks, costs) + tlevel
    path = [problem.graph.nodes[v].id for v in critical_path(tasks, priority)]
    assert path == ["n1", "n2", "n9", "n10"]  # the paper's critical path, |CP| = rank_u(n1) = 108
    assert priority[problem.graph.index["n1"]] == 108.0


def test_critical_path_goes_to_the_fastest_device_and_the_plan_replays() -> None:
    problem = heft_example()
    plan = CPOPSolver().solve(problem, CPOPOptions(), Budget(None), no_progress)
    assert plan.stats["cp_device"] == 1  # P2: 16 + 19 + 12 + 7 = 54, the paper's choice
    where = {op: stage.devices[0] for stage in plan.stages for op in stage.ops}
    assert {where[op] for op in ("n1", "n2", "n9", "n10")} == {"p2"}
    assert plan.claimed_objective_s == simulate(problem, plan).metrics["objective_s"]


def test_priority_is_the_papers_rank_u_plus_rank_d() -> None:
    """rank_d(n_i) = max over predecessors n_j of rank_d(n_j) + w_j + c_ji (the predecessor's mean
    time, not n_i's own), computed here from the example's tables."""
    problem = heft_example()
    mean_w = {i: sum(w) / 3 for i, w in W.items()}
    rank_d: dict[int, float] = {}
    for i in sorted(W):  # n1 .. n10 is a topological order of the example
        rank_d[i] = max((rank_d[j] + mean_w[j] + c for (j, k), c in C.items() if k == i), default=0.0)
    expected = np.array([RANK_U[i - 1] + rank_d[i] for i in sorted(W)])
    priority = cpop_priority(op_task_graph(problem), latency_costs(problem))
    order = [problem.graph.index[f"n{i}"] for i in sorted(W)]
    assert priority[order] == pytest.approx(expected, abs=1e-3)
    assert priority[order][[0, 1, 8, 9]] == pytest.approx([108.0] * 4, abs=1e-3)  # the critical path n1, n2, n9, n10
