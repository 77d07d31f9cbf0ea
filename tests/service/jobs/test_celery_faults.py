"""Celery workers under fire (real Redis, PostgreSQL and ``placer worker`` processes): workers
killed with SIGKILL at random, Redis restarted mid-run.  No job is lost, none finishes twice,
no state goes backwards, and every attempt is on record."""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from service.app import create_app
from service.config import ServiceConfig, load_config
from service.db.engine import Database
from service.db.models import FINAL_STATES, Job, JobEvent, PlanRow
from tests.service.conftest import TEST_SETTINGS, Api, TestClient, database_url, new_api
from tests.service.jobs.processes import (
    RedisServer,
    kill_group,
    redis_server,
    service_env,
    start_worker,
    stop,
    wait_until,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]
SLEEPY = {"sleep_s": 0.4, "report_progress": False}


@contextmanager
def celery_api(tmp_path: Path, redis: RedisServer) -> Iterator[tuple[Api, ServiceConfig]]:
    """An in-process API with ``PLACER_DISPATCH=celery`` on a fresh PostgreSQL schema."""
    with database_url("postgres", tmp_path) as url:
        cfg = load_config({}, **{**TEST_SETTINGS, "database_url": url, "dispatch": "celery", "broker_url": redis.url,
                                 "workers": 0, "lease_s": 2.0, "max_attempts": 20, "max_time_limit_s": 60.0})
        with TestClient(create_app(cfg)) as client:
            yield new_api(client, cfg), cfg


def _history(db: Database) -> dict[str, list[dict[str, Any]]]:
    with db.session(read_only=True) as s:
        rows = s.execute(select(JobEvent.job_id, JobEvent.data).where(JobEvent.kind == "state")
                         .order_by(JobEvent.seq)).all()
    out: dict[str, list[dict[str, Any]]] = {}
    for job_id, data in rows:
        out.setdefault(job_id, []).append(data)
    return out


def assert_executed_once(db: Database, ids: list[str]) -> int:
    """Every job succeeded with one plan, its states moved only forwards, every attempt recorded;
    returns the number of retried jobs."""
    with db.session(read_only=True) as s:
        jobs = {j.id: j for j in s.scalars(select(Job).where(Job.id.in_(ids)))}
        plans = dict(s.execute(select(PlanRow.job_id, func.count()).group_by(PlanRow.job_id)).all())
    history = _history(db)
    assert len(jobs) == len(ids)
    allowed = {("queued", "running"), ("running", "queued")} | {("running", f) for f in FINAL_STATES}
    for job_id, job in jobs.items():
        assert job.state == "succeeded", (job_id, job.state, job.error)
        assert plans.get(job_id) == 1, (job_id, plans.get(job_id))
        states = [e["status"] for e in history[job_id]]
        assert states[0] == "queued" and states[-1] == "succeeded", states
        assert all(step in allowed for step in itertools.pairwise(states)), states
        attempts = [e["attempt"] for e in history[job_id] if e["status"] == "running"]
        assert attempts == list(range(1, job.attempts + 1)), (attempts, job.attempts)
    return sum(j.attempts > 1 for j in jobs.values())


def _running_a_job(workers: list[subprocess.Popen[bytes]], db: Database, wait_s: float,
                   all_final: Callable[[], bool]) -> list[subprocess.Popen[bytes]]:
    """The workers (each its own process group) that hold a running job's lease, waiting up to ``wait_s`` for
    one while jobs remain; the lease owner is ``host:pid:suffix`` (service.jobs.runner.worker_id)."""
    deadline = time.monotonic() + wait_s
    while True:
        with db.session(read_only=True) as s:
            owners = s.scalars(select(Job.lease_owner).where(Job.state == "running")).all()
        groups = set()
        for owner in owners:
            parts = (owner or "").split(":")
            if len(parts) >= 3 and parts[-2].isdigit():
                with suppress(ProcessLookupError):
                    groups.add(os.getpgid(int(parts[-2])))
        busy = [w for w in workers if w.pid in groups]
        if busy or time.monotonic() > deadline or all_final():
            return busy
        time.sleep(0.05)


def test_workers_killed_at_random_lose_no_job(tmp_path: Path) -> None:
    rng = random.Random(18)
    with redis_server() as redis, celery_api(tmp_path, redis) as (api, cfg):
        env = service_env(cfg.database_url, redis.url, PLACER_MAX_ATTEMPTS="20")
        log = tmp_path / "workers.log"
        workers = [start_worker(env, 2, log) for _ in range(3)]
        gid, tid = api.graph(), api.topology()
        ids = [api.submit(gid, tid, "sleepy", options=SLEEPY, cache=False)["id"] for _ in range(100)]
        db: Database = api.client.app.state.ctx.db  # type: ignore[attr-defined]
        kills = 0

        def all_final() -> bool:
            with db.session(read_only=True) as s:
                return s.scalar(select(func.count()).select_from(Job).where(
                    Job.id.in_(ids), Job.state.in_(FINAL_STATES))) == len(ids)

        try:
            while kills < 12:
                # a worker running a job where one is (on a loaded machine workers start slowly: a victim drawn
                # blindly may never have run a job), else any
                busy = _running_a_job(workers, db, 10.0, all_final)
                victim = busy[rng.randrange(len(busy))] if busy else workers[rng.randrange(len(workers))]
                workers.remove(victim)
                kill_group(victim)  # the worker and its solver processes, mid-job
                victim.wait()
                kills += 1
                workers.append(start_worker(env, 2, log))
                time.sleep(rng.uniform(0.5, 1.5))

            wait_until(all_final, 120, "every job finished")
        finally:
            for w in workers:
                stop(w)
        retried = assert_executed_once(db, ids)
        assert kills >= 10 and retried >= 1


def test_redis_restarted_mid_run_every_job_finishes(tmp_path: Path) -> None:
    with redis_server() as redis, celery_api(tmp_path, redis) as (api, cfg):
        env = service_env(cfg.database_url, redis.url)
        worker = start_worker(env, 2, tmp_path / "worker.log")
        db: Database = api.client.app.state.ctx.db  # type: ignore[attr-defined]
        try:
            gid, tid = api.graph(), api.topology()
            ids = [api.submit(gid, tid, "sleepy", options=SLEEPY, cache=False)["id"] for _ in range(24)]

            def finished() -> int:
                with db.session(read_only=True) as s:
                    return int(s.scalar(select(func.count()).select_from(Job).where(
                        Job.id.in_(ids), Job.state.in_(FINAL_STATES))) or 0)

            wait_until(lambda: finished() >= 2, 60, "the first jobs finished")
            redis.kill()  # no persistence: every message waiting in the broker is gone
            time.sleep(1.0)
            redis.start()
            assert finished() < len(ids)
            wait_until(lambda: finished() == len(ids), 90, "every job finished after the Redis restart")
        finally:
            stop(worker)
        assert_executed_once(db, ids)
