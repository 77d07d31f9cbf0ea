"""The column-wise graph loader gives the records and arrays the per-record parser gives, and the
text check skipped for documents without a ``\\u0000`` escape still refuses every NUL."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from solvers.model.documents import parse_json
from solvers.model.errors import InvalidGraph, InvalidInput
from solvers.model.graph import GRAPH_FORMAT, graph_from_document
from solvers.model.graph_records import parse_columns, parse_edges, parse_nodes

_NUMBERS = ("fwd_s", "bwd_s", "param_bytes", "act_bytes", "mem_fwd_bytes", "mem_bwd_bytes")


def _uneven_doc() -> dict[str, Any]:
    """Records with different fields, integers (one beyond 64 bits), -0.0, times and attrs."""
    return {
        "format": GRAPH_FORMAT, "name": "g",
        "nodes": [
            {"id": "a", "op": "aten.mm", "fwd_s": 1, "bwd_s": 2.5, "param_bytes": 2**70, "layer": "l0",
             "bwd_input_s": 1, "bwd_weight_s": 1.5,
             "times": {"v100": {"fwd_s": 2.0, "bwd_s": 3}}},
            {"id": "b", "op": "aten.relu", "fwd_s": -0.0, "constant": True, "attrs": {"k": [1, {"x": None}]}},
            {"id": "c", "op": "aten.add", "fwd_s": 0.25, "act_bytes": 9007199254740993, "layer": ""},
        ],
        "edges": [{"src": "a", "dst": "b"}, {"src": "b", "dst": "c", "bytes": 20}, {"dst": "c", "src": "a",
                                                                                   "bytes": 1.5}],
    }


def _uniform_doc() -> dict[str, Any]:
    """Every record with the same fields (as a written document has them)."""
    nodes = [{"id": f"n{i}", "op": "aten.mm", "fwd_s": 0.5 * i, "bwd_s": i, "param_bytes": 0.0, "act_bytes": 1.0,
              "mem_fwd_bytes": 2.0, "mem_bwd_bytes": 3, "constant": i == 1, "layer": None,
              "bwd_input_s": 0.5 * i, "bwd_weight_s": i // 2} for i in range(4)]
    edges = [{"src": f"n{i}", "dst": f"n{i + 1}", "bytes": float(i)} for i in range(3)]
    return {"format": GRAPH_FORMAT, "name": "u", "nodes": nodes, "edges": edges}


@pytest.mark.parametrize("make", [_uneven_doc, _uniform_doc])
def test_columns_equal_the_per_record_parse(make: Any) -> None:
    doc = make()
    columns = parse_columns(doc["nodes"], doc["edges"])
    assert columns.nodes == parse_nodes(doc["nodes"])
    assert columns.edges == parse_edges(doc["edges"])
    graph = graph_from_document(doc)
    for key in _NUMBERS:
        expected = [float(getattr(n, key)) for n in parse_nodes(doc["nodes"])]
        assert getattr(graph, key).tolist() == expected
        assert np.signbit(getattr(graph, key)).tolist() == np.signbit(expected).tolist()
    assert graph.edge_bytes.tolist() == [e.bytes for e in parse_edges(doc["edges"])]
    assert graph.ids == [n["id"] for n in doc["nodes"]]


def test_uneven_records_keep_their_values() -> None:
    graph = graph_from_document(_uneven_doc())
    assert graph.nodes[0].param_bytes == float(2**70)
    assert graph.nodes[0].times is not None and graph.nodes[0].times["v100"].bwd_s == 3.0
    assert type(graph.nodes[0].bwd_input_s) is float and graph.nodes[0].bwd_weight_s == 1.5
    assert np.isnan(graph.bwd_weight_s[1:]).all() and graph.nodes[1].bwd_input_s is None
    assert graph.nodes[1].attrs == {"k": [1, {"x": None}]} and graph.nodes[1].constant is True
    assert graph.nodes[2].act_bytes == float(9007199254740993) and graph.nodes[2].layer == ""
    assert [e.bytes for e in graph.edges] == [0.0, 20.0, 1.5]


@pytest.mark.parametrize(("node", "message"), [
    ({"fwd_s": True}, "nodes[1].fwd_s (node 'n1'): must be a number, got bool"),
    ({"fwd_s": float("nan")}, "nodes[1].fwd_s (node 'n1'): must be finite, got nan"),
    ({"act_bytes": -1}, "nodes[1].act_bytes (node 'n1'): must be >= 0, got -1"),
    ({"param_bytes": 10**400}, "nodes[1].param_bytes (node 'n1'): must be finite, got an integer beyond the range"
                               " of a double"),
    ({"constant": 1}, "nodes[1].constant: must be true or false, got 1"),
    ({"shape": [1]}, "nodes[1].shape: unknown field"),
    ({"times": {"v100": {"fwd_s": "x"}}}, "nodes[1].times.v100.fwd_s: must be a number, got str"),
    ({"bwd_weight_s": None}, "nodes[1].bwd_weight_s: node 'n1': must be given with bwd_input_s (both or neither)"),
    ({"bwd_input_s": -1, "bwd_weight_s": 1.0}, "nodes[1].bwd_input_s (node 'n1'): must be >= 0, got -1"),
    ({"bwd_s": 1.0, "bwd_input_s": 0, "bwd_weight_s": 0.0},
     "nodes[1].bwd_weight_s: node 'n1': bwd_input_s + bwd_weight_s must be > 0 where bwd_s > 0"),
])
def test_a_fault_among_uniform_records_is_named_as_before(node: dict[str, Any], message: str) -> None:
    doc = _uniform_doc()
    doc["nodes"][1].update(node)
    doc["nodes"][3]["fwd_s"] = "late"  # a later fault: the first in document order is named
    with pytest.raises(InvalidGraph) as info:
        graph_from_document(doc)
    assert str(info.value).startswith(message)
    assert info.value.field == message.split(":")[0]


def test_nul_escapes_are_refused_and_escaped_backslashes_are_not() -> None:
    for raw in (b'{"a": ["x", "y\\u0000"]}', '{"a": ["x", "y\\u0000"]}'):
        with pytest.raises(InvalidInput, match=r"^a\[1\]: contains a NUL character"):
            parse_json(raw)
    with pytest.raises(InvalidInput, match=r"contains a NUL character") as info:
        parse_json(b'{"k\\u0000": 1}')
    assert "the key" in str(info.value)
    assert parse_json(b'{"a": "\\\\u0000"}') == {"a": "\\u0000"}  # a backslash, then the text u0000
    with pytest.raises(InvalidInput, match=r"^a: contains an unpaired UTF-16 surrogate"):
        parse_json(b'{"a": "\\ud800"}')
    assert parse_json(orjson.dumps({"a": "\u00e9\u4e2d"})) == {"a": "\u00e9\u4e2d"}
