"""Outages of what Placer runs on, with real ``placer serve`` and ``placer worker`` processes:
PostgreSQL restarted under a running API and worker (503 problem+json meanwhile, then recovery
without restarting Placer), and an API server killed mid-submission (no half-created job;
``Idempotency-Key`` retries land once)."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from service.db.engine import Database
from service.db.models import Comparison, Job, JobEvent
from solvers.generate import generate_graph, generate_topology
from tests.service.conftest import database_url
from tests.service.jobs.processes import (
    PLACER,
    free_port,
    kill_group,
    postgres_cluster,
    redis_server,
    service_env,
    start_server,
    start_worker,
    stop,
    wait_until,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
SLEEPY = {"sleep_s": 0.5, "report_progress": False}


def _key(env: dict[str, str], project: str) -> dict[str, str]:
    key = subprocess.run([PLACER, "key", "create", "--project", project], env=env, check=True,
                         capture_output=True, text=True).stdout.strip()
    return {"Authorization": f"Bearer {key}"}


def _inputs(http: httpx.Client) -> tuple[str, str]:
    gid = http.post("/v1/graphs", json=generate_graph("random_dag", n_ops=16, seed=3).to_document()).json()["id"]
    tid = http.post("/v1/topologies", json=generate_topology("hierarchical", nodes=1).to_document()).json()["id"]
    return str(gid), str(tid)


def _all_succeeded(http: httpx.Client, ids: list[str]) -> bool:
    return all(http.get(f"/v1/jobs/{i}").json()["status"] == "succeeded" for i in ids)


@pytest.mark.redis
def test_postgres_restart_answers_503_then_recovers(tmp_path: Path) -> None:
    with postgres_cluster() as pg, redis_server() as redis:
        env = service_env(pg.url, redis.url, PLACER_KEY_CACHE_S="0")
        headers = _key(env, "outage")
        port = free_port()
        server = start_server(env, port, tmp_path / "server.log")
        worker = start_worker(env, 2, tmp_path / "worker.log")
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=15) as http:
                gid, tid = _inputs(http)
                body = {"graph_id": gid, "topology_id": tid, "solver": "sleepy", "options": SLEEPY}
                ids = [http.post("/v1/jobs", json=body).json()["id"] for _ in range(6)]
                pg.stop()
                during = [http.get(f"/v1/jobs/{ids[0]}"), http.post("/v1/jobs", json=body), http.get("/v1/jobs"),
                          http.get(f"/v1/graphs/{gid}")]
                for r in during:
                    assert r.status_code == 503, (r.request.url, r.status_code, r.text)
                    assert r.headers["content-type"] == "application/problem+json" and "Retry-After" in r.headers
                    assert r.json()["type"] == "/problems/database-unavailable"
                assert http.get("/readyz").status_code == 503
                time.sleep(1.0)
                pg.start()
                wait_until(lambda: http.get("/readyz").status_code == 200, 30, "ready again")
                ids.append(http.post("/v1/jobs", json=body).json()["id"])
                wait_until(lambda: _all_succeeded(http, ids), 90, "every job succeeded after the restart")
        finally:
            stop(worker)
            stop(server)


def _submit_forever(url: str, headers: dict[str, str], body: dict[str, Any], keys: list[str],
                    answered: dict[str, str], stop_at: threading.Event) -> None:
    with httpx.Client(base_url=url, headers=headers, timeout=5) as http:
        for key in keys:
            if stop_at.is_set():
                return
            try:
                r = http.post("/v1/comparisons", json=body, headers={"Idempotency-Key": key})
            except httpx.HTTPError:
                return  # the server died under this request
            if r.status_code == 202:
                answered[key] = r.json()["id"]


def test_api_killed_mid_submission_leaves_no_half_created_job(tmp_path: Path) -> None:
    with database_url("postgres", tmp_path) as url:
        # a claim on a key left by the killed server holds for 3 s, then the retry takes it over
        env = service_env(url, "redis://127.0.0.1:1/0", PLACER_DISPATCH="local", PLACER_IDEMPOTENCY_RESERVE_S="3")
        headers = _key(env, "crash")
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = start_server(env, port, tmp_path / "server.log")
        with httpx.Client(base_url=base, headers=headers, timeout=15) as http:
            gid, tid = _inputs(http)
        body = {"graph_id": gid, "topology_id": tid, "solvers": ["sleepy", "even", "pipedream"],
                "options": {"sleepy": SLEEPY}, "cache": False}
        keys = [[f"k{t}-{i}" for i in range(200)] for t in range(6)]
        answered: dict[str, str] = {}
        halt = threading.Event()
        threads = [threading.Thread(target=_submit_forever, args=(base, headers, body, ks, answered, halt))
                   for ks in keys]
        try:
            for t in threads:
                t.start()
            wait_until(lambda: len(answered) >= 10, 60, "submissions under way")
            kill_group(server)  # SIGKILL mid-submission
            server.wait()
            halt.set()
            for t in threads:
                t.join()
            server = start_server(env, port, tmp_path / "server.log")
            tried = [k for ks in keys for k in ks[: 1 + max([ks.index(a) for a in answered if a in ks] + [0]) + 6]]
            with httpx.Client(base_url=base, headers=headers, timeout=15) as http:
                for key in tried:  # every request a client may have sent, retried with its key
                    deadline = time.monotonic() + 20
                    while True:
                        r = http.post("/v1/comparisons", json=body, headers={"Idempotency-Key": key})
                        if r.status_code != 409 or time.monotonic() > deadline:
                            break
                        assert r.json()["type"] == "/problems/idempotency-in-progress", r.text
                        time.sleep(float(r.headers["Retry-After"]))  # the killed request's claim
                    assert r.status_code in (200, 202), r.text
                    if key in answered:
                        assert r.json()["id"] == answered[key], key
        finally:
            halt.set()
            stop(server)
        db = Database(url)
        try:
            with db.session(read_only=True) as s:
                per_key = dict(s.execute(select(Comparison.idempotency_key, func.count())
                                         .group_by(Comparison.idempotency_key)).all())
                sizes = dict(s.execute(select(Job.comparison_id, func.count()).group_by(Job.comparison_id)).all())
                silent = s.scalar(select(func.count()).select_from(Job).where(
                    ~Job.id.in_(select(JobEvent.job_id))))
            assert set(per_key) == set(tried) and set(per_key.values()) == {1}
            assert set(sizes.values()) == {3} and len(sizes) == len(tried)
            assert silent == 0
        finally:
            db.dispose()
