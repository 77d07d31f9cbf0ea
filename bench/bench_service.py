"""Service benchmarks (docs/benchmarks.md, "Service").

``.venv/bin/python -m bench.bench_service`` starts ``placer serve`` on a fresh SQLite file
(``--database-url`` for PostgreSQL) and measures, over loopback:

* upload of a 50k-op graph end to end (request sent -> 201 received, the server parsing,
  validating, hashing, compressing and storing it), plain JSON and gzip-encoded; target <= 2 s;
* ``GET /v1/jobs/{id}`` latency with 50 concurrent clients (bounded request count and time);
* jobs per minute through the local pool with a trivial solver (``single``, 20-op graph, no cache).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.bench_simulate import layered_graph
from solvers.generate import generate_graph, generate_topology

PLACER = str(Path(sys.executable).with_name("placer"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``placer serve`` in a subprocess with its own database and key."""

    def __init__(self, database_url: str, workers: int, extra_env: dict[str, str] | None = None) -> None:
        self.url = f"http://127.0.0.1:{_free_port()}"
        self.env = {**os.environ, "PLACER_DATABASE_URL": database_url, "PLACER_PORT": self.url.rsplit(":", 1)[1],
                    "PLACER_WORKERS": str(workers), "PLACER_RATE_LIMIT_PER_S": "0", "PLACER_AUTO_MIGRATE": "true",
                    "PLACER_LOG_LEVEL": "warning", **(extra_env or {})}
        key = subprocess.run([PLACER, "key", "create", "--project", f"bench-{os.getpid()}"], env=self.env,
                             check=True, capture_output=True, text=True).stdout.strip()
        self.headers = {"Authorization": f"Bearer {key}"}
        self.proc = subprocess.Popen([PLACER, "serve"], env=self.env, start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("placer serve did not start")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


def bench_upload(server: Server, repeats: int) -> list[dict[str, Any]]:
    """Median wall time of uploading 50k-op graphs (a new graph each time: no dedup shortcut)."""
    rows = []
    makers = {"random_dag": lambda seed: generate_graph("random_dag", n_ops=50_000, seed=seed),
              "layered": lambda seed: layered_graph(50_000, seed=seed)}
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=120) as http:
        for label, make in makers.items():
            for encoding in ("json", "gzip"):
                times, n_edges, size = [], 0, 0
                for rep in range(repeats):
                    graph = make(100 * rep + (encoding == "gzip"))
                    body = json.dumps(graph.to_document()).encode()
                    headers = {"Content-Type": "application/json"}
                    if encoding == "gzip":
                        body, headers["Content-Encoding"] = gzip.compress(body, 1), "gzip"
                    started = time.perf_counter()
                    r = http.post("/v1/graphs", content=body, headers=headers)
                    times.append(time.perf_counter() - started)
                    assert r.status_code == 201, r.text
                    n_edges, size = len(graph.edges), len(body)
                rows.append({"graph": label, "ops": 50_000, "edges": n_edges, "encoding": encoding,
                             "body_MB": round(size / 1e6, 1), "median_s": round(statistics.median(times), 3),
                             "runs_s": [round(t, 3) for t in times]})
    return rows


def _inputs(http: httpx.Client) -> tuple[str, str]:
    gid = http.post("/v1/graphs", json=generate_graph("random_dag", n_ops=20, seed=5).to_document()).json()["id"]
    tid = http.post("/v1/topologies", json=generate_topology("hierarchical", nodes=1).to_document()).json()["id"]
    return gid, tid


def _wait(http: httpx.Client, job_id: str) -> dict[str, Any]:
    while (job := http.get(f"/v1/jobs/{job_id}").json())["status"] in ("queued", "running"):
        time.sleep(0.02)
    return dict(job)


async def _one_connection(host: str, port: int, request: bytes, latencies: list[float], remaining: list[int],
                          stop_at: float) -> None:
    """One keep-alive HTTP/1.1 connection sending ``request`` until the budget is spent.

    A minimal client (raw asyncio streams) so that the load generator, which shares the
    machine, costs far less CPU than the server it measures.
    """
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while remaining[0] > 0 and time.monotonic() < stop_at:
            remaining[0] -= 1
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head.decode(errors="replace"))
    finally:
        writer.close()


