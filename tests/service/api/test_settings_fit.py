"""Settings that do not fit the graph and topology, unbounded lists and deeply nested free-form
members are refused at submission with a 422 naming the field; lists carry no settings unless asked."""

from __future__ import annotations

import json
from typing import Any

from solvers.generate import generate_graph, generate_topology
from solvers.model.settings import MAX_MICRO_BATCH_CANDIDATES
from tests.service.conftest import Api, assert_problem

DEEP = "{\"x\": " + "[" * 1000 + "]" * 1000 + "}"  # within the JSON parser's bound (1,024), far beyond the 64 levels allowed
JSON = {"content-type": "application/json"}
# settings -> the field named; the graph has 6 ops, the topology 4 devices
MISFITS: list[tuple[dict[str, Any], str]] = [
    ({"stages": 1_000_000}, "settings.stages"),
    ({"stages": 5}, "settings.stages"),
    ({"replicas": 5}, "settings.replicas"),
    ({"stages": 2, "replicas": 3}, "settings.replicas"),
    ({"pinned": {"nope": 0}}, "settings.pinned.nope"),
    ({"pinned": {"op0": "gpu-nope"}}, "settings.pinned.op0"),
    ({"pinned": {"op0": 4}}, "settings.pinned.op0"),
    ({"stages": 2, "pinned": {"op0": 2}}, "settings.pinned.op0"),
    ({"stage_memory_caps_bytes": {"4": 1e9}}, "settings.stage_memory_caps_bytes.4"),
    ({"micro_batches": list(range(1, MAX_MICRO_BATCH_CANDIDATES + 2))}, "settings.micro_batches"),
]


def _inputs(api: Api) -> tuple[str, str]:
    graph = api.post("/v1/graphs", json=generate_graph("random_dag", n_ops=6, seed=2).to_document())
    topology = api.post("/v1/topologies", json=generate_topology("hierarchical", nodes=1, gpus_per_node=4).to_document())
    assert graph.status_code == topology.status_code == 201
    return graph.json()["id"], topology.json()["id"]


def test_settings_are_checked_against_the_graph_and_topology_at_submission(api: Api) -> None:
    gid, tid = _inputs(api)
    plan = {"format": "placer.plan/v1", "stages": [{"ops": [f"op{i}" for i in range(6)], "devices": ["gpu0"]}]}
    for settings, field in MISFITS:
        for path, body in (("/v1/jobs", {"solver": "even"}), ("/v1/comparisons", {"solvers": ["even", "single"]}),
                           ("/v1/plans:evaluate", {"plan": plan})):
            r = api.post(path, json={"graph_id": gid, "topology_id": tid, "settings": settings, **body})
            assert_problem(r, 422, field=field)
    assert api.get("/v1/jobs").json()["items"] == []  # nothing was stored
    fits = {"stages": 2, "replicas": 2, "pinned": {"op0": 0}, "stage_memory_caps_bytes": {"1": 1e12}}
    assert api.submit(gid, tid, "even", settings=fits)["status"] in ("queued", "running", "succeeded")


def _deep(doc: dict[str, Any], *path: str | int) -> bytes:
    """``doc`` as JSON with the member at ``path`` replaced by a value nested 1,000 levels deep."""
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = "DEEP-HERE"
    return json.dumps(doc).encode().replace(b'"DEEP-HERE"', DEEP.encode())


def test_free_form_members_nested_too_deep_are_refused_naming_them(api: Api) -> None:
    gid, tid = _inputs(api)
    graph = generate_graph("random_dag", n_ops=4, seed=3).to_document()
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=2).to_document()
    plan = {"format": "placer.plan/v1", "stages": [{"ops": [f"op{i}" for i in range(6)], "devices": ["gpu0"]}]}
    cases = [("/v1/graphs", _deep(dict(graph), "attrs"), "attrs"),
             ("/v1/graphs", _deep(json.loads(json.dumps(graph)), "nodes", 0, "attrs"), "nodes[0].attrs"),
             ("/v1/topologies", _deep(dict(topology), "attrs"), "attrs"),
             ("/v1/topologies", _deep(json.loads(json.dumps(topology)), "devices", 1, "attrs"), "devices[1].attrs")]
    for member in ("options", "stats", "metrics", "notes"):
        body = {"graph_id": gid, "topology_id": tid, "plan": json.loads(json.dumps(plan))}
        cases.append(("/v1/plans:evaluate", _deep(body, "plan", member), member))
    for path, raw, field in cases:
        r = api.post(path, content=raw, headers=JSON)
        body = assert_problem(r, 422, field=field)
        assert "nested deeper than 64 levels" in body["detail"]


