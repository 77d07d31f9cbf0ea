"""Every op-graph rejection of DESIGN §3 names the node, edge or field at fault."""

from __future__ import annotations

import copy
import itertools
import math
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from solvers.model.errors import InvalidGraph
from solvers.model.graph import GRAPH_FORMAT, Edge, Node, OpGraph, graph_from_document
from tests.strategies import dag_graphs, examples


def doc(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "format": GRAPH_FORMAT, "name": "g", "profiled_batch_size": 2,
        "nodes": [{"id": "a", "op": "aten.mm", "fwd_s": 1.0, "bwd_s": 2.0},
                  {"id": "b", "op": "aten.relu", "fwd_s": 0.5},
                  {"id": "c", "op": "aten.add", "fwd_s": 0.25}],
        "edges": [{"src": "a", "dst": "b", "bytes": 10}, {"src": "b", "dst": "c", "bytes": 20}],
    }
    base.update(extra)
    return base


def rejected(document: Any) -> InvalidGraph:
    with pytest.raises(InvalidGraph) as info:
        graph_from_document(document)
    return info.value


def test_valid_document_loads_with_defaults() -> None:
    g = graph_from_document(doc())
    assert g.n_ops == 3 and g.profiled_batch_size == 2
    assert g.nodes[1].bwd_s == 0.0 and g.nodes[1].param_bytes == 0.0 and not g.nodes[1].constant
    assert g.topo_order.tolist() == [0, 1, 2]
    assert g.succ[0] == [1] and g.pred[2] == [1] and g.edge_bytes.tolist() == [10.0, 20.0]


def _cycle_of(message: str) -> list[str]:
    assert "the graph has a cycle: " in message
    return message.split("the graph has a cycle: ")[1].split(" -> ")


def _same_cycle(found: list[str], expected: list[str]) -> bool:
    """``found`` is ``expected`` (closed: first == last) up to rotation."""
    ring = found[:-1]
    return found[0] == found[-1] and any(ring[i:] + ring[:i] == expected for i in range(len(ring)))


def test_cycle_names_the_ops_on_it() -> None:
    d = doc()
    d["edges"].append({"src": "c", "dst": "a"})
    err = rejected(d)
    assert err.field == "edges" and _same_cycle(_cycle_of(err.message), ["a", "b", "c"])


def test_cycle_off_the_first_node_is_named_exactly() -> None:
    d = doc()
    d["nodes"].append({"id": "d", "op": "x", "fwd_s": 0})
    d["edges"] += [{"src": "c", "dst": "d"}, {"src": "d", "dst": "c"}]
    err = rejected(d)
    assert _same_cycle(_cycle_of(err.message), ["c", "d"])
    assert err.ref in ("c", "d")


@settings(max_examples=examples(100))
@given(dag_graphs(min_ops=2), st.data())
def test_the_reported_cycle_is_a_cycle_of_the_graph(graph: OpGraph, data: st.DataObject) -> None:
    assume(graph.edges)
    d = graph.to_document()
    back = data.draw(st.sampled_from(d["edges"]))
    d["edges"].append({"src": back["dst"], "dst": back["src"]})  # closes a cycle through that edge
    cycle = _cycle_of(rejected(d).message)
    edges = {(e["src"], e["dst"]) for e in d["edges"]}
    assert len(cycle) >= 3 and cycle[0] == cycle[-1] and len(set(cycle[:-1])) == len(cycle) - 1
    assert all(pair in edges for pair in itertools.pairwise(cycle))


def test_duplicate_node_id() -> None:
    d = doc()
    d["nodes"].append({"id": "b", "op": "x", "fwd_s": 0})
    err = rejected(d)
    assert err.field == "nodes[3].id" and "duplicate id 'b'" in err.message and "nodes[1]" in err.message


@pytest.mark.parametrize("end", ["src", "dst"])
def test_unknown_edge_end(end: str) -> None:
    d = doc()
    d["edges"][1][end] = "zz"
    err = rejected(d)
    assert err.field == f"edges[1].{end}" and "unknown node 'zz'" in err.message and err.ref == "zz"


def test_self_loop() -> None:
    d = doc()
    d["edges"].append({"src": "b", "dst": "b"})
    err = rejected(d)
    assert err.field == "edges[2]" and "self-loop" in err.message and "'b'" in err.message


