"""A stage's replicas never run 1-row slices of a micro-batch of a graph ``torch.export`` made.

``torch.export`` specialises a dimension of size 1: GPT-2 exported at 1 row holds other ops than at 4
(its position ids' ``expand``), so ``placer launcher check``, which re-exports each slice, refuses such
a plan.  The rule lives where the solvers see it (``solvers.model.plan.replicas_split_rows``): no
throughput solver returns such a plan, and the simulator refuses one made by hand, naming the stage.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.check import check_plan
from solvers.model.documents import load_graph, load_plan
from solvers.model.errors import InvalidPlan
from solvers.model.plan import plan_from_document, replicas_split_rows
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import topology_from_document
from solvers.validity import resolve_plan
from tests.launcher.conftest import solve, topology

ROWS = 4  # the graphs' batch: one micro-batch's rows


def test_the_rule_refuses_one_row_slices_of_exported_graphs_only() -> None:
    assert replicas_split_rows(2, ROWS, exported=True) and replicas_split_rows(1, 1, exported=True)
    assert not replicas_split_rows(4, ROWS, exported=True)
    assert replicas_split_rows(4, ROWS, exported=False)  # a profile of another origin: the rows alone
    assert not replicas_split_rows(3, ROWS, exported=False)


@pytest.mark.parametrize("solver", ["even", "rannc", "pipedream", "parmesan", "exact"])
def test_no_solver_returns_one_row_slices_and_check_accepts_its_plan(
    solver: str, workdir: Path, graphs: Callable[[str], Path]
) -> None:
    graph = graphs("gpt2")
    plan = load_plan(solve(workdir, graph, solver, 4, "--micro-batches", "4", "--schedule", "1f1b",
                           "--time-limit", "2"))
    assert plan.stages, plan.notes
    for s, stage in enumerate(plan.stages):
        assert ROWS // (len(stage.devices) // stage.tp) >= 2, (solver, s, stage.devices)
    report = check_plan(plan, load_graph(graph))
    assert report.ok, report.reason


def test_a_plan_of_one_row_slices_is_refused_naming_the_stage(graphs: Callable[[str], Path]) -> None:
    graph = load_graph(graphs("gpt2"))
    problem = Problem(graph, topology_from_document(topology(4)), "throughput", ProblemSettings(micro_batches=(4,)))
    plan = plan_from_document({"format": "placer.plan/v1", "objective": "throughput", "micro_batches": 4,
                               "schedule": "1f1b", "stages": [{"ops": [n.id for n in graph.nodes],
                                                               "devices": ["cpu0", "cpu1", "cpu2", "cpu3"]}]})
    with pytest.raises(InvalidPlan, match="one row of a micro-batch of 4 rows") as err:
        resolve_plan(problem, plan)
    assert err.value.field == "stages[0].devices"
    report = check_plan(plan, graph)  # the launcher's own check refuses it too
    assert not report.ok and "exported at 1 rows" in str(report.reason)
