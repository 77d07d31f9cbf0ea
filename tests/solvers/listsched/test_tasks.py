"""The task graph of an op graph (``solvers.listsched.tasks.op_task_graph``)."""

from __future__ import annotations

from hypothesis import given, settings

from solvers.generate import generate_graph, generate_topology
from solvers.listsched import op_task_graph
from solvers.model.graph import OpGraph
from solvers.model.problem import Problem, ProblemSettings
from tests.strategies import examples, full_graphs


def _expect_bytes(graph: OpGraph) -> tuple[list[list[float]], list[list[float]]]:
    """The message bytes per node by the definition: the edges into (out of) each op, in edge order."""
    pred_b = [[float(graph.edge_bytes[e]) for e in edges] for edges in graph.in_edges]
    succ_b = [[float(graph.edge_bytes[e]) for e in edges] for edges in graph.out_edges]
    return pred_b, succ_b


@settings(max_examples=examples(60))
@given(full_graphs())
def test_message_bytes_are_aligned_with_the_graphs_lists(graph: OpGraph) -> None:
    """Edges in any order (``full_graphs`` does not group them by source): ``pred_bytes[v][i]`` is the
    bytes of the edge from ``pred[v][i]``, and likewise for the successors."""
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    tasks = op_task_graph(Problem(graph, topology, "latency", ProblemSettings(pass_="training")))
    assert (tasks.pred_bytes, tasks.succ_bytes) == _expect_bytes(graph)
    assert tasks.pred == graph.pred and tasks.succ == graph.succ


def test_message_bytes_of_a_generated_graph() -> None:
    graph = generate_graph("random_dag", n_ops=400, seed=2)
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=4)
    tasks = op_task_graph(Problem(graph, topology, "latency"))
    assert (tasks.pred_bytes, tasks.succ_bytes) == _expect_bytes(graph)
