"""``/v1/calibrations`` and a topology's attached calibration: stored once, project-scoped, checked against
the topology's device kinds, simulated with by jobs, comparisons and evaluations, part of the plan cache's key
(on SQLite and PostgreSQL)."""

from __future__ import annotations

import copy
from typing import Any

from solvers.calibration import calibration_from_document
from tests.calibration_docs import calibration_doc
from tests.service.conftest import Api, assert_problem

SETTINGS = {"stages": 2, "micro_batches": 2}


def upload(api: Api, doc: dict[str, Any]) -> dict[str, Any]:
    r = api.post("/v1/calibrations", json=doc)
    assert r.status_code == 201, r.text
    return dict(r.json())


def test_upload_dedupe_list_read_back_and_project_scope(api: Api, other_api: Api) -> None:
    doc = calibration_doc()
    r = api.post("/v1/calibrations", json=doc)
    assert r.status_code == 201, r.text
    cal = r.json()
    assert r.headers["Location"] == f"/v1/calibrations/{cal['id']}" and "Placer-Deduplicated" not in r.headers
    assert cal["digest"] == calibration_from_document(doc).digest and cal["device_kinds"] == ["H100"]
    assert cal["name"] == "slow-h100"
    again = api.post("/v1/calibrations", json=doc)
    assert again.status_code == 201 and again.json()["id"] == cal["id"] and again.headers["Placer-Deduplicated"]
    refit = upload(api, {**doc, "fit": {"runs": ["sha256:other"]}})  # the same parameters, another fit
    assert refit["id"] != cal["id"] and refit["digest"] == cal["digest"]
    page = api.get("/v1/calibrations", params={"limit": 1}).json()
    assert [c["id"] for c in page["items"]] == [refit["id"]] and page["next_cursor"]
    rest = api.get("/v1/calibrations", params={"cursor": page["next_cursor"]}).json()
    assert [c["id"] for c in rest["items"]] == [cal["id"]] and "body" not in rest["items"][0]
    assert api.get(f"/v1/calibrations/{cal['id']}").json() == cal
    assert calibration_from_document(api.get(f"/v1/calibrations/{cal['id']}/document").json()).digest == cal["digest"]
    assert other_api.get("/v1/calibrations").json()["items"] == []
    for path in (f"/v1/calibrations/{cal['id']}", f"/v1/calibrations/{cal['id']}/document"):
        assert_problem(other_api.get(path), 404, field="id")
    assert_problem(other_api.delete(f"/v1/calibrations/{cal['id']}"), 404, field="id")
    assert api.delete(f"/v1/calibrations/{refit['id']}").status_code == 204
    assert_problem(api.get(f"/v1/calibrations/{refit['id']}"), 404)


def test_a_bad_calibration_is_422_naming_the_field(api: Api) -> None:
    doc = calibration_doc()
    assert_problem(api.post("/v1/calibrations", json={**doc, "format": "placer.calibration/v2"}), 422, field="format")
    bad = copy.deepcopy(doc)
    bad["devices"]["H100"]["scale"]["matmul"] = -1
    assert_problem(api.post("/v1/calibrations", json=bad), 422, field="devices.H100.scale.matmul")
    assert_problem(api.post("/v1/calibrations", json={**doc, "collective_efficiency": 0}), 422,
                   field="collective_efficiency")
    assert_problem(api.post("/v1/calibrations", content=b"{nope", headers={"Content-Type": "application/json"}),
                   400, field="body")
    assert api.get("/v1/calibrations").json()["items"] == []


def test_attach_checks_the_device_kinds_and_delete_waits_for_detach(api: Api, other_api: Api) -> None:
    topology_id = api.topology()
    a100 = upload(api, calibration_doc(kind="A100", name="a100"))
    body = assert_problem(api.request("PUT", f"/v1/topologies/{topology_id}/calibration",
                                      json={"calibration_id": a100["id"]}), 422, field="calibration_id")
    assert body["ref"] == "H100" and "A100" in body["detail"]
    huge = calibration_doc()
    huge["memory"]["process_bytes"] = 1e18
    body = assert_problem(api.request("PUT", f"/v1/topologies/{topology_id}/calibration",
                                      json={"calibration_id": upload(api, huge)["id"]}), 422, field="calibration_id")
    assert "memory.process_bytes" in body["detail"]
    cal = upload(api, calibration_doc())
    foreign = upload(other_api, calibration_doc())
    assert_problem(api.request("PUT", f"/v1/topologies/{topology_id}/calibration",
                               json={"calibration_id": foreign["id"]}), 404, field="calibration_id")
    r = api.request("PUT", f"/v1/topologies/{topology_id}/calibration", json={"calibration_id": cal["id"]})
    assert r.status_code == 200, r.text
    assert r.json()["calibration_id"] == cal["id"]
    assert api.get(f"/v1/topologies/{topology_id}").json()["calibration_id"] == cal["id"]
    assert_problem(api.delete(f"/v1/calibrations/{cal['id']}"), 409, field="id")
    detached = api.delete(f"/v1/topologies/{topology_id}/calibration")
    assert detached.status_code == 200 and detached.json()["calibration_id"] is None
    assert api.delete(f"/v1/calibrations/{cal['id']}").status_code == 204


