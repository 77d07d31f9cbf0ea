"""Jobs: submit (202), run in the local pool, plan, cache, idempotency, cancel, SSE, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.jobs import store
from tests.service.conftest import BACKENDS, Api, assert_problem, new_api, running_app


def _sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events


def test_job_runs_and_returns_a_plan_document(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    job = api.submit(gid, tid, "even", settings={"micro_batches": [4]})
    assert set(job) >= {"id", "status"} and job["status"] in ("queued", "running", "succeeded")
    done = api.wait(job["id"])
    assert done["status"] == "succeeded" and done["attempts"] == 1 and not done["cached"]
    assert done["plan_status"] == "feasible" and done["progress"]["fraction"] == 1.0
    plan = api.get(f"/v1/jobs/{job['id']}/plan").json()
    assert plan["format"] == "placer.plan/v1" and plan["solver"] == "even" and plan["metrics"]["iteration_s"] > 0
    assert api.get(f"/v1/plans/{done['plan_id']}").json() == plan
    listed = api.get("/v1/jobs?status=succeeded&solver=even").json()["items"]
    assert [j["id"] for j in listed] == [job["id"]]


def test_identical_job_reuses_the_cached_plan_unless_cache_is_false(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    first = api.wait(api.submit(gid, tid, "even")["id"])
    again = api.submit(gid, tid, "even")
    assert again["status"] == "succeeded" and again["cached"] and again["cached_from"] == first["id"]
    assert again["plan_id"] == first["plan_id"]
    fresh = api.wait(api.submit(gid, tid, "even", cache=False)["id"])
    assert not fresh["cached"] and fresh["plan_id"] != first["plan_id"]
    other = api.submit(gid, tid, "even", settings={"micro_batches": [2]})
    assert not other["cached"]


def test_idempotency_key_makes_resubmission_safe(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    a = api.submit(gid, tid, "even", headers={"Idempotency-Key": "k-1"})
    b = api.submit(gid, tid, "even", headers={"Idempotency-Key": "k-1"})
    assert a["id"] == b["id"]
    assert len(api.get(f"/v1/jobs?graph_id={gid}").json()["items"]) == 1
    r = api.post("/v1/jobs", json={"graph_id": gid, "topology_id": tid, "solver": "pipedream"},
                 headers={"Idempotency-Key": "k-1"})
    assert_problem(r, 422, field="Idempotency-Key")


def test_bad_job_requests_are_4xx_naming_the_field(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    base = {"graph_id": gid, "topology_id": tid, "solver": "even"}
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"solver": "nope"}, 422, "solver"),
        ({"options": {"bogus": 1}}, 422, "options.bogus"),
        ({"time_limit_s": 10_000}, 422, "time_limit_s"),
        ({"time_limit_s": -1}, 422, "time_limit_s"),
        ({"solver": "single"}, 422, "objective"),
        ({"settings": {"schedule": "zigzag"}}, 422, "settings.schedule"),
        ({"settings": {"pinned": {"no-such-op": "gpu0"}}}, 422, "settings.pinned.no-such-op"),
        ({"graph_id": "g_missing"}, 404, "graph_id"),
        ({"topology_id": "t_missing"}, 404, "topology_id"),
        ({"objective": "speed"}, 422, "objective"),
        ({"extra": 1}, 422, "extra"),
    ]
    for change, status, field in cases:
        assert_problem(api.post("/v1/jobs", json={**base, **change}), status, field=field)
    assert_problem(api.get("/v1/jobs/job_missing"), 404, field="id")


def test_infeasible_memory_is_a_plan_status_not_an_error(api: Api) -> None:
    gid, tid = api.graph(), api.topology(memory_gib=1e-6)
    done = api.wait(api.submit(gid, tid, "even")["id"])
    assert done["status"] == "succeeded" and done["plan_status"] == "infeasible"
    assert api.get(f"/v1/jobs/{done['id']}/plan").json()["status"] == "infeasible"


def test_cancel_a_running_job(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    running = api.submit(gid, tid, "sleepy", options={"sleep_s": 5.0})
    api.wait(running["id"], until=("running",))
    r = api.post(f"/v1/jobs/{running['id']}:cancel")
    assert r.status_code == 202 and r.json()["cancel_requested"]
    done = api.wait(running["id"], timeout_s=10)
    assert done["status"] == "cancelled" and done["plan_id"] is None
    assert_problem(api.post(f"/v1/jobs/{running['id']}:cancel"), 409)
    assert_problem(api.get(f"/v1/jobs/{running['id']}/plan"), 409)


def test_progress_as_server_sent_events(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    job = api.submit(gid, tid, "sleepy", options={"sleep_s": 1.0})
    r = api.get(f"/v1/jobs/{job['id']}/events")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _sse(r.text)
    kinds = [k for k, _ in events]
    assert kinds[0] == "state" and kinds[-1] == "end" and "progress" in kinds
    fractions = [d["fraction"] for k, d in events if k == "progress"]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert events[-1][1]["status"] == "succeeded"
    states = [d["status"] for k, d in events if k == "state"]
    assert states[:2] == ["queued", "running"] and states[-1] == "succeeded"
    seqs = [int(line[4:]) for line in r.text.splitlines() if line.startswith("id: ")]
    resumed = _sse(api.get(f"/v1/jobs/{job['id']}/events", headers={"Last-Event-ID": str(seqs[-2])}).text)
    assert len(resumed) == 2 and resumed[-1][0] == "end"


def test_events_after_an_id_beyond_the_column_range_is_just_the_end(api: Api) -> None:
    job = api.wait(api.submit(api.graph(), api.topology(), "even")["id"])
    for query, headers in (("?after=99999999999999999999999", {}), ("", {"Last-Event-ID": "99999999999999999999"})):
        r = api.get(f"/v1/jobs/{job['id']}/events{query}", headers=headers)
        assert r.status_code == 200 and _sse(r.text) == [("end", {"status": "succeeded"})]


def test_plan_is_409_until_the_job_succeeds(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    job = api.submit(gid, tid, "sleepy", options={"sleep_s": 1.0})
    assert_problem(api.get(f"/v1/jobs/{job['id']}/plan"), 409, field="status")
    assert api.wait(job["id"])["status"] == "succeeded"
    assert api.get(f"/v1/jobs/{job['id']}/plan").status_code == 200


def test_solvers_may_start_processes_of_their_own(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    job = api.submit(gid, tid, "sleepy", options={"sleep_s": 0.1, "child_process": True})
    done = api.wait(job["id"])
    assert done["status"] == "succeeded", done


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancel_a_queued_job(backend: str, tmp_path: Path) -> None:
    with running_app(backend, tmp_path, workers=0) as (client, cfg):  # no workers: the job stays queued
        api = new_api(client, cfg)
        job = api.submit(api.graph(), api.topology(), "even")
        r = api.post(f"/v1/jobs/{job['id']}:cancel")
        assert r.status_code == 202 and r.json()["status"] == "cancelled" and r.json()["finished_at"]
        with client.app.state.ctx.db.session() as s:  # type: ignore[attr-defined]
            assert store.claim(s, job["id"], "late-worker", 30.0) is None
        assert api.get(f"/v1/jobs/{job['id']}").json()["attempts"] == 0
