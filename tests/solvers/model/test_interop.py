"""networkx views of op graphs and topologies: exact round trips, attribute names, refusals."""

from __future__ import annotations

import re
from collections.abc import Callable

import networkx as nx
import pytest
from hypothesis import given, settings

from solvers.model.errors import InvalidGraph, InvalidTopology
from solvers.model.graph import OpGraph, graph_from_document
from solvers.model.topology import Topology
from tests.strategies import asymmetric_topologies, dag_graphs, examples, full_graphs, matrix_topologies


@settings(max_examples=examples(150))
@given(full_graphs())
def test_graph_round_trip_is_exact(graph: OpGraph) -> None:
    back = OpGraph.from_networkx(graph.to_networkx())
    assert back.to_document() == graph.to_document()
    assert back.digest == graph.digest


@settings(max_examples=examples(50))
@given(dag_graphs())
def test_graph_view_has_the_document_fields(graph: OpGraph) -> None:
    g = graph.to_networkx()
    assert list(g.nodes) == graph.ids
    assert g.graph == {"format": "placer.opgraph/v1", "name": graph.name,
                       "profiled_batch_size": graph.profiled_batch_size}
    for node in graph.nodes:
        assert {"id": node.id, **g.nodes[node.id]} == node.to_dict()
    for k, edge in enumerate(graph.edges):
        assert g.edges[edge.src, edge.dst] == {"bytes": edge.bytes, "position": k}
    assert [graph.ids[i] for i in graph.topo_order.tolist()] == list(nx.lexicographical_topological_sort(
        g, key=graph.index.__getitem__))


@settings(max_examples=examples(150))
@given(asymmetric_topologies())
def test_link_topology_round_trip_is_exact(topology: Topology) -> None:
    g = topology.to_networkx()
    assert g.number_of_edges() == len(topology.links or ())
    back = Topology.from_networkx(g)
    assert back.to_document() == topology.to_document()
    assert back.digest == topology.digest
    assert (back.bandwidth_Bps == topology.bandwidth_Bps).all() and (back.latency_s == topology.latency_s).all()


@settings(max_examples=examples(100))
@given(matrix_topologies())
def test_matrix_topology_round_trip_is_exact(topology: Topology) -> None:
    g = topology.to_networkx()
    assert g.graph["matrices"] is True
    back = Topology.from_networkx(g)
    assert back.to_document() == topology.to_document() and back.digest == topology.digest


def test_graph_without_positions_keeps_networkx_edge_order() -> None:
    g = nx.DiGraph()
    g.add_nodes_from(["a", "b", "c"], op="x", fwd_s=1.0)
    g.add_edge("b", "c", bytes=2.0)
    g.add_edge("a", "c", bytes=1.0, position=0)
    graph = OpGraph.from_networkx(g, name="g", profiled_batch_size=4)
    assert [(e.src, e.dst) for e in graph.edges] == [("a", "c"), ("b", "c")]
    assert graph.name == "g" and graph.profiled_batch_size == 4


def test_graph_defaults_match_the_document_defaults() -> None:
    g = nx.DiGraph()
    g.add_node("a", op="x", fwd_s=1.0)
    graph = OpGraph.from_networkx(g)
    assert graph.to_document() == graph_from_document(
        {"format": "placer.opgraph/v1", "nodes": [{"id": "a", "op": "x", "fwd_s": 1.0}]}).to_document()


@pytest.mark.parametrize(("build", "message"), [
    (lambda g: g.add_node("a", op="x", fwd_s=1.0, label="A"), "op 'a': unknown attribute 'label'"),
    (lambda g: g.add_node("c", op="x"), "op 'c': missing attribute 'fwd_s'"),
    (lambda g: g.add_node(3, op="x", fwd_s=1.0), "node 3: ids must be strings"),
    (lambda g: g.add_edges_from([("a", "b"), ("b", "a")], bytes=1.0), "the graph has a cycle"),
    (lambda g: g.graph.update(format="placer.topology/v1"), "format: expected 'placer.opgraph/v1'"),
])
def test_graph_refusals_name_the_fault(build: Callable[[nx.DiGraph], object], message: str) -> None:
    g = nx.DiGraph()
    g.add_node("a", op="x", fwd_s=1.0)
    g.add_node("b", op="x", fwd_s=1.0)
    build(g)
    with pytest.raises(InvalidGraph, match=re.escape(message)):
        OpGraph.from_networkx(g)


def test_graph_needs_a_digraph() -> None:
    with pytest.raises(InvalidGraph, match="DiGraph"):
        OpGraph.from_networkx(nx.Graph())
    with pytest.raises(InvalidGraph, match="DiGraph"):
        OpGraph.from_networkx(nx.MultiDiGraph())


def test_undirected_topology_edges_are_bidirectional_links() -> None:
    g = nx.Graph()
    g.add_nodes_from(["a", "b", "c"], memory_bytes=1e9)
    g.add_edge("a", "b", bandwidth_Bps=1e9)
    g.add_edge("b", "c", bandwidth_Bps=2e9, latency_s=1e-3)
    topology = Topology.from_networkx(g)
    assert all(link.bidirectional for link in topology.links or ())
    assert topology.bandwidth_Bps[2, 0] == 1e9 and topology.latency_s[2, 0] == 1e-3


def test_directed_topology_edges_are_one_way() -> None:
    g = nx.DiGraph()
    g.add_nodes_from(["a", "b"], memory_bytes=1e9)
    g.add_edge("a", "b", bandwidth_Bps=1e9)
    with pytest.raises(InvalidTopology, match="cannot reach"):
        Topology.from_networkx(g)
    g.add_edge("b", "a", bandwidth_Bps=5e8)
    topology = Topology.from_networkx(g)
    assert topology.bandwidth_Bps[0, 1] == 1e9 and topology.bandwidth_Bps[1, 0] == 5e8


def test_topology_refusals_name_the_fault() -> None:
    g = nx.Graph()
    g.add_node("a", memory_bytes=1e9, colour="red")
    with pytest.raises(InvalidTopology, match="device 'a': unknown attribute 'colour'"):
        Topology.from_networkx(g)
    g = nx.DiGraph(matrices=True)
    g.add_nodes_from(["a", "b"], memory_bytes=1e9)
    g.add_edge("a", "b", bandwidth_Bps=1e9, bidirectional=True)
    with pytest.raises(InvalidTopology, match="'bidirectional' has no meaning"):
        Topology.from_networkx(g)
    with pytest.raises(InvalidTopology, match="DiGraph or Graph"):
        Topology.from_networkx(nx.MultiGraph())