def test_jobs_simulate_with_the_attached_calibration_and_never_share_a_cached_plan(api: Api) -> None:
    graph_id, topology_id = api.graph(n_ops=12), api.topology()
    cal = upload(api, calibration_doc())
    plain = api.wait(api.submit(graph_id, topology_id, settings=SETTINGS)["id"])
    assert plain["status"] == "succeeded" and plain["calibration_id"] is None
    api.request("PUT", f"/v1/topologies/{topology_id}/calibration", json={"calibration_id": cal["id"]})
    job = api.wait(api.submit(graph_id, topology_id, settings=SETTINGS)["id"])
    assert job["status"] == "succeeded", job
    assert job["calibration_id"] == cal["id"] and not job["cached"]  # not the uncalibrated plan from the cache
    metrics = api.get(f"/v1/plans/{job['plan_id']}").json()["metrics"]
    before = api.get(f"/v1/plans/{plain['plan_id']}").json()["metrics"]
    assert metrics["calibration"] == cal["digest"] and before["calibration"] is None
    assert metrics["iteration_s"] > 2 * before["iteration_s"]  # every op three times slower, transfers unchanged
    again = api.wait(api.submit(graph_id, topology_id, settings=SETTINGS)["id"])
    assert again["cached"] and again["plan_id"] == job["plan_id"]
    none = api.wait(api.submit(graph_id, topology_id, settings=SETTINGS, calibration="none")["id"])
    assert none["cached"] and none["plan_id"] == plain["plan_id"] and none["calibration_id"] is None
    other = upload(api, calibration_doc(scale=2.0, name="other"))
    explicit = api.wait(api.submit(graph_id, topology_id, settings=SETTINGS, calibration=other["id"])["id"])
    assert explicit["calibration_id"] == other["id"] and not explicit["cached"]
    assert api.get(f"/v1/plans/{explicit['plan_id']}").json()["metrics"]["calibration"] == other["digest"]
    assert_problem(api.post("/v1/jobs", json={"graph_id": graph_id, "topology_id": topology_id, "solver": "even",
                                              "calibration": "cal_missing"}), 404, field="calibration")


def test_evaluations_and_comparisons_simulate_with_it(api: Api) -> None:
    graph_id, topology_id = api.graph(n_ops=12), api.topology()
    cal = upload(api, calibration_doc())
    job = api.wait(api.submit(graph_id, topology_id, settings=SETTINGS, calibration="none")["id"])
    plan = api.get(f"/v1/plans/{job['plan_id']}").json()
    body = {"graph_id": graph_id, "topology_id": topology_id, "settings": SETTINGS, "plan": plan}
    plain = api.post("/v1/plans:evaluate", json=body).json()
    assert plain["calibration_id"] is None and plain["metrics"]["calibration"] is None
    explicit = api.post("/v1/plans:evaluate", json={**body, "calibration": cal["id"]}).json()
    assert explicit["calibration_id"] == cal["id"] and explicit["metrics"]["calibration"] == cal["digest"]
    assert explicit["metrics"]["iteration_s"] > 2 * plain["metrics"]["iteration_s"]
    mismatch = upload(api, calibration_doc(kind="A100"))
    body_ = assert_problem(api.post("/v1/plans:evaluate", json={**body, "calibration": mismatch["id"]}), 422,
                           field="calibration")
    assert body_["ref"] == "H100"
    api.request("PUT", f"/v1/topologies/{topology_id}/calibration", json={"calibration_id": cal["id"]})
    assert api.post("/v1/plans:evaluate", json=body).json()["calibration_id"] == cal["id"]
    assert api.post("/v1/plans:evaluate", json={**body, "calibration": "none"}).json()["calibration_id"] is None
    r = api.post("/v1/comparisons", json={"graph_id": graph_id, "topology_id": topology_id, "solvers": ["even"],
                                          "settings": SETTINGS})
    assert r.status_code == 202, r.text
    row = r.json()["rows"][0]
    done = api.wait(row["job_id"])
    assert done["calibration_id"] == cal["id"]
    assert api.get(f"/v1/plans/{done['plan_id']}").json()["metrics"]["calibration"] == cal["digest"]
