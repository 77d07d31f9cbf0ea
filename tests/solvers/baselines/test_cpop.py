"""CPOP (Topcuoglu, Hariri & Wu 2002, §4.2): the paper's critical path and processor, valid plans."""

from __future__ import annotations

import numpy as np

from solvers.base import Budget, no_progress
from solvers.baselines.cpop import CPOPOptions, CPOPSolver, critical_path
from solvers.baselines.heft import upward_rank
from solvers.listsched import latency_costs, levels, op_task_graph
from solvers.simulator import simulate
from tests.solvers.baselines.test_heft import heft_example


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
