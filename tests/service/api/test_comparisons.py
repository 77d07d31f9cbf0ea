"""Comparisons: one job per solver and the table; ``plans:evaluate``; the solver catalogue."""

from __future__ import annotations

from typing import Any

import pytest

from client.models import Comparison
from tests.service.conftest import Api, assert_problem


def test_comparison_table_of_several_solvers(api: Api) -> None:
    gid, tid = api.graph(n_ops=30), api.topology()
    r = api.post("/v1/comparisons", json={"graph_id": gid, "topology_id": tid, "solvers": ["even", "pipedream"],
                                          "objective": "throughput", "settings": {"micro_batches": [4]},
                                          "time_limit_s": 20})
    assert r.status_code == 202, r.text
    cid = r.json()["id"]
    for _ in range(600):
        table = api.get(f"/v1/comparisons/{cid}").json()
        if table["done"]:
            break
        api.wait(table["rows"][0]["job_id"])
    assert table["done"] and [row["solver"] for row in table["rows"]] == ["even", "pipedream"]
    for row in table["rows"]:
        assert row["job_status"] == "succeeded" and row["status"] in ("feasible", "optimal")
        assert row["iteration_s"] > 0 and row["throughput_samples_per_s"] > 0 and row["solve_time_s"] >= 0
        assert 0 < row["efficiency"] <= 1.0 + 1e-9 and row["peak_memory_bytes"] > 0
    best = min(table["rows"], key=lambda row: row["objective_s"])
    assert table["best_solver"] == best["solver"]
    jobs = api.get(f"/v1/jobs?comparison_id={cid}").json()["items"]
    assert len(jobs) == 2
    assert cid in [c["id"] for c in api.get(f"/v1/comparisons?graph_id={gid}").json()["items"]]


def finished_comparison(api: Api, body: dict[str, object]) -> dict[str, Any]:
    """Create a comparison and wait for every job."""
    r = api.post("/v1/comparisons", json=body)
    assert r.status_code == 202, r.text
    for row in r.json()["rows"]:
        api.wait(row["job_id"])
    table: dict[str, Any] = api.get(f"/v1/comparisons/{r.json()['id']}").json()
    assert table["done"]
    return table


def per_sample_comparison(api: Api) -> dict[str, Any]:
    """``even`` (searching 2 and 8 micro-batches) against ``sleepy`` (one stage, 2 micro-batches):
    sleepy has the shorter iteration, even the shorter time per sample."""
    gid, tid = api.graph(n_ops=30), api.topology()
    return finished_comparison(api, {"graph_id": gid, "topology_id": tid, "solvers": ["sleepy", "even"],
                                     "settings": {"micro_batches": [2, 8]}, "options": {"sleepy": {"sleep_s": 0}},
                                     "time_limit_s": 20})


def test_comparison_crowns_the_least_time_per_sample(api: Api) -> None:
    table = per_sample_comparison(api)
    rows = {row["solver"]: row for row in table["rows"]}
    sleepy, even = rows["sleepy"], rows["even"]
    assert sleepy["iteration_s"] < even["iteration_s"]  # the least iteration is not the best
    assert table["ranked_by"] == "time_per_sample_s" and table["best_solver"] == "even"
    for row in table["rows"]:
        assert row["key_s"] == pytest.approx(row["iteration_s"] / row["samples_per_iteration"], rel=1e-9)
        assert row["key_s"] == pytest.approx(1 / row["throughput_samples_per_s"], rel=1e-9)
        assert row["lower_bound_key_s"] == pytest.approx(row["lower_bound_s"] / row["samples_per_iteration"], rel=1e-9)
    assert even["key_s"] < sleepy["key_s"] and sleepy["samples_per_iteration"] < even["samples_per_iteration"]
    client_view = Comparison.model_validate(table)
    assert client_view.best is not None and client_view.best.solver == "even"


def test_comparison_with_a_global_batch_crowns_the_least_iteration(api: Api) -> None:
    gid, tid = api.graph(n_ops=30), api.topology()
    table = finished_comparison(api, {"graph_id": gid, "topology_id": tid, "solvers": ["sleepy", "even"],
                                      "settings": {"global_batch": 16, "micro_batches": [2, 8]},
                                      "options": {"sleepy": {"sleep_s": 0}}, "time_limit_s": 20})
    assert table["ranked_by"] == "iteration_s"
    rows = {row["solver"]: row for row in table["rows"]}
    assert all(row["samples_per_iteration"] == pytest.approx(16) and row["key_s"] == row["iteration_s"]
               for row in rows.values())
    assert table["best_solver"] == min(rows.values(), key=lambda row: row["iteration_s"])["solver"] == "even"
    assert_problem(api.post("/v1/comparisons", json={"graph_id": gid, "topology_id": tid, "solvers": ["even"],
                                                     "settings": {"global_batch": 6, "micro_batches": [4]}}),
                   422, field="settings.global_batch")


