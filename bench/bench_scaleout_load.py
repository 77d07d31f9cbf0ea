"""Scale-out under load (docs/benchmarks.md, "Scale-out"): 2 API processes, 1, 2, 4 Celery workers.

``.venv/bin/python -m bench.bench_scaleout_load`` starts, for each worker count N, a private Redis,
a fresh PostgreSQL schema (the server on 127.0.0.1:5432), two ``placer serve --workers 0`` with
``PLACER_DISPATCH=celery`` and the rate limit off on two ports (the first runs the migrations, the
second starts after it with ``PLACER_AUTO_MIGRATE=false``) and N ``placer worker --concurrency 1``.
Then 50 client connections, half on each API port, run for ``--duration-s``:

* per port, ``wrk`` with ``get_mix.lua`` (GET of a job, a plan, a graph in turn) on
  ``50 / 2 - submitters`` connections;
* per port, ``wrk`` with ``submit.lua`` on ``--submitters`` connections posting a short real solve
  (the ``busy`` test solver, ``--job-iterations`` loop iterations, cache off).

It reports jobs per minute completed by the workers during the window (succeeded jobs counted in
the database at its start and end), submissions, GET requests/s, GET p50/p99 (wrk's latency
distribution, worst of the two ports) and errors.  Then, with 1 and 2 workers (fresh setup each),
it measures the wall time of 12 CPU-bound jobs submitted at once (``busy``, ``--iterations``, about 0.4 s each here; the
rows of a 12-solver comparison are 12 such jobs), median of ``--repeats``, and the speed-up.
Everything runs on 127.0.0.1 and stops by itself; every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from bench.bench_load import POSTGRES_URL, _result, _wrk, fresh_database
from bench.bench_scaleout import _run, _wait_all
from solvers.generate import generate_graph, generate_topology
from tests.service.conftest import PLUGINS
from tests.service.jobs.processes import free_port, redis_server, service_env, start_server, start_worker, stop
from tests.service.jobs.test_outages import _key

CLIENTS = 50


@dataclass
class Cluster:
    """Two API processes and N workers on one schema; ``urls`` of the two APIs."""

    urls: list[str]
    headers: dict[str, str]
    db_url: str


@contextmanager
def cluster(workers: int, postgres_url: str) -> Iterator[Cluster]:
    with ExitStack() as stack:
        redis = stack.enter_context(redis_server())
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        url = stack.enter_context(fresh_database("postgresql", folder, postgres_url))
        env = service_env(url, redis.url, PLACER_LEASE_S="30", PLACER_REAPER_INTERVAL_S="5",
                          PLACER_MAX_ATTEMPTS="3", PLACER_KEY_CACHE_S="30")
        ports = [free_port(), free_port()]
        procs = [start_server(env, ports[0])]  # runs the migrations

        @stack.callback
        def _stop_all() -> None:
            for p in reversed(procs):
                stop(p)

        procs.append(start_server({**env, "PLACER_AUTO_MIGRATE": "false"}, ports[1]))
        headers = _key(env, "bench")
        procs += [start_worker(env, 1) for _ in range(workers)]
        yield Cluster([f"http://127.0.0.1:{p}" for p in ports], headers, url)


def _inputs(c: Cluster) -> dict[str, Any]:
    with httpx.Client(base_url=c.urls[0], headers=c.headers, timeout=60) as http:
        gid = http.post("/v1/graphs", json=generate_graph("random_dag", n_ops=20, seed=1).to_document()).json()["id"]
        tid = http.post("/v1/topologies", json=generate_topology("hierarchical", nodes=1).to_document()).json()["id"]
    return {"graph_id": gid, "topology_id": tid, "cache": False}


def _succeeded(db_url: str) -> int:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM jobs WHERE state = 'succeeded'")).scalar_one())
    finally:
        engine.dispose()


def _files(c: Cluster, base: dict[str, Any], job_iterations: int, folder: Path) -> tuple[Path, Path]:
    """Warm every worker with a few jobs; the GET paths file and the submission body file."""
    body = {**base, "solver": "busy", "options": {"iterations": job_iterations}}
    with httpx.Client(base_url=c.urls[0], headers=c.headers, timeout=60) as http:
        ids = [str(http.post("/v1/jobs", json=body).json()["id"]) for _ in range(8)]
        _wait_all(http, ids)
        paths = [f"/v1/graphs/{base['graph_id']}"]
        for i in ids[:4]:
            paths += [f"/v1/jobs/{i}", f"/v1/plans/{http.get(f'/v1/jobs/{i}').json()['plan_id']}"]
    key = c.headers["Authorization"].removeprefix("Bearer ")
    paths_file, body_file = folder / "paths.txt", folder / "submit.txt"
    paths_file.write_text("\n".join([key, *paths]) + "\n")
    body_file.write_text(key + "\n" + json.dumps(body))
    return paths_file, body_file


def load_run(workers: int, args: argparse.Namespace) -> dict[str, Any]:
    with cluster(workers, args.postgres_url) as c, tempfile.TemporaryDirectory() as tmp:
        paths_file, body_file = _files(c, _inputs(c), args.job_iterations, Path(tmp))
        per_port_gets = CLIENTS // 2 - args.submitters
        before, load0 = _succeeded(c.db_url), os.getloadavg()
        procs = [(_wrk("get_mix.lua", paths_file, u, per_port_gets, args.duration_s, 1),
                  _wrk("submit.lua", body_file, u, args.submitters, args.duration_s, 1)) for u in c.urls]
        results = [(_result(g), _result(p)) for g, p in procs]
        done = _succeeded(c.db_url) - before
        load1 = os.getloadavg()
    gets, posts = [g for g, _ in results], [p for _, p in results]
    seconds = max(r["duration_us"] for r in gets + posts) / 1e6
    return {"workers": workers, "jobs_per_min": round(60 * done / seconds, 1),
            "submitted": sum(p["requests"] for p in posts),
            "get_per_s": round(sum(g["requests"] for g in gets) / seconds, 1),
            "get_p50_ms": round(max(g["p50_us"] for g in gets) / 1e3, 1),
            "get_p99_ms": round(max(g["p99_us"] for g in gets) / 1e3, 1),
            "errors": sum(r[k] for r in gets + posts for k in ("non2xx", "socket_errors", "timeouts")),
            "load_1min_start": round(load0[0], 2), "load_1min_end": round(load1[0], 2)}


def busy12(workers: int, args: argparse.Namespace) -> float:
    """Median seconds for 12 CPU-bound jobs submitted at once (through the first API process)."""
    with cluster(workers, args.postgres_url) as c:
        base = _inputs(c)
        with httpx.Client(base_url=c.urls[0], headers=c.headers, timeout=60) as http:
            _run(http, [{**base, "solver": "sleepy", "options": {"sleep_s": 0.0, "report_progress": False}}]
                 * (2 * workers))  # every worker up and its forkserver warm
            busy = [{**base, "solver": "busy", "options": {"iterations": args.iterations}}] * 12
            return statistics.median(_run(http, busy) for _ in range(args.repeats))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--duration-s", type=int, default=15, help="seconds of load per worker count")
    parser.add_argument("--submitters", type=int, default=2, help="submitting connections per API port")
    parser.add_argument("--job-iterations", type=int, default=200_000, help="busy solver work per load job")
    parser.add_argument("--iterations", type=int, default=20_000_000, help="busy solver work per CPU-bound job")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-speedup", action="store_true")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print("bench_scaleout_load: needs wrk (apt-get install wrk)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(PLUGINS))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH")) if p)
    print(f"cpus={os.cpu_count()} load average before: {os.getloadavg()}", flush=True)
    for n in args.workers:
        print(json.dumps(load_run(n, args)), flush=True)
    if not args.skip_speedup:
        started = time.monotonic()
        t1, t2 = busy12(1, args), busy12(2, args)
        print(json.dumps({"busy12_s_1_worker": round(t1, 2), "busy12_s_2_workers": round(t2, 2),
                          "speedup": round(t1 / t2, 2), "seconds": round(time.monotonic() - started, 1),
                          "load_average_after": os.getloadavg()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
