"""The bad-input catalogue: hostile strings, numbers and nesting answer 4xx naming what is wrong,
the same on SQLite and PostgreSQL, never 500."""

from __future__ import annotations

import json
from typing import Any

import pytest

from solvers.generate import generate_graph
from tests.service.conftest import Api, assert_problem

DEEP = b"[" * 100_000 + b"]" * 100_000


def _graph_with(**node: Any) -> bytes:
    doc = generate_graph("random_dag", n_ops=4, seed=3).to_document()
    doc["nodes"][0].update(node)
    return json.dumps(doc).encode()


def _deep_attrs() -> bytes:
    doc = generate_graph("random_dag", n_ops=4, seed=3).to_document()
    doc["nodes"][0]["attrs"] = {"x": 0}
    return json.dumps(doc).encode().replace(b'{"x": 0}', b'{"x": ' + DEEP + b"}")


def _huge_number(key: str) -> bytes:
    doc = generate_graph("random_dag", n_ops=4, seed=3).to_document()
    doc["nodes"][0][key] = 7
    return json.dumps(doc).encode().replace(f'"{key}": 7'.encode(), f'"{key}": 1{"0" * 5000}'.encode())


JSON = {"content-type": "application/json"}
# (method, path, body, headers, status, field, slug); "{g}" / "{t}" are replaced by real ids
CATALOGUE: list[tuple[str, str, bytes | None, dict[str, str], int, str | None, str | None]] = [
    ("GET", "/v1/jobs?solver=a%00b", None, {}, 422, "solver", None),
    ("GET", "/v1/graphs?name=a%00b", None, {}, 422, "name", None),
    ("GET", "/v1/jobs?cursor=%00", None, {}, 422, "cursor", None),
    ("GET", "/v1/comparisons?graph_id=%00", None, {}, 422, "graph_id", None),
    ("GET", "/v1/graphs/g_%00x", None, {}, 404, None, "not-found"),
    ("GET", "/v1/jobs/job_%00x", None, {}, 404, None, "not-found"),
    ("GET", "/v1/plans/plan_%00x", None, {}, 404, None, "not-found"),
    ("POST", "/v1/jobs", b'{"graph_id": "g\\u0000", "topology_id": "{t}", "solver": "even"}', JSON, 422,
     "graph_id", None),
    ("POST", "/v1/jobs", b'{"graph_id": "{g}", "topology_id": "{t}", "solver": "ev\\ud800en"}', JSON, 422,
     "solver", None),
    ("POST", "/v1/plans:evaluate", b'{"graph_id": "g\\u0000", "topology_id": "{t}", "plan": {}}', JSON, 422,
     "graph_id", None),
    ("POST", "/v1/graphs", _graph_with(name="a\x00b"), JSON, 422, "nodes[0].name", None),
    ("POST", "/v1/graphs?format=piper&name=a%00b", b"{}", JSON, 422, "name", None),
    ("GET", "/v1/topologies?min_devices=9223372036854775808", None, {}, 422, "min_devices", "invalid-request"),
    ("GET", "/v1/topologies?min_devices=2147483648", None, {}, 422, "min_devices", "invalid-request"),
    ("POST", "/v1/graphs", _huge_number("fwd_s"), JSON, 422, "nodes[0].fwd_s (node 'op0')", "invalid-graph"),
    ("POST", "/v1/graphs", _huge_number("param_bytes"), JSON, 422, "nodes[0].param_bytes (node 'op0')",
     "invalid-graph"),
    ("POST", "/v1/jobs", b'{"graph_id": "{g}", "topology_id": "{t}", "solver": "even", "settings": {"seed": 1'
     + b"0" * 5000 + b"}}", JSON, 422, "settings.seed", None),
    ("POST", "/v1/graphs", DEEP, JSON, 400, "body", "malformed-body"),
    ("POST", "/v1/topologies", DEEP, JSON, 400, "body", "malformed-body"),
    ("POST", "/v1/jobs", DEEP, JSON, 400, "body", "malformed-body"),
    ("POST", "/v1/graphs", _deep_attrs(), JSON, 400, "body", "malformed-body"),
    ("POST", "/v1/graphs", b'{"format": ', JSON, 400, "body", "malformed-body"),
    ("POST", "/v1/topologies", b"not json", JSON, 400, "body", "malformed-body"),
    ("POST", "/v1/jobs", b'{"graph_id": "x", "solver": ', JSON, 400, "body", "malformed-body"),
    ("POST", "/v1/topologies:generate", b'{"kind": "mesh2d", "params": {"nx": 100000, "ny": 100000}}', JSON, 422,
     "nx", "invalid-input"),
    ("POST", "/v1/topologies:generate", b'{"kind": "torus3d", "params": {"nx": 16, "ny": 16, "nz": 16}}', JSON, 422,
     "nx", "invalid-input"),
    ("POST", "/v1/topologies:generate", b'{"kind": "hierarchical", "params": {"nodes": 1000000000000}}', JSON, 422,
     "nodes", "invalid-input"),
    ("POST", "/v1/topologies:generate", b'{"kind": "hierarchical", "params": {"gpus_per_node": "4096"}}', JSON, 422,
     "gpus_per_node", "invalid-input"),
    ("POST", "/v1/topologies:generate", b'{"kind": "dgx1", "params": {"boxes": 65}}', JSON, 422, "boxes",
     "invalid-input"),
    ("POST", "/v1/topologies:generate", b'{"kind": "uniform_dist", "params": {"devices": 513}}', JSON, 422,
     "devices", "invalid-input"),
    ("POST", "/v1/topologies:generate", b'{"kind": "random_blk_1", "params": {"devices": 99999999, "nodes": 2}}',
     JSON, 422, "devices", "invalid-input"),
]


@pytest.mark.parametrize(("method", "path", "body", "headers", "status", "field", "slug"), CATALOGUE,
                         ids=[f"{c[0]} {c[1][:40]} {i}" for i, c in enumerate(CATALOGUE)])
def test_bad_input_is_named_never_a_500(api: Api, method: str, path: str, body: bytes | None,
                                        headers: dict[str, str], status: int, field: str | None,
                                        slug: str | None) -> None:
    gid, tid = api.graph(), api.topology()
    if body is not None:
        body = body.replace(b"{g}", gid.encode()).replace(b"{t}", tid.encode())
    r = api.request(method, path, content=body, headers=headers)
    assert_problem(r, status, field=field, slug=slug)