def test_duplicate_edge() -> None:
    d = doc()
    d["edges"].append({"src": "a", "dst": "b"})
    err = rejected(d)
    assert err.field == "edges[2]" and "duplicate edge 'a' -> 'b'" in err.message


@pytest.mark.parametrize("field", ["fwd_s", "bwd_s", "param_bytes", "act_bytes", "mem_fwd_bytes", "mem_bwd_bytes"])
@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, -math.inf, "1", True, None])
def test_bad_node_numbers(field: str, value: Any) -> None:
    d = doc()
    d["nodes"][1][field] = value
    err = rejected(d)
    assert err.field is not None and err.field.startswith(f"nodes[1].{field}")
    assert "'b'" in err.message and err.ref == "b"


@pytest.mark.parametrize("value", [-5, math.nan, math.inf, "big"])
def test_bad_edge_bytes(value: Any) -> None:
    d = doc()
    d["edges"][0]["bytes"] = value
    err = rejected(d)
    assert err.field == "edges[0].bytes"


def test_bad_times_override() -> None:
    d = doc()
    d["nodes"][0]["times"] = {"H100": {"fwd_s": -1}}
    assert rejected(d).field == "nodes[0].times.H100.fwd_s"
    d["nodes"][0]["times"] = {"H100": {"fwd_s": 1, "speed": 2}}
    assert rejected(d).field == "nodes[0].times.H100.speed"


def test_times_override_loads() -> None:
    d = doc()
    d["nodes"][0]["times"] = {"H100": {"fwd_s": 0.1, "bwd_s": 0.2}}
    g = graph_from_document(d)
    assert g.nodes[0].times is not None and g.nodes[0].times["H100"].bwd_s == 0.2


@pytest.mark.parametrize(("where", "key"), [("", "nodez"), ("node", "fwd"), ("edge", "size")])
def test_unknown_keys(where: str, key: str) -> None:
    d = doc()
    target = d if where == "" else d["nodes"][0] if where == "node" else d["edges"][0]
    target[key] = 1
    err = rejected(d)
    expected = key if where == "" else f"nodes[0].{key}" if where == "node" else f"edges[0].{key}"
    assert err.field == expected and "unknown field" in err.message


@pytest.mark.parametrize("missing", ["id", "fwd_s"])
def test_missing_node_fields(missing: str) -> None:
    d = doc()
    del d["nodes"][2][missing]
    assert rejected(d).field == f"nodes[2].{missing}"


def test_missing_or_empty_op() -> None:
    d = doc()
    del d["nodes"][0]["op"]
    assert rejected(d).field == "nodes[0].op"


@pytest.mark.parametrize("end", ["src", "dst"])
def test_missing_edge_end(end: str) -> None:
    d = doc()
    del d["edges"][0][end]
    assert rejected(d).field == f"edges[0].{end}"


def test_empty_graph() -> None:
    err = rejected(doc(nodes=[], edges=[]))
    assert err.field == "nodes" and "must not be empty" in err.message
    with pytest.raises(InvalidGraph, match="no nodes"):
        OpGraph.build("g", [], [])


@pytest.mark.parametrize("value", [None, 5, "x", {"a": 1}])
def test_nodes_not_an_array(value: Any) -> None:
    assert rejected(doc(nodes=value)).field == "nodes"


def test_wrong_format_and_non_object() -> None:
    assert rejected(doc(format="placer.opgraph/v2")).field == "format"
    assert rejected([1, 2]).field == ""


@pytest.mark.parametrize("value", [0, -1, 1.5, "4", True])
def test_bad_profiled_batch_size(value: Any) -> None:
    assert rejected(doc(profiled_batch_size=value)).field == "profiled_batch_size"


def test_bad_constant_layer_attrs() -> None:
    for key, value in (("constant", "yes"), ("layer", 3), ("attrs", [1])):
        d = doc()
        d["nodes"][1][key] = value
        assert rejected(d).field == f"nodes[1].{key}"


def test_nodes_with_and_without_attrs_agree() -> None:
    """A node with ``attrs`` gives the same record fields as the same node without them."""
    d = doc()
    g1 = graph_from_document(d)
    d2 = copy.deepcopy(d)
    for n in d2["nodes"]:
        n["attrs"] = {"k": 1}
    g2 = graph_from_document(d2)
    for a, b in zip(g1.nodes, g2.nodes, strict=True):
        assert (a.id, a.op, a.fwd_s, a.bwd_s, a.layer, a.constant) == (b.id, b.op, b.fwd_s, b.bwd_s, b.layer,
                                                                         b.constant)


