"""Retries and faults that a real server does not produce on demand (httpx.MockTransport)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from client import Client, Conflict, PlacerConnectionError, RateLimited, ServerError
from client._http import RetryPolicy
from client.errors import PlacerAPIError
from client.models import JobEvent
from tests.client.conftest import free_port

Handler = Callable[[httpx.Request], httpx.Response]
PROBLEM = {"type": "/problems/x", "title": "T", "status": 0, "detail": "d"}


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The delays the client waited (nothing is actually slept)."""
    delays: list[float] = []
    monkeypatch.setattr("client._http.time.sleep", delays.append)
    monkeypatch.setattr("client.sync.time.sleep", delays.append)
    return delays


def scripted(answers: list[httpx.Response | Exception]) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.MockTransport(handle), seen


def problem(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, json={**PROBLEM, "status": status}, headers=headers)


def client_on(transport: httpx.MockTransport, retries: int = 4) -> Client:
    return Client("http://placer.test", "plc_k", transport=transport, retry=RetryPolicy(max_retries=retries))


def test_gets_are_retried_on_502_503_504_with_growing_jittered_backoff(sleeps: list[float]) -> None:
    transport, seen = scripted([problem(502), problem(503), problem(504), httpx.Response(200, json=[])])
    assert client_on(transport).solvers() == []
    assert len(seen) == 4 and len(sleeps) == 3
    policy = RetryPolicy()
    assert all(0 <= d <= policy.backoff_s * 2 ** i for i, d in enumerate(sleeps))


def test_429_waits_for_retry_after_then_gives_up_with_it(sleeps: list[float]) -> None:
    transport, seen = scripted([problem(429, **{"Retry-After": "3"})] * 3)
    with pytest.raises(RateLimited) as err:
        client_on(transport, retries=2).solvers()
    assert err.value.retry_after == 3.0 and len(seen) == 3
    assert sleeps and all(3.0 <= d < 3.5 for d in sleeps)


def test_a_post_without_key_is_not_retried(sleeps: list[float]) -> None:
    transport, seen = scripted([problem(503)])
    with pytest.raises(ServerError):
        client_on(transport).submit("g_1", "t_1", "even", idempotency_key=False)
    assert len(seen) == 1 and "Idempotency-Key" not in seen[0].headers and not sleeps


def test_submit_carries_a_fresh_key_and_is_retried_on_503_and_in_flight_409(sleeps: list[float]) -> None:
    transport, seen = scripted([problem(503), problem(409), httpx.ReadError("reset"),
                                httpx.Response(202, json=_job("queued"))])
    assert client_on(transport).submit("g_1", "t_1", "even").id == "job_1"
    keys = {r.headers["Idempotency-Key"] for r in seen}
    assert len(seen) == 4 and len(keys) == 1 and len(next(iter(keys))) == 36


def test_in_progress_409_of_a_keyed_post_waits_for_retry_after(sleeps: list[float]) -> None:
    in_progress = {"Retry-After": "2"}
    transport, seen = scripted([problem(409, **in_progress), problem(409, **in_progress),
                                httpx.Response(202, json=_job("queued"))])
    assert client_on(transport).submit("g_1", "t_1", "even", idempotency_key="k1").id == "job_1"
    assert len(seen) == 3 and {r.headers["Idempotency-Key"] for r in seen} == {"k1"}
    assert len(sleeps) == 2 and all(2.0 <= d < 2.5 for d in sleeps)


def test_409_without_key_is_a_conflict_at_once(sleeps: list[float]) -> None:
    transport, seen = scripted([problem(409)])
    with pytest.raises(Conflict):
        client_on(transport).cancel("job_1")
    assert len(seen) == 1


