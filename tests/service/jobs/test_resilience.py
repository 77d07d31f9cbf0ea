"""No job lost, none run twice: killed solver processes, hard time limits, one claimant,
and a server killed mid-job that resumes the job after a restart."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from service.app import create_app
from service.config import load_config
from service.db.engine import Database
from service.db.models import Job, JobEvent
from service.jobs import store
from solvers.generate import generate_graph, generate_topology
from tests.service.conftest import (
    BACKENDS,
    PLUGINS,
    TEST_SETTINGS,
    Api,
    TestClient,
    database_url,
    new_api,
    running_app,
)

PLACER = str(Path(sys.executable).with_name("placer"))


def _child_pid(api: Api, job_id: str, timeout_s: float = 20.0) -> int:
    db = api.client.app.state.ctx.db  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with db.session() as s:
            pid = s.scalar(select(Job.child_pid).where(Job.id == job_id))
        if pid:
            return int(pid)
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never reported its solver process")


def _reasons(db: Database, job_id: str) -> list[str]:
    with db.session() as s:
        data = s.scalars(select(JobEvent.data).where(JobEvent.job_id == job_id).order_by(JobEvent.seq)).all()
    return [str(d["reason"]) for d in data if "reason" in d]


def test_killed_solver_process_is_retried_and_the_job_succeeds(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    job = api.submit(gid, tid, "sleepy", options={"sleep_s": 2.0})
    os.kill(_child_pid(api, job["id"]), signal.SIGKILL)
    done = api.wait(job["id"])
    assert done["status"] == "succeeded" and done["attempts"] == 2 and done["plan_status"] == "feasible"
    reasons = _reasons(api.client.app.state.ctx.db, job["id"])  # type: ignore[attr-defined]
    assert any("killed by signal 9" in r for r in reasons), reasons


def test_hard_wall_clock_kill_at_the_time_limit(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    started = time.monotonic()
    job = api.submit(gid, tid, "sleepy", options={"sleep_s": 20.0, "ignore_budget": True}, time_limit_s=1.0)
    done = api.wait(job["id"], timeout_s=15)
    assert done["status"] == "failed" and done["error"]["type"] == "time-limit-exceeded"
    assert done["error"]["field"] == "time_limit_s" and "killed" in done["error"]["detail"]
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("backend", BACKENDS)
def test_attempts_are_bounded(backend: str, tmp_path: Path) -> None:
    with running_app(backend, tmp_path, workers=1, max_attempts=1) as (client, cfg):
        api = new_api(client, cfg)
        # long enough that a starved test process still finds the solver alive when it kills it
        job = api.submit(api.graph(), api.topology(), "sleepy", options={"sleep_s": 30.0})
        os.kill(_child_pid(api, job["id"]), signal.SIGKILL)
        done = api.wait(job["id"])
        assert done["status"] == "failed" and done["error"]["type"] == "worker-lost"
        assert "max_attempts=1" in done["error"]["detail"] and "signal 9" in done["error"]["detail"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_exactly_one_claimant(backend: str, tmp_path: Path) -> None:
    with running_app(backend, tmp_path, workers=0) as (client, cfg):
        api = new_api(client, cfg)
        job = api.submit(api.graph(), api.topology(), "even")
        db: Database = client.app.state.ctx.db  # type: ignore[attr-defined]
        wins: list[Any] = []
        barrier = threading.Barrier(8)

        def contend(i: int) -> None:
            barrier.wait()
            with db.session() as s:
                wins.append(store.claim(s, job["id"], f"worker-{i}", 30.0))

        threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(w is not None for w in wins) == 1
        assert api.get(f"/v1/jobs/{job['id']}").json()["attempts"] == 1


def _solver_pid(db: Database, job_id: str) -> int | None:
    with db.session() as s:
        return s.scalar(select(Job.child_pid).where(Job.id == job_id))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its reaper counts as gone
        return stat.read().split(") ", 1)[1][0] != "Z"


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].decode().split()  # state ppid pgrp session ...


def _processes_where(field: int, value: int) -> set[int]:
    """Live processes whose ``/proc/PID/stat`` field (1: ppid, 3: session) is ``value``."""
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := _stat(int(name))) and fields[0] != "Z" and int(fields[field]) == value:
            out.add(int(name))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(env: dict[str, str], url: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([PLACER, "serve"], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise AssertionError(f"placer serve exited with {proc.returncode}")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("placer serve did not become ready")


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_server_killed_mid_job_resumes_after_restart(backend: str, tmp_path: Path) -> None:
    with database_url(backend, tmp_path) as db_url:
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PLACER_DATABASE_URL": db_url, "PLACER_PORT": str(port), "PLACER_WORKERS": "1",
               # a lease of 6 s: on a loaded machine a 3 s lease of the second attempt can lapse between
               # heartbeats (a third attempt, which the assertion on `attempts` below would count)
               "PLACER_LEASE_S": "6", "PLACER_REAPER_INTERVAL_S": "0.5", "PLACER_AUTO_MIGRATE": "true",
               "PLACER_RATE_LIMIT_PER_S": "0",
               "PYTHONPATH": os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH")) if p)}
        key = subprocess.run([PLACER, "key", "create", "--project", "restart"], env=env, check=True,
                             capture_output=True, text=True).stdout
        assert key.count("\n") == 1 and key.startswith("plc_")
        headers = {"Authorization": f"Bearer {key.strip()}"}
        server = _start_server(env, url)
        try:
            with httpx.Client(base_url=url, headers=headers, timeout=10) as http:
                gid = http.post("/v1/graphs", json=generate_graph("random_dag", n_ops=20, seed=2).to_document())
                tid = http.post("/v1/topologies", json=generate_topology("hierarchical", nodes=1).to_document())
                job = http.post("/v1/jobs", json={"graph_id": gid.json()["id"], "topology_id": tid.json()["id"],
                                                  "solver": "sleepy",
                                                  "options": {"sleep_s": 5.0, "report_progress": False,
                                                              "helper_s": 120.0}}).json()
            db = Database(db_url)
            deadline = time.monotonic() + 20
            while not (solver_pid := _solver_pid(db, job["id"])):  # running, and silent: no progress to write
                assert time.monotonic() < deadline
                time.sleep(0.05)
            db.dispose()
            while not (helpers := _processes_where(1, solver_pid)):  # the helper the solver starts first
                assert time.monotonic() < deadline
                time.sleep(0.05)
            started = _processes_where(1, server.pid) | {solver_pid} | helpers  # + forkserver, resource tracker
            assert len(started) >= 4, started
            os.kill(server.pid, signal.SIGKILL)  # the server only: every process it started must follow it
            server.wait()
            deadline = time.monotonic() + 10  # well before the solver (5 s) or its helper (120 s) would end
            while left := {pid for pid in started if _alive(pid)}:
                assert time.monotonic() < deadline, f"processes outlived their server: {left}"
                time.sleep(0.05)
            server = _start_server(env, url)
            with httpx.Client(base_url=url, headers=headers, timeout=10) as http:
                deadline = time.monotonic() + 60
                while (done := http.get(f"/v1/jobs/{job['id']}").json())["status"] not in ("succeeded", "failed"):
                    assert time.monotonic() < deadline, done
                    time.sleep(0.1)
                assert done["status"] == "succeeded" and done["attempts"] == 2, done
                assert http.get(f"/v1/jobs/{job['id']}/plan").json()["format"] == "placer.plan/v1"
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        db = Database(db_url)
        try:
            assert any("lease" in r and "expired" in r for r in _reasons(db, job["id"]))
        finally:
            db.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_clean_shutdown_puts_running_jobs_back_in_the_queue(backend: str, tmp_path: Path) -> None:
    with database_url(backend, tmp_path) as url:
        app = create_app(load_config({}, database_url=url, **{**TEST_SETTINGS, "workers": 1}))
        with TestClient(app) as client:
            api = new_api(client, app.state.ctx.config)
            job = api.submit(api.graph(), api.topology(), "sleepy", options={"sleep_s": 10.0})
            pid = _child_pid(api, job["id"])
        assert not _alive(pid)
        db = Database(url)
        try:
            with db.session() as s:
                row = s.get(Job, job["id"])
                assert row is not None and row.state == "queued" and row.attempts == 0 and row.lease_owner is None
            assert any("shut down" in r for r in _reasons(db, job["id"]))
        finally:
            db.dispose()
