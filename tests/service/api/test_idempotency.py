"""Parallel retries with one ``Idempotency-Key``: every request gets the one resource, at once.

Ten threads send the same request at the same moment, through the app's own thread pool and
event loop, on SQLite (one writer at a time) and PostgreSQL (a unique index decides).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.service.conftest import Api

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
                assert r.json()["field"] == "Idempotency-Key"
        listed = api.get(path, params={"limit": 100}).json()["items"]
        assert sum(item["id"] in ids for item in listed) == 1
