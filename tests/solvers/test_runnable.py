"""A pipeline stage without compute is not a stage: the shared finishing path marks such a plan infeasible."""

from __future__ import annotations

from solvers.generate import generate_topology
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.runnable import idle_stages
from solvers.solving import finish_plan


def _graph() -> OpGraph:
    nodes = [Node("x", "input", 0.0), Node("positions", "aten.arange.default", 1e-6, constant=True),
             Node("embed", "aten.embedding.default", 1e-4), Node("head", "aten.linear.default", 1e-4)]
    edges = [Edge("x", "embed", 64.0), Edge("positions", "embed", 64.0), Edge("embed", "head", 64.0)]
    return OpGraph.build("tiny", nodes, edges)


def test_a_stage_of_inputs_and_constants_makes_the_plan_infeasible() -> None:
    graph = _graph()
    problem = Problem(graph, generate_topology("hierarchical", nodes=1, gpus_per_node=2))
    devices = [d.id for d in problem.topology.devices]
    idle = Plan((Stage(("x", "positions"), (devices[0],)), Stage(("embed", "head"), (devices[1],))), solver="even")
    assert idle_stages(graph, idle) == [0]
    finished = finish_plan(problem, idle.with_(status="feasible"))
    assert finished.status == "infeasible"
    assert any("stages[0] holds only inputs and constants" in note for note in finished.notes)
    working = Plan((Stage(("x", "positions", "embed"), (devices[0],)), Stage(("head",), (devices[1],))), solver="even")
    assert finish_plan(problem, working.with_(status="feasible")).status == "feasible"
