"""Retries with one ``Idempotency-Key``: every request gets the one resource, or 409
``idempotency-in-progress`` while the first is creating it (the IETF Idempotency-Key draft).

Ten threads send the same request at the same moment, through the app's own thread pool and
event loop, on SQLite (one writer at a time) and PostgreSQL (a unique index decides).  The claim
a request makes on its key is also set up by hand: held (409), held for another body (422),
left by a crashed server and expired (taken over).
"""

from __future__ import annotations

import subprocess
import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from service.auth import bearer_key_hash
from service.db.models import IdempotencyReservation, utcnow
from service.jobs.procs import stat_fields
from service.owner import this_process
from tests.service.conftest import Api, assert_problem

PARALLEL = 10


def _parallel_posts(api: Api, path: str, body: dict[str, Any], key: str) -> list[Any]:
    barrier = threading.Barrier(PARALLEL)
    answers: list[Any] = [None] * PARALLEL

    def send(i: int) -> None:
        barrier.wait()
        answers[i] = api.post(path, json=body, headers={"Idempotency-Key": key})

    threads = [threading.Thread(target=send, args=(i,)) for i in range(PARALLEL)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/comparisons"])
def test_parallel_retries_get_the_one_resource(api: Api, path: str) -> None:
    gid, tid = api.graph(), api.topology()
    body: dict[str, Any] = {"graph_id": gid, "topology_id": tid, "time_limit_s": 5}
    body.update({"solver": "even"} if path == "/v1/jobs" else {"solvers": ["even", "sleepy"],
                                                                "options": {"sleepy": {"sleep_s": 0.1}}})
    for round_no in range(3):
        answers = _parallel_posts(api, path, body, f"retry-{round_no}")
        statuses = sorted(r.status_code for r in answers)
        assert set(statuses) <= {202, 409}, [r.text for r in answers]
        ids = {r.json()["id"] for r in answers if r.status_code == 202}
        assert len(ids) == 1, ids
        for r in answers:
            if r.status_code == 409:
                assert_problem(r, 409, field="Idempotency-Key", slug="idempotency-in-progress")
                assert int(r.headers["Retry-After"]) >= 1
        again = api.post(path, json=body, headers={"Idempotency-Key": f"retry-{round_no}"})
        assert again.status_code == 202 and again.json()["id"] in ids  # after completion: the stored answer
        listed = api.get(path, params={"limit": 100}).json()["items"]
        assert sum(item["id"] in ids for item in listed) == 1


def _job_body(api: Api) -> dict[str, Any]:
    return {"graph_id": api.graph(), "topology_id": api.topology(), "solver": "even", "time_limit_s": 5}


def _digest(body: dict[str, Any]) -> str:
    from service.schemas import JobIn
    from solvers.model.canonical import digest

    return digest(JobIn.model_validate(body).model_dump(mode="json", by_alias=True))


def _hold(api: Api, key: str, body: dict[str, Any], until_s: float, owner: str | None = None) -> None:
    """A claim on ``key`` as a request creating a job with ``body`` makes it (expiring in ``until_s``)."""
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    project = ctx.keys.get(bearer_key_hash(f"Bearer {api.key}"))
    with ctx.db.session() as s:
        s.add(IdempotencyReservation(project_id=project, scope="jobs", key=key, request_digest=_digest(body),
                                     reserved_until=utcnow() + timedelta(seconds=until_s), owner=owner))


def _claims(api: Api, key: str) -> int:
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    with ctx.db.session(read_only=True) as s:
        return len(s.scalars(select(IdempotencyReservation).where(IdempotencyReservation.key == key)).all())


def test_a_held_key_is_409_in_progress_then_the_resource(api: Api) -> None:
    body = _job_body(api)
    api.get("/v1/graphs")  # the key is cached
    _hold(api, "busy", body, until_s=60)
    r = api.post("/v1/jobs", json=body, headers={"Idempotency-Key": "busy"})
    assert_problem(r, 409, field="Idempotency-Key", slug="idempotency-in-progress")
    assert r.headers["Retry-After"] == "1"
    other = api.post("/v1/jobs", json={**body, "time_limit_s": 6}, headers={"Idempotency-Key": "busy"})
    assert_problem(other, 422, field="Idempotency-Key")  # same key, another body: as after completion
    assert _claims(api, "busy") == 1


def test_an_expired_claim_of_a_crashed_request_is_taken_over(api: Api) -> None:
    body = _job_body(api)
    api.get("/v1/graphs")
    _hold(api, "crashed", body, until_s=-1)
    first = api.post("/v1/jobs", json=body, headers={"Idempotency-Key": "crashed"})
    assert first.status_code == 202, first.text
    again = api.post("/v1/jobs", json=body, headers={"Idempotency-Key": "crashed"})
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]
    assert _claims(api, "crashed") == 0


def test_a_claim_of_a_dead_server_process_is_taken_over_at_once(api: Api) -> None:
    """A server killed mid-creation leaves a claim valid for 30 s; its process is gone, so a retry
    takes the claim over at once.  A living owner's claim, or one from another host, holds."""
    body = _job_body(api)
    api.get("/v1/graphs")
    proc = subprocess.Popen(["sleep", "30"])
    try:
        fields = stat_fields(proc.pid)
        assert fields is not None
        dead = this_process().rsplit("/", 2)[0] + f"/{proc.pid}/{fields[19]}"
    finally:
        proc.kill()
        proc.wait()
    _hold(api, "dead-owner", body, until_s=30, owner=dead)
    first = api.post("/v1/jobs", json=body, headers={"Idempotency-Key": "dead-owner"})
    assert first.status_code == 202, first.text
    assert _claims(api, "dead-owner") == 0
    for key, owner in (("live-owner", this_process()), ("other-host", "elsewhere/boot/1/1")):
        _hold(api, key, body, until_s=30, owner=owner)
        assert_problem(api.post("/v1/jobs", json=body, headers={"Idempotency-Key": key}), 409,
                       slug="idempotency-in-progress")


def test_a_failed_creation_releases_its_claim(api: Api) -> None:
    body = {**_job_body(api), "solver": "no-such-solver"}
    for _ in range(2):  # the second is the same 422, not a 409 on a claim left behind
        r = api.post("/v1/jobs", json=body, headers={"Idempotency-Key": "bad"})
        assert_problem(r, 422, field="solver")
    assert _claims(api, "bad") == 0
    assert api.post("/v1/jobs", json={**body, "solver": "even"}, headers={"Idempotency-Key": "bad2"}).status_code == 202


def test_the_reaper_deletes_expired_claims_only(api: Api) -> None:
    from service.jobs import store

    body = _job_body(api)
    api.get("/v1/graphs")
    _hold(api, "never-retried", body, until_s=-1)
    _hold(api, "in-progress", body, until_s=60)
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    with ctx.db.session() as s:
        store.reap(s, ctx.config.max_attempts)
    assert _claims(api, "never-retried") == 0
    assert _claims(api, "in-progress") == 1
