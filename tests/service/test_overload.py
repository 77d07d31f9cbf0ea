"""Overload and slow clients against a real ``placer serve`` over loopback (service.overload,
service.protocol): a burst over capacity is answered 2xx/503/429 with ``Retry-After`` and never
500, ``/healthz`` stays fast, full service returns at once, SIGTERM mid-burst exits within the
grace period, slow headers and slow bodies get 408 and a closed connection, a client that left
while queued gets no work.  The servers admit few requests so that a small burst overloads them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.auth import create_key
from service.db import migrate
from service.db.engine import Database
from service.overload import AdmissionMiddleware, Gate, route_class
from solvers.generate import generate_graph, generate_topology
from tests.service.conftest import BACKENDS, assert_problem, database_url, new_api, running_app
from tests.service.jobs.processes import free_port, kill_group, start_server

SMALL = {"PLACER_ADMIT_READS": "2", "PLACER_ADMIT_LISTS": "1", "PLACER_ADMIT_WRITES": "1", "PLACER_ADMIT_QUEUE": "4",
         "PLACER_ADMIT_WAIT_S": "0.2", "PLACER_HEADER_TIMEOUT_S": "0.5", "PLACER_BODY_TIMEOUT_S": "0.5",
         "PLACER_RATE_LIMIT_PER_S": "0", "PLACER_GRACEFUL_SHUTDOWN_S": "1", "PLACER_LOG_LEVEL": "warning",
         "PLACER_AUTO_MIGRATE": "true"}


class Served:
    """A ``placer serve`` process with a project key, a graph, a topology and a finished job."""

    def __init__(self, url: str, extra: dict[str, str] | None = None) -> None:
        db = Database(url)
        try:
            migrate.upgrade(db.engine)
            with db.session() as s:
                key = create_key(s, f"overload-{os.urandom(4).hex()}")
        finally:
            db.dispose()
        self.port = free_port()
        self.headers = {"Authorization": f"Bearer {key}"}
        env = {**os.environ, **SMALL, "PLACER_DATABASE_URL": url, **(extra or {})}
        self.proc = start_server(env, self.port)
        self.base = f"http://127.0.0.1:{self.port}"
        with httpx.Client(base_url=self.base, headers=self.headers, timeout=30) as http:
            gid = http.post("/v1/graphs", json=generate_graph("random_dag", n_ops=8, seed=3).to_document()).json()["id"]
            tid = http.post("/v1/topologies", json=generate_topology("hierarchical", nodes=1, gpus_per_node=2)
                            .to_document()).json()["id"]
        self.graph_id, self.topology_id = gid, tid

    def raw(self, method: str, path: str, body: bytes = b"") -> bytes:
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in self.headers.items())]
        if body:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    def stop(self) -> None:
        kill_group(self.proc, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
            self.proc.wait()


@pytest.fixture(scope="module", params=BACKENDS)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with database_url(request.param, tmp_path_factory.mktemp("overload")) as url:
        server = Served(url)
        try:
            yield server
        finally:
            server.stop()


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, raw: bytes) -> tuple[int, dict[str, str]]:
    writer.write(raw)
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    await reader.readexactly(int(headers.get("content-length", "0")))
    return int(head[0].split(" ")[1]), headers


async def _burst(server: Served, clients: int, seconds: float, mix: list[bytes]) -> tuple[Counter[int], list[str],
                                                                                             list[float]]:
    """``clients`` keep-alive connections sending the ``mix`` for ``seconds``, and a /healthz probe."""
    statuses: Counter[int] = Counter()
    problems: list[str] = []
    health: list[float] = []
    until = time.monotonic() + seconds

    async def client(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        n = i
        while time.monotonic() < until:
            status, headers = await asyncio.wait_for(_answer(reader, writer, mix[n % len(mix)]), 10)
            n += 1
            statuses[status] += 1
            if status in (429, 503) and "retry-after" not in headers:
                problems.append(f"{status} without Retry-After")
        writer.close()

    async def probe() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        await asyncio.sleep(0.2)  # the burst is under way
        while time.monotonic() < until:
            started = time.monotonic()
            status, _ = await asyncio.wait_for(_answer(reader, writer, server.raw("GET", "/healthz")), 5)
            health.append(time.monotonic() - started)
            assert status == 200
            await asyncio.sleep(0.05)
        writer.close()

    await asyncio.gather(probe(), *(client(i) for i in range(clients)))
    return statuses, problems, health


def _mix(server: Served) -> list[bytes]:
    submit = json.dumps({"graph_id": server.graph_id, "topology_id": server.topology_id, "solver": "even"}).encode()
    return [server.raw("GET", f"/v1/graphs/{server.graph_id}"), server.raw("GET", "/v1/topologies?limit=20"),
            server.raw("GET", "/v1/jobs?limit=20"), server.raw("POST", "/v1/jobs", submit),
            server.raw("GET", f"/v1/topologies/{server.topology_id}")]


def test_a_burst_over_capacity_is_answered_2xx_or_503_with_retry_after(served: Served) -> None:
    statuses, problems, health = asyncio.run(_burst(served, 40, 1.5, _mix(served)))
    assert set(statuses) <= {200, 202, 429, 503}, statuses
    assert statuses[503] > 0 and statuses[200] > 0, statuses  # overloaded, yet serving
    assert problems == []
    assert health and statistics.median(health) < 0.1, health  # /healthz bypasses admission
    started = time.monotonic()  # full service right after the burst
    with httpx.Client(base_url=served.base, headers=served.headers, timeout=5) as http:
        assert http.get("/v1/topologies", params={"limit": 20}).status_code == 200
        assert http.get("/readyz").status_code == 200
        scraped = http.get("/metrics").text
    assert time.monotonic() - started < 5
    refused = sum(float(line.rsplit(" ", 1)[1]) for line in scraped.splitlines()
                  if line.startswith("placer_admission_refused_total{"))
    assert refused == statuses[503], (refused, statuses)


def test_healthz_answered_by_the_protocol_keeps_the_connection_usable(served: Served) -> None:
    """``GET /healthz`` is answered in the protocol (service.protocol); the keep-alive connection
    then serves the application's routes, and ``Connection: close`` closes it."""
    async def talk() -> list[tuple[int, dict[str, str]]]:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        answers = [await _answer(reader, writer, served.raw("GET", path))
                   for path in ("/healthz", "/readyz", "/healthz", f"/v1/graphs/{served.graph_id}", "/healthz")]
        answers.append(await _answer(reader, writer, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
        assert await reader.read() == b""  # closed
        writer.close()
        return answers

    answers = asyncio.run(talk())
    assert [status for status, _ in answers] == [200] * 6
    assert answers[-1][1]["connection"] == "close"


def _read_all(sock: socket.socket) -> tuple[float, bytes]:
    started, data = time.monotonic(), b""
    while chunk := sock.recv(65536):
        data += chunk
    return time.monotonic() - started, data


def test_headers_that_never_finish_get_408_and_the_connection_closed(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: applic")
        waited, data = _read_all(sock)
    assert data.startswith(b"HTTP/1.1 408 "), data
    assert b"connection: close" in data.lower() and b"/problems/request-timeout" in data
    assert 0.4 < waited < 3


def test_a_body_that_stops_gets_408_and_the_connection_closed(served: Served) -> None:
    head = served.raw("POST", "/v1/graphs").removesuffix(b"\r\n")
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(head + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"op\":")  # 6 of 1,000
        waited, data = _read_all(sock)
    assert data.startswith(b"HTTP/1.1 408 "), data
    assert b"connection: close" in data.lower() and b'"field":"body"' in data.replace(b" ", b"")
    assert 0.4 < waited < 3


def test_a_request_whose_client_left_while_queued_does_no_work() -> None:
    """ASGI level: the one slot is held; the queued request's client disconnects; when the slot
    frees the request is dropped without reaching the application."""
    reached: list[str] = []
    release = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        if scope["path"] == "/v1/jobs/first":
            await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def main() -> list[int]:
        gates = {name: Gate(name, 1, 4, 5.0) for name in ("reads", "lists", "writes", "streams")}
        middleware = AdmissionMiddleware(app, gates, deadline_s=5.0, body_timeout_s=5.0)
        sent: list[int] = []

        async def send(message: Any) -> None:
            if message["type"] == "http.response.start":
                sent.append(message["status"])

        async def connected() -> Any:
            await asyncio.sleep(10)

        async def gone() -> Any:
            return {"type": "http.disconnect"}

        def scope(path: str) -> dict[str, Any]:
            return {"type": "http", "method": "GET", "path": path, "headers": []}

        first = asyncio.ensure_future(middleware(scope("/v1/jobs/first"), connected, send))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(middleware(scope("/v1/jobs/second"), gone, send))
        await asyncio.sleep(0.01)
        assert gates["reads"].waiters, "the second request waits for the slot"
        release.set()
        await asyncio.gather(first, second)
        assert gates["reads"].dropped == 1 and gates["reads"].in_flight == 0
        return sent

    assert asyncio.run(main()) == [200]
    assert reached == ["/v1/jobs/first"]


def test_a_request_past_its_deadline_is_503_and_keeps_its_slot_until_it_ends() -> None:
    """ASGI level: a handler slower than the deadline; the client gets 503 deadline-exceeded with
    Retry-After at the deadline, the handler is cancelled, and its slot is freed when it ends."""
    ended = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            await asyncio.sleep(5)
        finally:
            ended.set()

    async def main() -> tuple[list[Any], float, Gate]:
        gate = Gate("reads", 1, 0, 0.0)
        middleware = AdmissionMiddleware(app, {"reads": gate}, deadline_s=0.2, body_timeout_s=5.0)
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        async def receive() -> Any:
            return {"type": "http.request", "body": b"", "more_body": False}

        started = time.monotonic()
        await middleware({"type": "http", "method": "GET", "path": "/v1/jobs/j", "headers": []}, receive, send)
        took = time.monotonic() - started
        await asyncio.wait_for(ended.wait(), 1)
        await asyncio.sleep(0)
        return sent, took, gate

    sent, took, gate = asyncio.run(main())
    assert 0.15 < took < 1.0, took
    start = sent[0]
    assert start["status"] == 503 and (b"retry-after", b"1") in start["headers"]
    assert b"/problems/deadline-exceeded" in sent[1]["body"]
    assert gate.in_flight == 0 and gate.late == 1


def test_a_request_that_cannot_get_a_pooled_connection_is_503(tmp_path: Path) -> None:
    """The pool's one connection is held: a request waits the pool timeout, then 503 database-busy
    with Retry-After (not 500)."""
    with running_app("sqlite", tmp_path, workers=0, db_pool_size=1, db_max_overflow=0, db_pool_timeout_s=0.3,
                     key_cache_s=0) as (client, cfg):
        api = new_api(client, cfg)
        db = client.app.state.ctx.db  # type: ignore[attr-defined]
        with db.engine.connect():
            r = api.get("/v1/graphs")
        assert_problem(r, 503, slug="database-busy")
        assert r.headers["Retry-After"] == "2"
        assert api.get("/v1/graphs").status_code == 200


def test_route_classes() -> None:
    def of(method: str, path: str) -> str | None:
        return route_class({"method": method, "path": path})

    assert [of("GET", p) for p in ("/healthz", "/readyz", "/metrics")] == [None, None, None]
    assert of("GET", "/v1/jobs") == of("GET", "/v1/topologies") == "lists"
    assert of("GET", "/v1/jobs/job_1") == of("HEAD", "/v1/plans/p") == of("GET", "/jobs") == "reads"
    assert of("POST", "/v1/jobs") == of("DELETE", "/v1/graphs/g") == "writes"
    assert of("GET", "/v1/jobs/job_1/events") == "streams"


def test_sigterm_mid_burst_exits_within_the_grace_period(served: Served) -> None:
    """Last in this module (it stops the module's server): event streams of a job that never runs
    (the server has no workers) stay open for ever, slow bodies hold their requests, a burst is
    under way; SIGTERM ends it all within the grace period (1 s) plus the app's own shutdown."""
    with httpx.Client(base_url=served.base, headers=served.headers, timeout=10) as http:
        job = http.post("/v1/jobs", json={"graph_id": served.graph_id, "topology_id": served.topology_id,
                                          "solver": "even", "cache": False}).json()
    assert job["status"] == "queued", job

    async def burst_then_sigterm() -> float:
        held = [await asyncio.open_connection("127.0.0.1", served.port) for _ in range(6)]
        for i, (_, writer) in enumerate(held):
            writer.write(served.raw("GET", f"/v1/jobs/{job['id']}/events") if i % 2 else
                         served.raw("POST", "/v1/graphs").removesuffix(b"\r\n")
                         + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
        load = asyncio.ensure_future(_burst(served, 30, 4.0, _mix(served)))
        await asyncio.sleep(0.8)
        served.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        while served.proc.poll() is None and time.monotonic() - signalled < 15:
            await asyncio.sleep(0.05)
        took = time.monotonic() - signalled
        load.cancel()
        for _, writer in held:
            writer.close()
        return took

    took = asyncio.run(burst_then_sigterm())
    assert served.proc.poll() is not None, "still running 15 s after SIGTERM"
    assert took < 1.0 + 3.0, took
