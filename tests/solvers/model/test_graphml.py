"""GraphML read and write: exact round trips for every attribute type, refusals that name the fault."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given, settings

from solvers.model.errors import FormatError, InvalidGraph
from solvers.model.graph import OpGraph
from solvers.model.graphml import parse_graphml, read_graphml, to_graphml, write_graphml
from solvers.model.topology import Topology
from tests.strategies import asymmetric_topologies, examples, full_graphs, matrix_topologies


@settings(max_examples=examples(100))
@given(full_graphs())
def test_graph_round_trip_is_exact(graph: OpGraph) -> None:
    back = parse_graphml(to_graphml(graph))
    assert isinstance(back, OpGraph)
    assert back.to_document() == graph.to_document() and back.digest == graph.digest


@settings(max_examples=examples(100))
@given(asymmetric_topologies())
def test_link_topology_round_trip_is_exact(topology: Topology) -> None:
    back = parse_graphml(to_graphml(topology))
    assert isinstance(back, Topology)
    assert back.to_document() == topology.to_document() and back.digest == topology.digest


@settings(max_examples=examples(50))
@given(matrix_topologies())
def test_matrix_topology_round_trip_is_exact(topology: Topology) -> None:
    back = parse_graphml(to_graphml(topology))
    assert back.to_document() == topology.to_document() and back.digest == topology.digest


def test_nested_fields_are_json_text_and_numbers_keep_their_type(tmp_path: Path) -> None:
    doc = {"format": "placer.opgraph/v1", "name": "g", "attrs": {"source": {"tool": "x", "v": [1, 2.5]}},
           "nodes": [{"id": "a", "op": "mm", "fwd_s": 1.0, "times": {"A100": {"fwd_s": 0.5, "bwd_s": 1.0}},
                      "attrs": {"shape": [2, 3]}, "layer": "l0", "constant": True}]}
    from solvers.model.graph import graph_from_document

    graph = graph_from_document(doc)
    write_graphml(graph, tmp_path / "g.graphml")
    g = nx.read_graphml(tmp_path / "g.graphml")  # what another tool sees
    assert g.nodes["a"]["times"] == '{"A100":{"fwd_s":0.5,"bwd_s":1.0}}'
    assert g.nodes["a"]["attrs"] == '{"shape":[2,3]}' and g.graph["attrs"] == '{"source":{"tool":"x","v":[1,2.5]}}'
    assert g.nodes["a"]["constant"] is True and g.nodes["a"]["fwd_s"] == 1.0 and g.graph["profiled_batch_size"] == 1
    assert read_graphml(tmp_path / "g.graphml").to_document() == graph.to_document()


def test_control_characters_are_refused() -> None:
    graph = OpGraph.from_networkx(_two_ops("a\tb"))
    with pytest.raises(FormatError, match="cannot be stored in GraphML"):
        to_graphml(graph)


def _two_ops(first: str) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_node(first, op="x", fwd_s=1.0)
    g.add_node("c", op="x", fwd_s=1.0)
    g.add_edge(first, "c")
    return g


@pytest.mark.parametrize(("text", "error", "message"), [
    ("<graphml><graph", FormatError, "invalid GraphML"),
    ('<graphml xmlns="http://graphml.graphdrawing.org/xmlns"><key id="d0" for="node" attr.name="attrs" '
     'attr.type="string"/><graph edgedefault="directed"><node id="a"><data key="d0">{oops</data></node></graph>'
     "</graphml>", FormatError, "node 'a': attribute 'attrs' is not JSON"),
    ('<graphml xmlns="http://graphml.graphdrawing.org/xmlns"><graph edgedefault="directed"><node id="a"/>'
     "</graph></graphml>", InvalidGraph, "op 'a': missing attribute 'op'"),
])
def test_bad_files_name_the_fault(text: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        parse_graphml(text)
    assert message in str(info.value)


def test_missing_and_oversized_files(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="cannot read"):
        read_graphml(tmp_path / "nope.graphml")
    (tmp_path / "big.graphml").write_text("x" * 100)
    with pytest.raises(FormatError, match="larger than the limit"):
        read_graphml(tmp_path / "big.graphml", max_bytes=10)
