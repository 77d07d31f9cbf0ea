"""Topology rejections (DESIGN §3) and widest-path routing."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from solvers.model.errors import InvalidTopology
from solvers.model.topology import TOPOLOGY_FORMAT, topology_from_document


def links_doc(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "format": TOPOLOGY_FORMAT, "name": "t",
        "devices": [{"id": "g0", "memory_bytes": 1e9}, {"id": "g1", "memory_bytes": 1e9, "speed": 2.0},
                    {"id": "g2", "memory_bytes": 2e9, "kind": "H100", "node": "h1"}],
        "links": [{"src": "g0", "dst": "g1", "bandwidth_Bps": 1e9, "latency_s": 1e-6},
                  {"src": "g1", "dst": "g2", "bandwidth_Bps": 5e8, "latency_s": 2e-6}],
    }
    base.update(extra)
    return base


def matrix_doc(bw: Any, lat: Any = None) -> dict[str, Any]:
    d = links_doc()
    del d["links"]
    d["bandwidth_Bps"] = bw
    if lat is not None:
        d["latency_s"] = lat
    return d


def rejected(document: Any) -> InvalidTopology:
    with pytest.raises(InvalidTopology) as info:
        topology_from_document(document)
    return info.value


def test_links_load_with_defaults_and_route_over_widest_path() -> None:
    t = topology_from_document(links_doc())
    assert [d.kind for d in t.devices] == ["GPU", "GPU", "H100"] and t.hosts == ["node0", "h1"]
    assert t.speed.tolist() == [1.0, 2.0, 1.0]
    assert t.bandwidth_Bps[0, 2] == 5e8  # bottleneck of g0 -> g1 -> g2
    assert t.latency_s[0, 2] == pytest.approx(3e-6)  # summed latency
    assert math.isinf(t.bandwidth_Bps[1, 1]) and t.latency_s[1, 1] == 0


def test_one_way_link_gives_asymmetric_direct_matrix() -> None:
    d = links_doc()
    d["links"].append({"src": "g2", "dst": "g0", "bandwidth_Bps": 7e9, "bidirectional": False})
    t = topology_from_document(d)
    assert t.direct_bandwidth_Bps[2, 0] == 7e9 and t.direct_bandwidth_Bps[0, 2] == 0


def test_matrices_load_asymmetric() -> None:
    bw = [[0, 1e9, 2e9], [3e9, 0, 1e9], [1e9, 1e9, 0]]
    t = topology_from_document(matrix_doc(bw, [[0, 1e-6, 1e-6]] * 3))
    assert t.direct_bandwidth_Bps[0, 1] == 1e9 and t.direct_bandwidth_Bps[1, 0] == 3e9
    assert t.links is None and "bandwidth_Bps" in t.to_document()


def test_disconnected_topology_names_the_devices() -> None:
    d = links_doc()
    d["links"] = d["links"][:1]
    err = rejected(d)
    assert "disconnected" in err.message and "'g2'" in err.message


def test_disconnected_matrix() -> None:
    err = rejected(matrix_doc([[0, 1, 0], [1, 0, 0], [0, 0, 0]]))
    assert "disconnected" in err.message


def test_one_way_only_is_disconnected() -> None:
    d = links_doc()
    d["links"] = [{"src": "g0", "dst": "g1", "bandwidth_Bps": 1e9, "bidirectional": False},
                  {"src": "g1", "dst": "g2", "bandwidth_Bps": 1e9}]
    assert "cannot reach" in rejected(d).message


def test_single_device_needs_no_links() -> None:
    d = links_doc(devices=[{"id": "solo", "memory_bytes": 1.0}], links=[])
    assert topology_from_document(d).n_devices == 1


@pytest.mark.parametrize(("bw", "field"), [
    ([[0, 1], [1, 0]], "bandwidth_Bps"),
    ([[0, 1, 1], [1, 0], [1, 1, 0]], "bandwidth_Bps[1]"),
    ([[0, 1, 1], [1, 0, -1], [1, 1, 0]], "bandwidth_Bps[1][2]"),
    ([[0, 1, 1], [1, 0, math.nan], [1, 1, 0]], "bandwidth_Bps[1][2]"),
    ("dense", "bandwidth_Bps"),
])
def test_matrix_of_the_wrong_shape_or_values(bw: Any, field: str) -> None:
    assert rejected(matrix_doc(bw)).field == field


def test_latency_matrix_shape_and_needs_bandwidth() -> None:
    ones = [[0, 1, 1], [1, 0, 1], [1, 1, 0]]
    assert rejected(matrix_doc(ones, [[0, 0], [0, 0]])).field == "latency_s"
    d = links_doc()
    d["latency_s"] = ones
    del d["links"]
    assert rejected(d).field == "latency_s"


def test_links_and_matrix_together() -> None:
    d = links_doc()
    d["bandwidth_Bps"] = [[0, 1, 1], [1, 0, 1], [1, 1, 0]]
    assert "either links or" in rejected(d).message


def test_duplicate_device_and_unknown_link_end_and_self_link() -> None:
    d = links_doc()
    d["devices"].append({"id": "g1", "memory_bytes": 1})
    err = rejected(d)
    assert err.field == "devices[3].id" and "duplicate id 'g1'" in err.message
    d = links_doc()
    d["links"][0]["dst"] = "nope"
    err = rejected(d)
    assert err.field == "links[0].dst" and err.ref == "nope"
    d = links_doc()
    d["links"].append({"src": "g2", "dst": "g2", "bandwidth_Bps": 1.0})
    assert rejected(d).field == "links[2]"


def test_second_link_between_the_same_pair() -> None:
    d = links_doc()
    d["links"].append({"src": "g1", "dst": "g0", "bandwidth_Bps": 1.0})
    err = rejected(d)
    assert err.field == "links[2]" and "a second link" in err.message


@pytest.mark.parametrize(("field", "value"), [("memory_bytes", -1), ("memory_bytes", math.inf), ("speed", 0),
                                              ("speed", -2), ("speed", "fast"), ("kind", ""), ("node", 7),
                                              ("base_memory_bytes", -1), ("base_memory_bytes", math.nan)])
def test_bad_device_fields(field: str, value: Any) -> None:
    d = links_doc()
    d["devices"][1][field] = value
    err = rejected(d)
    assert err.field == f"devices[1].{field}"


def test_base_memory_round_trips_and_may_not_exceed_the_memory() -> None:
    d = links_doc()
    d["devices"][1]["base_memory_bytes"] = 3e8
    topo = topology_from_document(d)
    assert topo.devices[1].base_memory_bytes == 3e8 and topo.devices[0].base_memory_bytes == 0.0
    assert topo.to_document()["devices"][1]["base_memory_bytes"] == 3e8
    assert "base_memory_bytes" not in topo.to_document()["devices"][0]  # the default leaves digests as they were
    d["devices"][1]["base_memory_bytes"] = d["devices"][1]["memory_bytes"] * 2
    err = rejected(d)
    assert err.field is not None and err.field.endswith("base_memory_bytes") and "exceeds" in err.message


@pytest.mark.parametrize(("field", "value"), [("bandwidth_Bps", 0), ("bandwidth_Bps", -1), ("latency_s", -1),
                                              ("latency_s", math.nan), ("bidirectional", "yes")])
def test_bad_link_fields(field: str, value: Any) -> None:
    d = links_doc()
    d["links"][0][field] = value
    assert rejected(d).field == f"links[0].{field}"


@pytest.mark.parametrize("where", ["", "device", "link"])
def test_unknown_keys(where: str) -> None:
    d = links_doc()
    target = d if where == "" else d["devices"][0] if where == "device" else d["links"][0]
    target["colour"] = "red"
    err = rejected(d)
    assert err.field is not None and err.field.endswith("colour") and "unknown field" in err.message


def test_missing_fields_and_empty() -> None:
    d = links_doc()
    del d["devices"][0]["memory_bytes"]
    assert rejected(d).field == "devices[0].memory_bytes"
    d = links_doc()
    del d["links"][0]["bandwidth_Bps"]
    assert rejected(d).field == "links[0].bandwidth_Bps"
    assert rejected(links_doc(devices=[], links=[])).field == "devices"
    assert rejected(links_doc(format="placer.topo/v1")).field == "format"


def test_routes_are_symmetric_for_symmetric_links() -> None:
    t = topology_from_document(links_doc())
    assert np.array_equal(t.bandwidth_Bps, t.bandwidth_Bps.T)


def test_a_direct_link_is_used_even_when_a_wider_detour_exists() -> None:
    doc = links_doc()
    doc["links"].append({"src": "g0", "dst": "g2", "bandwidth_Bps": 1e8, "latency_s": 9e-6})
    doc["links"][1]["bandwidth_Bps"] = 2e9  # g0 -> g1 -> g2 would give 1e9
    t = topology_from_document(doc)
    assert t.bandwidth_Bps[0, 2] == 1e8 and t.latency_s[0, 2] == pytest.approx(9e-6)
    assert t.bandwidth_Bps[2, 0] == 1e8