def test_lists_carry_settings_only_when_asked(api: Api) -> None:
    gid, tid = _inputs(api)
    settings = {"micro_batches": [4, 8], "pinned": {"op1": 0}}
    job = api.submit(gid, tid, "even", settings=settings)
    cmp = api.post("/v1/comparisons", json={"graph_id": gid, "topology_id": tid, "solvers": ["even"],
                                            "settings": settings})
    assert cmp.status_code == 202 and cmp.json()["settings"]["pinned"] == {"op1": 0}
    assert job["settings"]["micro_batches"] == [4, 8] and api.get(f"/v1/jobs/{job['id']}").json()["settings"]
    for path in ("/v1/jobs", "/v1/comparisons"):
        lean, full = api.get(path).json()["items"], api.get(f"{path}?include=settings").json()["items"]
        assert lean and all(item["settings"] is None for item in lean)
        assert full and all(item["settings"]["pinned"] == {"op1": 0} for item in full)
    assert_problem(api.get("/v1/jobs?include=options"), 422, field="include")


def test_evaluate_refuses_replicas_that_do_not_split_the_micro_batch(api: Api) -> None:
    """The random DAG is profiled at one sample: two replicas of a stage would hold half a sample each."""
    gid, tid = _inputs(api)
    stage = {"ops": [f"op{i}" for i in range(6)], "devices": ["gpu0", "gpu1"]}
    plan = {"format": "placer.plan/v1", "stages": [stage]}
    r = api.post("/v1/plans:evaluate", json={"graph_id": gid, "topology_id": tid, "plan": plan})
    body = assert_problem(r, 422, field="stages[0].devices")
    assert "micro-batch of 1 rows does not split evenly over 2 replicas" in body["detail"]
    two_rows = api.post("/v1/graphs", json=generate_graph("random_dag", n_ops=6, seed=2, micro_batch=2).to_document())
    assert two_rows.status_code == 201
    r = api.post("/v1/plans:evaluate", json={"graph_id": two_rows.json()["id"], "topology_id": tid, "plan": plan})
    assert r.status_code == 200, r.text


def test_evaluate_refuses_a_latency_stage_on_several_devices(api: Api) -> None:
    """A latency plan places each op on one device (docs/formats.md): a stage of two replicas is a 422
    naming the stage, even where the batch would split, and the same ops on one device evaluate."""
    two_rows = api.post("/v1/graphs", json=generate_graph("random_dag", n_ops=6, seed=2, micro_batch=2).to_document())
    gid, tid = two_rows.json()["id"], _inputs(api)[1]
    ops = [f"op{i}" for i in range(6)]
    plan = {"format": "placer.plan/v1", "stages": [{"ops": ops, "devices": ["gpu0", "gpu1"]}]}
    r = api.post("/v1/plans:evaluate", json={"graph_id": gid, "topology_id": tid, "objective": "latency", "plan": plan})
    body = assert_problem(r, 422, field="stages[0].devices")
    assert "a latency plan places each op on one device, but stage 0 runs on 2 devices" in body["detail"]
    one = {"format": "placer.plan/v1", "stages": [{"ops": ops, "devices": ["gpu0"]}]}
    r = api.post("/v1/plans:evaluate", json={"graph_id": gid, "topology_id": tid, "objective": "latency", "plan": one})
    assert r.status_code == 200, r.text
    assert r.json()["metrics"]["efficiency"] <= 1.0


def test_a_latency_comparison_refuses_tensor_parallel_members_naming_the_swept_value(api: Api) -> None:
    gid, tid = _inputs(api)
    r = api.post("/v1/comparisons", json={"graph_id": gid, "topology_id": tid, "solvers": ["heft"],
                                          "objective": "latency", "sweep": {"tp": [1, 2]}})
    body = assert_problem(r, 422, field="sweep.tp[1]")
    assert "a latency plan places each op on one device, so tp above 1 applies to the throughput objective" in (
        body["detail"])