def test_connect_errors_are_retried_for_any_request_read_errors_only_when_safe(sleeps: list[float]) -> None:
    transport, seen = scripted([httpx.ConnectError("refused"), problem(503)])
    with pytest.raises(ServerError):
        client_on(transport).submit("g_1", "t_1", "even", idempotency_key=False)
    assert len(seen) == 2
    transport, seen = scripted([httpx.ReadError("reset")])
    with pytest.raises(PlacerConnectionError):
        client_on(transport).submit("g_1", "t_1", "even", idempotency_key=False)
    assert len(seen) == 1


def test_a_closed_port_is_unreachable_after_the_retries(sleeps: list[float]) -> None:
    with Client(f"http://127.0.0.1:{free_port()}", "k", retry=RetryPolicy(max_retries=2)) as c, \
            pytest.raises(PlacerConnectionError) as err:
        c.health()
    assert "cannot reach" in str(err.value) and len(sleeps) == 2 and err.value.exit_code == 3


def test_an_error_without_problem_json_keeps_its_text(sleeps: list[float]) -> None:
    transport, _ = scripted([httpx.Response(418, text="teapot")])
    with pytest.raises(PlacerAPIError) as err:
        client_on(transport).health()
    assert err.value.status == 418 and err.value.detail == "teapot"


def _job(status: str) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {"id": "job_1", "status": status, "graph_id": "g", "topology_id": "t", "comparison_id": None,
            "solver": "even", "objective": "throughput", "settings": {}, "options": {}, "time_limit_s": 10.0,
            "cache": True, "cached": False, "cached_from": None, "attempts": 1, "cancel_requested": False,
            "progress": {"fraction": 0.5} if status == "running" else None, "error": None,
            "plan_id": "plan_1" if status == "succeeded" else None,
            "plan_status": "feasible" if status == "succeeded" else None,
            "created_at": now, "started_at": now, "finished_at": None}


def test_wait_falls_back_to_polling_when_the_stream_fails(sleeps: list[float]) -> None:
    states = iter(["queued", "running", "running", "succeeded"])

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            return problem(502)
        return httpx.Response(200, json=_job(next(states)))

    events: list[JobEvent] = []
    with Client("http://placer.test", "k", transport=httpx.MockTransport(handle),
                retry=RetryPolicy(max_retries=0)) as c:
        done = c.wait("job_1", on_event=events.append)
    assert done.status == "succeeded" and done.plan_id == "plan_1"
    assert [e.data.get("status") for e in events if e.event == "state"] == ["queued", "running", "succeeded"]
    assert [e.data["fraction"] for e in events if e.event == "progress"] == [0.5]


def test_wait_resumes_a_broken_stream_after_the_last_event(sleeps: list[float]) -> None:
    streams: list[str | None] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            streams.append(request.headers.get("Last-Event-ID"))
            if len(streams) == 1:  # ends without its `end` event, as a dropped connection does
                return httpx.Response(200, text="retry: 1000\n\nid: 7\nevent: state\ndata: {\"status\":\"running\"}\n\n")
            return httpx.Response(200, text="id: 8\nevent: state\ndata: {\"status\":\"succeeded\"}\n\n"
                                            "event: end\ndata: {\"status\":\"succeeded\"}\n\n")
        return httpx.Response(200, json=_job("succeeded"))

    with Client("http://placer.test", "k", transport=httpx.MockTransport(handle)) as c:
        assert c.wait("job_1").status == "succeeded"
    assert streams == [None, "7"]


def test_uploads_are_gzip_encoded_above_the_threshold() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(400, json={**PROBLEM, "status": 400})

    with Client("http://placer.test", "k", transport=httpx.MockTransport(handle), gzip_above_bytes=100) as c:
        for doc in ({"format": "placer.opgraph/v1"}, {"format": "placer.opgraph/v1", "pad": "x" * 200}):
            with pytest.raises(PlacerAPIError):
                c.upload_graph(doc)
    small, large = seen
    assert "Content-Encoding" not in small.headers and json.loads(small.content)["format"] == "placer.opgraph/v1"
    assert large.headers["Content-Encoding"] == "gzip"
    assert json.loads(gzip.decompress(large.content))["pad"] == "x" * 200
