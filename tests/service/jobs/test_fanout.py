"""``auto`` on Celery workers: each portfolio member runs as its own job, and the parent's choice
is made in the database when the last member ends (real Redis, PostgreSQL, worker processes)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import select

from service.db.engine import Database
from service.db.models import Job
from solvers.generate import generate_graph, generate_topology
from solvers.portfolio import GAP
from tests.calibration_docs import calibration_doc
from tests.service.jobs.processes import redis_server, service_env, start_worker, stop, wait_until
from tests.service.jobs.test_celery_faults import _history, celery_api

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]
MEMBERS = ["even", "pipedream", "sleepy"]


def _children(db: Database, parent_id: str) -> list[Job]:
    with db.session(read_only=True) as s:
        return list(s.scalars(select(Job).where(Job.parent_id == parent_id)))


def test_auto_members_run_as_jobs_and_the_parent_chooses(tmp_path: Path) -> None:
    with redis_server() as redis, celery_api(tmp_path, redis) as (api, cfg):
        workers = [start_worker(service_env(cfg.database_url, redis.url), 2, tmp_path / "w.log") for _ in range(2)]
        try:
            gid, tid = api.graph(), api.topology()
            job = api.submit(gid, tid, "auto", options={"solvers": MEMBERS}, time_limit_s=20, cache=False)
            done = api.wait(job["id"], timeout_s=90)
        finally:
            for w in workers:
                stop(w)
        db: Database = api.client.app.state.ctx.db  # type: ignore[attr-defined]
        children = _children(db, job["id"])
        assert done["status"] == "succeeded", done
        assert sorted(c.solver for c in children) == sorted(MEMBERS) and all(c.state == "succeeded" for c in children)
        plan = api.get(f"/v1/jobs/{job['id']}/plan").json()
        assert plan["solver"] == "auto" and plan["stats"]["chosen"] in MEMBERS
        assert sorted(r["name"] for r in plan["stats"]["portfolio"]) == sorted(MEMBERS)
        # ranked by time per sample: the members search different micro-batch counts
        member_keys = [api.get(f"/v1/jobs/{c.id}/plan").json()["metrics"]["time_per_sample_s"] for c in children]
        assert plan["metrics"]["time_per_sample_s"] == pytest.approx(min(member_keys))
        states = [e["status"] for e in _history(db)[job["id"]]]
        assert states == ["queued", "running", "succeeded"]


def test_cancelling_a_fanned_out_auto_job_stops_its_members(tmp_path: Path) -> None:
    with redis_server() as redis, celery_api(tmp_path, redis) as (api, cfg):
        worker = start_worker(service_env(cfg.database_url, redis.url), 1, tmp_path / "w.log")
        db: Database = api.client.app.state.ctx.db  # type: ignore[attr-defined]
        try:
            gid, tid = api.graph(), api.topology()
            job = api.submit(gid, tid, "auto", options={"solvers": ["sleepy", "even"]}, time_limit_s=30, cache=False)
            wait_until(lambda: len(_children(db, job["id"])) == 2, 60, "the auto job expanded")
        finally:
            stop(worker)  # its running member goes back to the queue; nothing runs the members now
        assert api.get(f"/v1/jobs/{job['id']}").json()["status"] == "running"
        assert api.post(f"/v1/jobs/{job['id']}:cancel").status_code == 202
        done = api.wait(job["id"], timeout_s=30)
        assert done["status"] == "cancelled", done
        assert all(c.state in ("cancelled", "succeeded") for c in _children(db, job["id"]))
        assert any(c.state == "cancelled" for c in _children(db, job["id"]))


def test_the_members_and_the_choice_simulate_with_the_topologys_calibration(tmp_path: Path) -> None:
    with redis_server() as redis, celery_api(tmp_path, redis) as (api, cfg):
        worker = start_worker(service_env(cfg.database_url, redis.url), 2, tmp_path / "w.log")
        try:
            gid, tid = api.graph(), api.topology()
            cal = api.post("/v1/calibrations", json=calibration_doc()).json()
            api.request("PUT", f"/v1/topologies/{tid}/calibration", json={"calibration_id": cal["id"]})
            job = api.submit(gid, tid, "auto", options={"solvers": ["even", "pipedream"]}, time_limit_s=20,
                             cache=False)
            done = api.wait(job["id"], timeout_s=90)
        finally:
            stop(worker)
        db: Database = api.client.app.state.ctx.db  # type: ignore[attr-defined]
        children = _children(db, job["id"])
        assert done["status"] == "succeeded" and done["calibration_id"] == cal["id"], done
        assert [c.calibration_id for c in children] == [cal["id"]] * 2
        for plan_job in (job["id"], *(c.id for c in children)):
            assert api.get(f"/v1/jobs/{plan_job}/plan").json()["metrics"]["calibration"] == cal["digest"]


def test_a_fanned_out_auto_stops_its_members_once_the_best_plan_is_within_the_gap(tmp_path: Path) -> None:
    """``auto``'s gap stop across jobs: on a 1,015-op transformer whose list schedule is optimal,
    ``celeritas``' plan is within the default gap of the graph's bound, which the ``lingering`` member
    reports in its progress at once before waiting out its 60 s; the parent cancels it once
    ``celeritas`` ends, chooses ``celeritas``' plan and says why, as ``auto`` in one process does."""
    graph = generate_graph("transformer", layers=84)
    topology = generate_topology("hierarchical", nodes=4, gpus_per_node=8)
    with redis_server() as redis, celery_api(tmp_path, redis) as (api, cfg):
        workers = [start_worker(service_env(cfg.database_url, redis.url), 1, tmp_path / "w.log") for _ in range(2)]
        try:
            gid = api.post("/v1/graphs", json=graph.to_document()).json()["id"]
            tid = api.post("/v1/topologies", json=topology.to_document()).json()["id"]
            started = time.monotonic()
            job = api.submit(gid, tid, "auto", objective="latency", options={"solvers": ["lingering", "celeritas"]},
                             time_limit_s=60, cache=False)
            done = api.wait(job["id"], timeout_s=90)
            elapsed = time.monotonic() - started
        finally:
            for w in workers:
                stop(w)
        db: Database = api.client.app.state.ctx.db  # type: ignore[attr-defined]
        states = {c.solver: c.state for c in _children(db, job["id"])}
        assert done["status"] == "succeeded", done
        assert elapsed < 40.0
        assert states == {"lingering": "cancelled", "celeritas": "succeeded"}
        plan = api.get(f"/v1/jobs/{job['id']}/plan").json()
        assert plan["stats"]["chosen"] == "celeritas"
        assert "within the gap" in plan["stats"]["stopped"]
        assert any("were stopped" in note for note in plan["notes"])
        assert plan["metrics"]["objective_s"] <= (1 + GAP) * plan["lower_bound_s"]
