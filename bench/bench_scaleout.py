"""Scale-out on Celery workers (docs/benchmarks.md, "Scale-out").

``.venv/bin/python -m bench.bench_scaleout`` starts a private Redis, a fresh PostgreSQL schema
(the server on 127.0.0.1:5432), one ``placer serve --workers 0`` with ``PLACER_DISPATCH=celery``
and 1, then 2 ``placer worker --concurrency 1`` processes, and measures with each:

* jobs per minute: ``--jobs`` trivial jobs (``sleepy`` with ``sleep_s=0``) submitted by 10
  client threads, from the first submission until every job is finished;
* the wall time of 12 CPU-bound jobs submitted at once (``busy``, a fixed amount of pure-Python
  work on one core each; the rows of a 12-solver comparison are 12 such jobs), and the speed-up
  from 1 to 2 workers.

Each figure is the median of ``--repeats`` runs.  The ``busy`` and ``sleepy`` solvers come from
the test plugin (``tests/service/plugins``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from solvers.generate import generate_graph, generate_topology
from tests.service.conftest import PLUGINS, database_url
from tests.service.jobs.processes import free_port, redis_server, service_env, start_server, start_worker, stop
from tests.service.jobs.test_outages import _key

FINAL = ("succeeded", "failed", "cancelled")


def _wait_all(http: httpx.Client, ids: list[str], timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    pending = list(ids)
    while pending:
        assert time.monotonic() < deadline, f"{len(pending)} jobs unfinished"
        job = http.get(f"/v1/jobs/{pending[0]}").json()
        if job["status"] in FINAL:
            assert job["status"] == "succeeded", job
            pending.pop(0)
        else:
            time.sleep(0.05)


def _run(http: httpx.Client, bodies: list[dict[str, Any]]) -> float:
    """Submit every body (10 client threads), wait for every job; seconds from first submission to last end."""
    started = time.monotonic()
    with ThreadPoolExecutor(10) as pool:
        ids = list(pool.map(lambda b: str(http.post("/v1/jobs", json=b).json()["id"]), bodies))
    _wait_all(http, ids)
    return time.monotonic() - started


def measure(workers: int, jobs: int, iterations: int, repeats: int) -> dict[str, float]:
    with redis_server() as redis, database_url("postgres", Path(tempfile.mkdtemp())) as url:
        env = service_env(url, redis.url, PLACER_LEASE_S="10", PLACER_KEY_CACHE_S="10",
                          PLACER_MAX_ATTEMPTS="3", PLACER_REAPER_INTERVAL_S="2")
        headers = _key(env, "bench")
        port = free_port()
        server = start_server(env, port)
        procs = [start_worker(env, 1) for _ in range(workers)]
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as http:
                gid = http.post("/v1/graphs", json=generate_graph("random_dag", n_ops=20, seed=1).to_document()).json()["id"]
                tid = http.post("/v1/topologies", json=generate_topology("hierarchical", nodes=1).to_document()).json()["id"]
                base = {"graph_id": gid, "topology_id": tid, "cache": False}
                trivial = [{**base, "solver": "sleepy", "options": {"sleep_s": 0.0, "report_progress": False}}] * jobs
                busy = [{**base, "solver": "busy", "options": {"iterations": iterations}}] * 12
                _run(http, trivial[: 2 * workers])  # every worker up and its forkserver warm
                per_min = [60.0 * jobs / _run(http, trivial) for _ in range(repeats)]
                busy_s = [_run(http, busy) for _ in range(repeats)]
        finally:
            for p in procs:
                stop(p)
            stop(server)
    return {"jobs_per_min": statistics.median(per_min), "busy12_s": statistics.median(busy_s)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--iterations", type=int, default=20_000_000, help="busy solver work per job")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(PLUGINS))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH")) if p)
    print(f"cpus={os.cpu_count()} load average before: {os.getloadavg()}")
    results = {n: measure(n, args.jobs, args.iterations, args.repeats) for n in (1, 2)}
    for n, r in results.items():
        print(f"{n} worker(s): {r['jobs_per_min']:.0f} jobs/min (trivial jobs); 12 busy jobs in {r['busy12_s']:.2f} s")
    print(f"speed-up of 12 CPU-bound jobs, 1 -> 2 workers: {results[1]['busy12_s'] / results[2]['busy12_s']:.2f}x")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