def test_comparison_idempotency_key(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    body = {"graph_id": gid, "topology_id": tid, "solvers": ["even", "pipedream"]}
    first = api.post("/v1/comparisons", json=body, headers={"Idempotency-Key": "cmp-1"}).json()
    again = api.post("/v1/comparisons", json=body, headers={"Idempotency-Key": "cmp-1"}).json()
    assert again["id"] == first["id"] and len(api.get(f"/v1/jobs?graph_id={gid}").json()["items"]) == 2
    other = {**body, "solvers": ["even"]}
    assert_problem(api.post("/v1/comparisons", json=other, headers={"Idempotency-Key": "cmp-1"}), 422,
                   field="Idempotency-Key")


def test_delete_a_comparison_waits_for_its_jobs_and_keeps_them(api: Api, other_api: Api) -> None:
    r = api.post("/v1/comparisons", json={"graph_id": api.graph(n_ops=6), "topology_id": api.topology(),
                                          "solvers": ["sleepy"], "options": {"sleepy": {"sleep_s": 30}}})
    cmp_id, job_id = r.json()["id"], r.json()["rows"][0]["job_id"]
    assert other_api.delete(f"/v1/comparisons/{cmp_id}").status_code == 404
    problem = assert_problem(api.delete(f"/v1/comparisons/{cmp_id}"), 409, "id")
    assert "comparison" in problem["detail"] and "queued or running" in problem["detail"]
    api.post(f"/v1/jobs/{job_id}:cancel")
    api.wait(job_id)
    assert api.delete(f"/v1/comparisons/{cmp_id}").status_code == 204
    assert api.get(f"/v1/comparisons/{cmp_id}").status_code == 404
    assert api.get(f"/v1/jobs/{job_id}").json()["comparison_id"] is None


def test_comparison_bad_input_names_the_field(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    base = {"graph_id": gid, "topology_id": tid}
    assert_problem(api.post("/v1/comparisons", json={**base, "solvers": ["even", "nope"]}), 422, field="solvers[1]")
    assert_problem(api.post("/v1/comparisons", json={**base, "solvers": ["even"], "options": {"rannc": {}}}), 422,
                   field="options.rannc")
    assert_problem(api.post("/v1/comparisons", json={**base, "solvers": ["even"], "options": {"even": {"x": 1}}}),
                   422, field="options.even.x")
    assert_problem(api.post("/v1/comparisons", json={**base, "solvers": []}), 422, field="solvers")
    assert_problem(api.get("/v1/comparisons/cmp_nope"), 404)


def _one_stage_plan(api: Api, gid: str) -> dict[str, object]:
    ops = [n["id"] for n in api.get(f"/v1/graphs/{gid}/document").json()["nodes"]]
    return {"format": "placer.plan/v1", "stages": [{"ops": ops, "devices": ["gpu0"]}], "micro_batches": 2}


def test_evaluate_scores_a_users_plan(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    body = {"graph_id": gid, "topology_id": tid, "plan": _one_stage_plan(api, gid), "timeline": True}
    r = api.post("/v1/plans:evaluate", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["metrics"]["iteration_s"] > 0 and out["plan"]["metrics"] == out["metrics"]
    assert out["plan"]["graph_digest"] == api.get(f"/v1/graphs/{gid}").json()["digest"]
    assert out["timeline"] and {"resource", "task", "start_s", "end_s"} <= set(out["timeline"][0])


def test_evaluate_rejects_bad_plans_with_4xx(api: Api) -> None:
    gid = api.graph()
    tiny = api.topology(memory_gib=1e-6)
    plan = _one_stage_plan(api, gid)
    body = assert_problem(api.post("/v1/plans:evaluate", json={"graph_id": gid, "topology_id": tiny, "plan": plan}),
                          422, slug="invalid-plan")
    assert body["field"] == "stages[0]" and body["ref"] == "gpu0"
    tid = api.topology()
    bad = {**plan, "stages": [{"ops": ["ghost"], "devices": ["gpu0"]}]}
    assert_problem(api.post("/v1/plans:evaluate", json={"graph_id": gid, "topology_id": tid, "plan": bad}), 422,
                   field="stages[0].ops")
    assert_problem(api.post("/v1/plans:evaluate", json={"graph_id": gid, "topology_id": tid, "plan": {}}), 422,
                   field="format")
    huge = {**plan, "micro_batches": 10**9}
    assert_problem(api.post("/v1/plans:evaluate", json={"graph_id": gid, "topology_id": tid, "plan": huge}), 422,
                   field="plan.micro_batches")


def test_solver_catalogue_lists_option_schemas(api: Api) -> None:
    solvers = {s["name"]: s for s in api.client.get("/v1/solvers").json()}
    assert {"even", "single", "sleepy"} <= set(solvers)
    assert solvers["sleepy"]["options_schema"]["properties"]["sleep_s"]["type"] == "number"
    assert "latency" in solvers["single"]["objectives"]
    assert not solvers["broken"]["available"] and "NoSuchSolver" in solvers["broken"]["unavailable_reason"]
    gid, tid = api.graph(), api.topology()
    r = api.post("/v1/jobs", json={"graph_id": gid, "topology_id": tid, "solver": "broken"})
    assert_problem(r, 501, field="solver", slug="solver-unavailable")