async def _hammer(server: Server, path: str, clients: int, total: int, max_s: float) -> list[float]:
    host, port = server.url.removeprefix("http://").split(":")
    auth = server.headers["Authorization"]
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {auth}\r\n\r\n".encode()
    latencies: list[float] = []
    remaining, stop_at = [total], time.monotonic() + max_s
    await asyncio.gather(*(_one_connection(host, int(port), request, latencies, remaining, stop_at)
                           for _ in range(clients)))
    return latencies


def _server_histogram(http: httpx.Client, route: str) -> dict[float, float]:
    """Cumulative bucket counts of the server's own latency histogram for ``route`` (GET, 200)."""
    out = {}
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("placer_http_request_duration_seconds_bucket") and f'route="{route}"' in line \
                and 'method="GET"' in line and 'status="200"' in line:
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def _histogram_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The smallest bucket bound holding the ``q`` quantile of the requests between two scrapes."""
    counts = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = counts[-1][1]
    return next(le for le, c in counts if c >= q * total)


def bench_get_job(server: Server, clients: int, total: int, max_s: float) -> dict[str, Any]:
    route = "/v1/jobs/{job_id:id}"  # the route template, as the metrics label it
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as http:
        gid, tid = _inputs(http)
        job = http.post("/v1/jobs", json={"graph_id": gid, "topology_id": tid, "solver": "even"}).json()
        _wait(http, job["id"])
        before = _server_histogram(http, route)
        started = time.perf_counter()
        lat = sorted(asyncio.run(_hammer(server, f"/v1/jobs/{job['id']}", clients, total, max_s)))
        wall_s = time.perf_counter() - started
        after = _server_histogram(http, route)
    pct = {p: lat[min(len(lat) - 1, int(p / 100 * len(lat)))] * 1e3 for p in (50, 95, 99)}
    return {"clients": clients, "requests": len(lat), "wall_s": round(wall_s, 2),
            "requests_per_s": round(len(lat) / wall_s, 1), "p50_ms": round(pct[50], 1),
            "p95_ms": round(pct[95], 1), "p99_ms": round(pct[99], 1),
            "server_p50_le_ms": _histogram_quantile(before, after, 0.5) * 1e3,
            "server_p99_le_ms": _histogram_quantile(before, after, 0.99) * 1e3}


def bench_jobs_per_minute(server: Server, n_jobs: int) -> dict[str, Any]:
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as http:
        gid, tid = _inputs(http)
        started = time.perf_counter()
        ids = [http.post("/v1/jobs", json={"graph_id": gid, "topology_id": tid, "solver": "single",
                                           "objective": "latency", "cache": False}).json()["id"]
               for _ in range(n_jobs)]
        states = [_wait(http, job_id)["status"] for job_id in ids]
        wall_s = time.perf_counter() - started
    assert states == ["succeeded"] * n_jobs, states
    return {"jobs": n_jobs, "wall_s": round(wall_s, 2), "jobs_per_minute": round(60 * n_jobs / wall_s, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="default: a fresh SQLite file in a temporary folder")
    parser.add_argument("--workers", type=int, default=2, help="local pool size")
    parser.add_argument("--repeats", type=int, default=3, help="uploads per graph kind and encoding")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=5000, help="GET requests in all (bounded by --max-s)")
    parser.add_argument("--max-s", type=float, default=60.0)
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--only", choices=("upload", "get_job", "jobs_per_minute"), help="run one benchmark")
    args = parser.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="placer-bench-")
    server = Server(args.database_url or f"sqlite:///{folder}/bench.db", args.workers)
    try:
        runs = {"upload": lambda: bench_upload(server, args.repeats),
                "get_job": lambda: bench_get_job(server, args.clients, args.requests, args.max_s),
                "jobs_per_minute": lambda: bench_jobs_per_minute(server, args.jobs)}
        results = {name: run() for name, run in runs.items() if args.only in (None, name)}
    finally:
        server.stop()
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
