"""Overload benchmark (docs/benchmarks.md, "Overload"): ``placer serve`` under more clients than it admits.

``.venv/bin/python -m bench.bench_overload`` starts ``placer serve`` on a fresh SQLite file and on a
fresh PostgreSQL schema (``--postgres-url``), uploads a graph and a topology, runs one job, then for
each client count (``--clients``, default 50 200 500) runs a burst of ``--seconds`` of a mixed load
over loopback, each client a keep-alive connection sending its next request as soon as the last is
answered; after a 503 or 429 it waits the answer's ``Retry-After`` (``--hammer``: it does not,
and sends again at once):

* 50 % ``GET /v1/jobs/{id}``, 20 % ``GET /v1/topologies?limit=20``, 15 % ``GET /v1/jobs?limit=20``,
  15 % ``POST /v1/jobs`` (a body whose plan is cached: the job finishes at submission).

It reports per burst: requests answered, p50, p99 and maximum latency (all answers), the answer mix by status,
how many 503/429 lacked ``Retry-After`` (target 0), client timeouts (no answer within the request
deadline plus 5 s; target 0), ``/healthz`` latency measured every 50 ms on its own connection
during the burst (p50, max; target < 100 ms), and the recovery time: from the burst's end until
``GET /v1/jobs/{id}`` and ``GET /v1/topologies?limit=20`` both answer 200 (target < 5 s).
The load generator shares the machine's cores with the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.bench_load import POSTGRES_URL, fresh_database
from bench.bench_service import Server, _inputs, _wait

CLIENT_TIMEOUT_S = 35.0  # the default request deadline (30 s) plus 5 s


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, raw: bytes) -> tuple[int, float | None]:
    """Send one request and read its answer: (status, its Retry-After in seconds or None)."""
    writer.write(raw)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    await reader.readexactly(int(headers.get("content-length", "0")))
    if headers.get("connection", "").lower() == "close":
        raise ConnectionResetError("closed by the server")
    return status, float(headers["retry-after"]) if "retry-after" in headers else None


def _raw(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _client(port: int, mix: list[bytes], until: float, out: dict[str, Any], seed: int, hammer: bool) -> None:
    rng = random.Random(seed)
    reader = writer = None
    while time.monotonic() < until:
        raw = rng.choice(mix)
        started = time.monotonic()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert reader is not None
            status, retry_after = await asyncio.wait_for(_request(reader, writer, raw), CLIENT_TIMEOUT_S)
        except TimeoutError:
            out["timeouts"] += 1
            status, retry_after = 0, None
        except (OSError, asyncio.IncompleteReadError):
            out["errors"] += 1
            if writer is not None:
                writer.close()
            reader = writer = None
            await asyncio.sleep(0.05)
            continue
        if status == 0:
            if writer is not None:
                writer.close()
            reader = writer = None
            continue
        out["latencies"].append(time.monotonic() - started)
        out["statuses"][status] += 1
        if status in (429, 503) and retry_after is None:
            out["missing_retry_after"] += 1
        elif retry_after is not None and not hammer:
            await asyncio.sleep(min(retry_after, max(0.0, until - time.monotonic())))
    if writer is not None:
        writer.close()


async def _probe(port: int, until: float, latencies: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    raw = _raw("GET", "/healthz", {})
    while time.monotonic() < until:
        started = time.monotonic()
        status, _ = await _request(reader, writer, raw)
        assert status == 200, status
        latencies.append(time.monotonic() - started)
        await asyncio.sleep(0.05)
    writer.close()


async def _burst(port: int, mix: list[bytes], clients: int, seconds: float, hammer: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"latencies": [], "statuses": Counter(), "timeouts": 0, "errors": 0,
                           "missing_retry_after": 0}
    health: list[float] = []
    until = time.monotonic() + seconds
    await asyncio.gather(_probe(port, until, health),
                         *(_client(port, mix, until, out, seed, hammer) for seed in range(clients)))
    lat = sorted(out["latencies"])
    return {"clients": clients, "seconds": seconds, "hammer": hammer, "answered": len(lat),
            "per_s": round(len(lat) / seconds, 1),
            "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
            "p99_ms": round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1) if lat else None,
            "max_ms": round(1000 * lat[-1], 1) if lat else None,
            "answers": dict(sorted(out["statuses"].items())), "missing_retry_after": out["missing_retry_after"],
            "timeouts": out["timeouts"], "connection_errors": out["errors"],
            "healthz_p50_ms": round(1000 * statistics.median(health), 1) if health else None,
            "healthz_max_ms": round(1000 * max(health), 1) if health else None}


def _recovery_s(server: Server, job_id: str, burst_end: float) -> float:
    """Seconds from the burst's end until a job read and a list both answer 200."""
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as http:
        while True:
            ok = (http.get(f"/v1/jobs/{job_id}").status_code == 200
                  and http.get("/v1/topologies", params={"limit": 20}).status_code == 200)
            if ok:
                return round(time.monotonic() - burst_end, 2)
            time.sleep(0.05)


def run(backend: str, database_url: str, clients: list[int], seconds: float, hammer: bool) -> list[dict[str, Any]]:
    server = Server(database_url, workers=1)
    rows = []
    try:
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as http:
            gid, tid = _inputs(http)
            body = {"graph_id": gid, "topology_id": tid, "solver": "single", "objective": "latency"}
            job = http.post("/v1/jobs", json=body).json()
            assert "id" in job, job
            _wait(http, job["id"])
        port = int(server.url.rsplit(":", 1)[1])
        submit = json.dumps(body).encode()
        mix = ([_raw("GET", f"/v1/jobs/{job['id']}", server.headers)] * 10
               + [_raw("GET", "/v1/topologies?limit=20", server.headers)] * 4
               + [_raw("GET", "/v1/jobs?limit=20", server.headers)] * 3
               + [_raw("POST", "/v1/jobs", server.headers, submit)] * 3)
        for n in clients:
            row = asyncio.run(_burst(port, mix, n, seconds, hammer))
            row["recovery_s"] = _recovery_s(server, job["id"], time.monotonic())
            row["backend"] = backend
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=[50, 200, 500])
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each burst")
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument("--hammer", action="store_true", help="send again at once after a 503/429 (no Retry-After)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for backend in args.backends:
            with fresh_database(backend, Path(folder), args.postgres_url) as url:
                run(backend, url, args.clients, args.seconds, args.hammer)


if __name__ == "__main__":
    main()
