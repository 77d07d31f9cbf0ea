"""Canonical digests, document round-trips, file reading (gzip, limits) and format dispatch."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from solvers.generate import generate_graph, generate_topology
from solvers.model import canonical
from solvers.model.canonical import canonical_json, digest, digest_in_chunks
from solvers.model.documents import (
    document_format,
    load_graph,
    load_plan,
    load_topology,
    parse_document,
    parse_json,
    read_json,
    write_json,
)
from solvers.model.errors import FormatError
from solvers.model.graph import OpGraph, graph_from_document
from solvers.model.plan import Plan, Stage, plan_from_document
from solvers.model.topology import Topology, topology_from_document
from tests.strategies import dag_graphs, examples, full_graphs, json_values, topologies


def test_digest_ignores_key_order_and_whitespace() -> None:
    a = {"format": "x", "nodes": [{"id": "a", "fwd_s": 1.0}], "name": "g"}
    b = json.loads('{ "name" : "g",\n "nodes":[ {"fwd_s":1.0, "id":"a"} ],  "format":"x"}')
    assert digest(a) == digest(b)
    assert digest(a).startswith("sha256:") and len(digest(a)) == 7 + 64
    assert canonical_json(a) == '{"format":"x","name":"g","nodes":[{"fwd_s":1.0,"id":"a"}]}'


def test_digest_changes_with_content_and_list_order() -> None:
    assert digest({"a": [1, 2]}) != digest({"a": [2, 1]})
    assert digest({"a": 1}) != digest({"a": 2})


# random_dag's values come from the C library's exp, the same on every CPU (numpy's SIMD exp differs in
# the last bit with AVX-512 and without, which changed this digest from one machine to the next)
PINNED_RANDOM_DAG_DIGEST = "sha256:a6afe4eaf816cc68c80418c7080ddf5eb640ec01e02ddca356977d03f7ec74d9"


def _whole(fields: dict[str, Any], lists: dict[str, list[Any]]) -> dict[str, Any]:
    return {**fields, **lists}


@settings(max_examples=examples(60))
@given(st.dictionaries(st.text(max_size=4), json_values, max_size=3),
       st.dictionaries(st.text(max_size=4), st.lists(json_values, max_size=7), max_size=2),
       st.integers(1, 4))
@example({"format": "x", "n": 2**70}, {"nodes": [{"id": "a"}]}, 1)  # beyond 64 bits: the whole document's fallback
@example({"name": "g"}, {"edges": [{"src": "a", "dst": "b", "bytes": 1.5}, {2: "non-string key"}]}, 1)
@example({}, {"nodes": [], "edges": [1, 2, 3, 4]}, 2)
def test_digest_in_chunks_equals_the_digest_of_the_whole_document(fields: dict[str, Any],
                                                                   lists: dict[str, list[Any]], chunk: int) -> None:
    lists = {key: items for key, items in lists.items() if key not in fields}
    with mock.patch.object(canonical, "DIGEST_CHUNK_ITEMS", chunk):
        got = digest_in_chunks(fields, {key: (items, lambda x: x) for key, items in lists.items()})
    assert got == digest(_whole(fields, lists))


def test_digest_in_chunks_encodes_each_item_and_refuses_a_key_in_both() -> None:
    got = digest_in_chunks({"name": "g"}, {"nodes": ([1, 2, 3], lambda x: {"id": str(x)})})
    assert got == digest({"name": "g", "nodes": [{"id": "1"}, {"id": "2"}, {"id": "3"}]})
    with pytest.raises(ValueError, match="nodes"):
        digest_in_chunks({"nodes": []}, {"nodes": ([], lambda x: x)})


@settings(max_examples=examples(40))
@given(full_graphs(), st.integers(1, 3))
def test_graph_digest_is_that_of_its_document(graph: OpGraph, chunk: int) -> None:
    with mock.patch.object(canonical, "DIGEST_CHUNK_ITEMS", chunk):
        assert graph.digest == digest(graph.to_document())


def test_graph_digest_of_a_generated_graph_is_pinned() -> None:
    """The value documents store: taken with the whole document serialised at once, before the
    digest was computed a chunk at a time."""
    graph = generate_graph("random_dag", n_ops=3000, seed=3)
    assert graph.digest == digest(graph.to_document())
    assert graph.digest == PINNED_RANDOM_DAG_DIGEST


def test_digest_is_stable_across_a_file_round_trip(tmp_path: Path) -> None:
    g = generate_graph("transformer", layers=2, hidden=64, heads=2, seq_len=8, vocab=10)
    write_json(g.to_document(), tmp_path / "g.json")
    assert load_graph(tmp_path / "g.json").digest == g.digest
    # reformat the file: different whitespace and key order, same digest
    raw = json.loads((tmp_path / "g.json").read_text())
    (tmp_path / "g2.json").write_text(json.dumps(raw, sort_keys=True, indent=4))
    assert load_graph(tmp_path / "g2.json").digest == g.digest


@settings(max_examples=examples(40), deadline=None)
@given(dag_graphs(max_ops=12))
def test_graph_document_round_trip(graph: OpGraph) -> None:
    doc = graph.to_document()
    again = graph_from_document(json.loads(json.dumps(doc)))
    assert again.to_document() == doc and again.digest == graph.digest
    assert again.topo_order.tolist() == graph.topo_order.tolist()


@settings(max_examples=examples(30), deadline=None)
@given(topologies(max_devices=6))
def test_topology_document_round_trip(topo: Topology) -> None:
    doc = topo.to_document()
    again = topology_from_document(json.loads(json.dumps(doc)))
    assert again.to_document() == doc
    assert (again.bandwidth_Bps == topo.bandwidth_Bps).all()


def test_matrix_topology_round_trip() -> None:
    topo = generate_topology("moirai_inter")
    again = topology_from_document(json.loads(json.dumps(topo.to_document())))
    assert again.digest == topo.digest
    assert (again.direct_bandwidth_Bps == topo.direct_bandwidth_Bps).all()


def test_plan_document_round_trip() -> None:
    plan = Plan(stages=(Stage(("a", "b"), ("g0",)), Stage(("c",), ("g1", "g2"))), micro_batches=4,
                schedule="gpipe", solver="even", status="feasible", order={"g0": ("a", "b")},
                claimed_objective_s=1.5, stats={"states": 3}, notes=("n",))
    doc = plan.to_document()
    assert plan_from_document(json.loads(json.dumps(doc))).to_document() == doc


def test_gzip_files_are_read(tmp_path: Path) -> None:
    topo = generate_topology("hierarchical", nodes=2, gpus_per_node=2)
    write_json(topo.to_document(), tmp_path / "t.json.gz")
    assert (tmp_path / "t.json.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert load_topology(tmp_path / "t.json.gz").digest == topo.digest
    (tmp_path / "plain-name.json").write_bytes(gzip.compress(json.dumps(topo.to_document()).encode()))
    assert load_topology(tmp_path / "plain-name.json").digest == topo.digest


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="cannot read"):
        read_json(tmp_path / "missing.json")
    (tmp_path / "bad.gz").write_bytes(gzip.compress(b"{}")[:-8] + bytes(8))  # wrong CRC
    with pytest.raises(FormatError, match="invalid gzip"):
        read_json(tmp_path / "bad.gz")
    (tmp_path / "bad.json").write_text('{"a": 1,\n "b": }')
    with pytest.raises(FormatError, match="line 2 column"):
        read_json(tmp_path / "bad.json")
    (tmp_path / "empty.json").write_text("  \n")
    with pytest.raises(FormatError, match="empty"):
        read_json(tmp_path / "empty.json")
    (tmp_path / "big.json").write_text("[" + "1," * 100 + "1]")
    with pytest.raises(FormatError, match="larger than the limit"):
        read_json(tmp_path / "big.json", max_bytes=50)
    with pytest.raises(FormatError, match="not UTF-8"):
        parse_json(b'{"a": "\xff"}')


def test_unknown_format_lists_the_known_ones() -> None:
    with pytest.raises(FormatError) as info:
        document_format({"format": "placer.model/v9"})
    assert "placer.opgraph/v1" in info.value.message and info.value.field == "format"
    with pytest.raises(FormatError):
        document_format([1])
    with pytest.raises(FormatError):
        parse_document({"nodes": []})


def test_dispatch_on_format(tmp_path: Path) -> None:
    g = generate_graph("random_dag", n_ops=20)
    t = generate_topology("dgx1", boxes=1)
    p = Plan(stages=(Stage(tuple(g.ids), ("gpu0",)),))
    assert isinstance(parse_document(g.to_document()), OpGraph)
    assert isinstance(parse_document(t.to_document()), Topology)
    assert isinstance(parse_document(p.to_document()), Plan)
    spec = {"format": "placer.problem/v1", "objective": "latency"}
    assert parse_document(spec) == spec
    write_json(p.to_document(), tmp_path / "p.json")
    assert load_plan(tmp_path / "p.json").stages == p.stages


def test_truncated_gzip_is_a_format_error(tmp_path: Path) -> None:
    import gzip as _gzip

    from solvers.model.documents import read_json
    from solvers.model.errors import FormatError

    path = tmp_path / "cut.json.gz"
    path.write_bytes(_gzip.compress(b'{"format": "placer.opgraph/v1"}')[:-12])
    with pytest.raises(FormatError, match="gzip"):
        read_json(path)


def test_gzip_that_expands_past_the_limit_is_refused(tmp_path: Path) -> None:
    import gzip as _gzip

    from solvers.model.documents import read_json
    from solvers.model.errors import FormatError

    path = tmp_path / "bomb.json.gz"
    path.write_bytes(_gzip.compress(b" " * 2_000_000))
    with pytest.raises(FormatError, match="larger than the limit"):
        read_json(path, max_bytes=1_000_000)
    plain = tmp_path / "big.json"
    plain.write_bytes(b" " * 2_000_000)
    with pytest.raises(FormatError, match="larger than the limit"):
        read_json(plain, max_bytes=1_000_000)


def test_canonical_form_handles_integers_beyond_64_bits() -> None:
    big = {"options": {"n": 2**70}, "a": 1}
    assert canonical_json(big) == '{"a":1,"options":{"n":1180591620717411303424}}'
    assert digest(big) == digest({"a": 1, "options": {"n": 2**70}})
