"""``/v1/plans/{id}/runs``: run records checked against their plan, stored once, listed and read back;
plans carry the warnings of their graph's times (on SQLite and PostgreSQL)."""

from __future__ import annotations

import copy
from typing import Any

from solvers.generate import generate_graph
from tests.run_records import synthetic_run
from tests.service.conftest import Api, assert_problem

ONE_STAGE_PER_RANK = {"stages": 2, "micro_batches": 2, "schedule": "1f1b"}  # synthetic_run records one stage per rank


def solved(api: Api, graph_doc: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """(plan id, plan document) of an even two-stage plan; its job carries the plan's warnings."""
    graph_id = api.graph(n_ops=12) if graph_doc is None else api.post("/v1/graphs", json=graph_doc).json()["id"]
    job = api.wait(api.submit(graph_id, api.topology(), "even", settings=ONE_STAGE_PER_RANK)["id"])
    assert job["status"] == "succeeded", job
    plan = api.get(f"/v1/plans/{job['plan_id']}").json()
    assert job["warnings"] == plan.get("warnings", [])
    return job["plan_id"], plan


def test_upload_list_read_back_and_dedupe(api: Api, other_api: Api) -> None:
    plan_id, plan = solved(api)
    doc = synthetic_run(plan)
    r = api.post(f"/v1/plans/{plan_id}/runs", json=doc)
    assert r.status_code == 201, r.text
    run = r.json()
    assert run["plan_id"] == plan_id and run["world_size"] == 2 and run["profiled"] and run["iteration_s"] == 0.02
    assert r.headers["Location"] == f"/v1/plans/{plan_id}/runs/{run['id']}"
    again = api.post(f"/v1/plans/{plan_id}/runs", json=doc)
    assert again.status_code == 201 and again.json()["id"] == run["id"] and again.headers["Placer-Deduplicated"]
    assert [x["id"] for x in api.get(f"/v1/plans/{plan_id}/runs").json()["items"]] == [run["id"]]
    assert api.get(f"/v1/plans/{plan_id}/runs/{run['id']}").json() == doc
    assert_problem(other_api.get(f"/v1/plans/{plan_id}/runs"), 404, field="plan_id")
    assert_problem(other_api.post(f"/v1/plans/{plan_id}/runs", json=doc), 404, field="plan_id")
    assert_problem(other_api.get(f"/v1/plans/{plan_id}/runs/{run['id']}"), 404, field="run_id")


def test_a_run_of_another_plan_or_a_broken_record_is_422_naming_the_field(api: Api) -> None:
    plan_id, plan = solved(api)
    doc = synthetic_run(plan)
    for field, value in (("plan_digest", "sha256:00"), ("graph_digest", "sha256:11"), ("topology_digest", "sha256:22")):
        bad = {**copy.deepcopy(doc), field: value}
        body = assert_problem(api.post(f"/v1/plans/{plan_id}/runs", json=bad), 422, field=field)
        assert value in body["detail"]
    bad = copy.deepcopy(doc)
    bad["ranks"][1]["device"] = "gpu9"
    assert_problem(api.post(f"/v1/plans/{plan_id}/runs", json=bad), 422, field="ranks[1].device")
    bad = copy.deepcopy(doc)
    bad["ranks"][0]["transfers"] = [{"op": "send", "step": 0, "start_s": 0, "duration_s": -1, "bytes": 4}]
    assert_problem(api.post(f"/v1/plans/{plan_id}/runs", json=bad), 422, field="ranks[0].transfers[0].duration_s")
    assert_problem(api.post(f"/v1/plans/{plan_id}/runs", json={**doc, "format": "placer.run/v2"}), 422,
                   field="format")
    assert api.get(f"/v1/plans/{plan_id}/runs").json()["items"] == []


def test_plans_carry_the_warnings_of_their_graphs_times(api: Api) -> None:
    doc = generate_graph("random_dag", n_ops=12, seed=5).to_document()
    doc["attrs"] = {"estimate": {"device_kind": "A100", "rule": "roofline"}}
    _, plan = solved(api, doc)
    codes = [w["code"] for w in plan["warnings"]]
    assert codes == ["times-from-absent-kind", "roofline-times"]
    assert "A100" in plan["warnings"][0]["message"] and "placer profile" in plan["warnings"][1]["message"]
    _, quiet = solved(api)
    assert "warnings" not in quiet
    again = api.wait(api.submit(api.post("/v1/graphs", json=doc).json()["id"], api.topology(), "even",
                                settings=ONE_STAGE_PER_RANK)["id"])
    assert again["cached"] and [w["code"] for w in again["warnings"]] == codes  # a cached plan's warnings too
