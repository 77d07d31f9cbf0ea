"""``plan.order`` is replayed exactly; without it the documented list-scheduling rule applies."""

from __future__ import annotations

import pytest

from solvers.model.errors import InvalidPlan
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.simulator import simulate
from tests.solvers.simulator.cases import line_topology


def _problem(pass_: str) -> Problem:
    # a -> b across devices (0.5 s transfer); c is independent and shares d0 with a.
    nodes = [Node("a", "x", 1.0, 1.0), Node("b", "x", 1.0, 2.0), Node("c", "x", 1.0, 1.0)]
    graph = OpGraph.build("three", nodes, [Edge("a", "b", 5e8)])
    return Problem(graph, line_topology(2, 1e9), "latency", ProblemSettings(pass_=pass_))  # type: ignore[arg-type]


def _plan(order: dict[str, tuple[str, ...]] | None) -> Plan:
    return Plan((Stage(("a", "c"), ("d0",)), Stage(("b",), ("d1",))), order=order)


def _intervals(problem: Problem, plan: Plan) -> dict[str, tuple[float, float]]:
    timeline = simulate(problem, plan, timeline=True).timeline
    assert timeline is not None
    return {e.task: (e.start_s, e.end_s) for e in timeline if "->" not in e.resource}


def test_list_scheduling_without_order() -> None:
    times = _intervals(_problem("forward"), _plan(None))
    # a and c are ready at 0 on d0: a has the smaller topological position.
    assert times == {"F0 a": (0.0, 1.0), "F0 c": (1.0, 2.0), "F0 b": (1.5, 2.5)}


def test_order_is_replayed_forward() -> None:
    problem = _problem("forward")
    plan = _plan({"d0": ("c", "a"), "d1": ("b",)})
    assert _intervals(problem, plan) == {"F0 c": (0.0, 1.0), "F0 a": (1.0, 2.0), "F0 b": (2.5, 3.5)}
    assert simulate(problem, plan).metrics["latency_s"] == pytest.approx(3.5)


def test_order_is_replayed_training_backward_in_reverse() -> None:
    problem = _problem("training")
    times = _intervals(problem, _plan({"d0": ("c", "a")}))  # d1 has no order: list scheduling
    assert times["B0 b"] == (3.5, 5.5)
    assert times["B0 a"] == (6.0, 7.0)  # gradient arrives at 5.5 + 0.5; reversed order: a before c
    assert times["B0 c"] == (7.0, 8.0)
    assert simulate(problem, _plan({"d0": ("c", "a")})).metrics["latency_s"] == pytest.approx(8.0)
    free = _intervals(problem, _plan(None))
    assert free["B0 c"] == (2.0, 3.0) and free["B0 a"] == (5.0, 6.0)


def test_order_against_dependencies_is_rejected() -> None:
    nodes = [Node("a", "x", 1.0), Node("b", "x", 1.0)]
    problem = Problem(OpGraph.build("ab", nodes, [Edge("a", "b")]), line_topology(1), "latency")
    plan = Plan((Stage(("a", "b"), ("d0",)),), order={"d0": ("b", "a")})
    with pytest.raises(InvalidPlan, match="waits forever at task F0 b"):
        simulate(problem, plan)


def test_micro_batches_follow_the_order_one_after_another() -> None:
    problem = _problem("forward")
    plan = _plan({"d0": ("c", "a")}).with_(micro_batches=2)
    times = _intervals(problem, plan)
    assert [times[k] for k in ("F0 c", "F0 a", "F1 c", "F1 a")] == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]
    assert times["F1 b"] == (4.5, 5.5)