def test_size_limit_on_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    import solvers.model.graph as graph_module

    monkeypatch.setattr(graph_module, "MAX_GRAPH_NODES", 2)
    err = rejected(doc())
    assert err.field == "nodes" and "exceed the limit" in err.message


def test_build_from_records_checks_structure() -> None:
    nodes = [Node("x", "op", 1.0), Node("y", "op", 1.0)]
    with pytest.raises(InvalidGraph, match="unknown node 'q'"):
        OpGraph.build("g", nodes, [Edge("x", "q")])
    g = OpGraph.build("g", nodes, [Edge("y", "x", 5.0)])
    assert g.topo_order.tolist() == [1, 0] and g.topo_position.tolist() == [1, 0]


def _reference_topo_order(graph: OpGraph) -> list[int]:
    """Kahn's algorithm, ties broken by node position (the documented order)."""
    import heapq

    indeg = [len(p) for p in graph.pred]
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(i)
        for j in graph.succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, j)
    return out


@settings(max_examples=examples(60), deadline=None)
@given(dag_graphs(max_ops=14))
def test_topological_order_is_kahn_by_position(graph: OpGraph) -> None:
    assert graph.topo_order.tolist() == _reference_topo_order(graph)
    doc = graph.to_document()
    # nodes written in topological order: the fast path must give the same order
    order = graph.topo_order.tolist()
    doc["nodes"] = [doc["nodes"][i] for i in order]
    again = graph_from_document(doc)
    assert again.topo_order.tolist() == list(range(graph.n_ops)) == _reference_topo_order(again)


@settings(max_examples=examples(40), deadline=None)
@given(dag_graphs(max_ops=10))
def test_parsing_does_not_depend_on_the_other_nodes(graph: OpGraph) -> None:
    doc = graph.to_document()
    bulk = graph_from_document(doc)
    slow_doc = copy.deepcopy(doc)
    slow_doc["nodes"][0]["attrs"] = {"x": 1}  # one node with attrs leaves every other record as it was
    slow = graph_from_document(slow_doc)
    for a, b in zip(bulk.nodes[1:], slow.nodes[1:], strict=True):
        assert a.to_dict() == b.to_dict()
    assert [e.to_dict() for e in bulk.edges] == [e.to_dict() for e in slow.edges]
    assert bulk.edge_src.tolist() == slow.edge_src.tolist()


def test_integers_load_as_floats() -> None:
    d = doc()
    d["nodes"][0].update(fwd_s=3, param_bytes=10)
    d["edges"][0]["bytes"] = 7
    g = graph_from_document(d)
    assert type(g.nodes[0].fwd_s) is float and g.nodes[0].param_bytes == 10.0
    assert type(g.edges[0].bytes) is float


def test_records_that_are_not_plain_json_take_the_field_checkers() -> None:
    """A ``Mapping`` that is not a ``dict``, or an integer beyond 64 bits, loads as a JSON value would."""
    d = doc()
    d["nodes"][0] = MappingProxyType({"id": "a", "op": "aten.mm", "fwd_s": 1.0, "param_bytes": 2**70})
    d["edges"][0] = MappingProxyType({"src": "a", "dst": "b", "bytes": 2**64})
    g = graph_from_document(d)
    assert g.nodes[0].param_bytes == float(2**70) and g.edges[0].bytes == float(2**64)
    assert g.to_document() == graph_from_document(doc(nodes=[n.to_dict() for n in g.nodes],
                                                       edges=[e.to_dict() for e in g.edges])).to_document()


def test_an_integer_beyond_a_double_names_its_field() -> None:
    d = doc()
    d["nodes"][2]["act_bytes"] = 10**400
    err = rejected(d)
    assert err.field == "nodes[2].act_bytes (node 'c')" and "beyond the range of a double" in err.message
    assert err.ref == "c"


def test_the_first_fault_in_document_order_is_named() -> None:
    d = doc()
    d["nodes"][2]["fwd_s"] = -1.0
    d["nodes"][1]["layer"] = 3
    d["nodes"][1]["bwd_s"] = "slow"
    assert rejected(d).field == "nodes[1].bwd_s (node 'b')"
