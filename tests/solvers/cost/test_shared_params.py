"""A tied weight read in two pipeline stages: the stage without its first reader holds a copy."""

from __future__ import annotations

from solvers.cost.memory import plan_memory_bytes
from solvers.generate import generate_topology
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage, resolve_structure
from solvers.model.problem import Problem
from solvers.simulator import simulate

WEIGHT = 4096.0


def _problem(shared: bool) -> Problem:
    nodes = [Node("ids", "input", 0.0), Node("embedding", "aten.embedding.default", 1e-4, param_bytes=WEIGHT),
             Node("linear", "aten.linear.default", 1e-4)]
    edges = [Edge("ids", "embedding", 64.0), Edge("embedding", "linear", 64.0)]
    attrs = {"shared_params": [{"param": "wte.weight", "bytes": WEIGHT, "ops": ["embedding", "linear"]}]} if shared else {}
    graph = OpGraph.build("tied", nodes, edges, 1, attrs)
    return Problem(graph, generate_topology("hierarchical", nodes=1, gpus_per_node=2))


def test_the_second_stage_holds_a_copy_of_the_tied_weight() -> None:
    with_tie, without = _problem(True), _problem(False)
    devices = [d.id for d in with_tie.topology.devices]
    plan = Plan((Stage(("ids", "embedding"), (devices[0],)), Stage(("linear",), (devices[1],))), micro_batches=1)
    tied = plan_memory_bytes(with_tie, resolve_structure(with_tie, plan))
    plain = plan_memory_bytes(without, resolve_structure(without, plan))
    factor = 1.0 + with_tie.settings.optimizer_bytes_per_param_byte
    assert tied[0] == plain[0]
    assert tied[1] - plain[1] == WEIGHT * factor
    one_stage = Plan((Stage(("ids", "embedding", "linear"), (devices[0],)),), micro_batches=1)
    assert plan_memory_bytes(with_tie, resolve_structure(with_tie, one_stage)) == \
        plan_memory_bytes(without, resolve_structure(without, one_stage))


def test_the_simulator_adds_the_all_reduce_of_the_tied_copies() -> None:
    with_tie, without = _problem(True), _problem(False)
    devices = [d.id for d in with_tie.topology.devices]
    plan = Plan((Stage(("ids", "embedding"), (devices[0],)), Stage(("linear",), (devices[1],))), micro_batches=1)
    tied, plain = simulate(with_tie, plan), simulate(without, plan)
    assert tied.metrics["objective_s"] > plain.metrics["objective_s"]
