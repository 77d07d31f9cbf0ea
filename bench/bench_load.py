"""Load benchmark (docs/benchmarks.md, "Load"): ``placer serve`` under wrk.

``.venv/bin/python -m bench.bench_load`` starts ``placer serve`` on a fresh SQLite file and on a
fresh PostgreSQL schema (``--postgres-url``, database ``test`` on 127.0.0.1:5432 by default),
uploads graphs and a topology, runs a few jobs to get plans, then for each client count runs two
``wrk`` processes (Debian's ``wrk``; Lua scripts in ``bench/load/``) side by side for a fixed time,
aimed at 127.0.0.1 only:

* ``get_mix.lua``: ``--clients`` keep-alive connections cycling through GET of a job, a plan and a
  graph (``/v1/jobs/{id}``, ``/v1/plans/{id}``, ``/v1/graphs/{id}``);
* ``submit.lua``: ``--submit-connections`` connections posting ``/v1/jobs`` (a body whose plan is
  cached, so the job finishes at submission and no solver competes for the cores).

It prints GET requests/s, GET p50/p99 (wrk's latency distribution), submissions/s, errors, and
the server process's CPU time per request (user + system, from ``/proc``, over the run divided by
the requests answered): the cost of a request, which unlike latency and throughput does not
depend much on what else runs on the machine.  The generator shares the machine's cores with the
server (``--wrk-threads`` each).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from bench.bench_service import Server, _wait
from service.jobs.procs import stat_fields
from solvers.generate import generate_graph, generate_topology

LOAD_DIR = Path(__file__).with_name("load")
POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@contextmanager
def fresh_database(backend: str, folder: Path, postgres_url: str) -> Iterator[str]:
    """An empty SQLite file, or a new PostgreSQL schema dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'load.db'}"
        return
    schema = f"placer_load_{os.getpid()}_{os.urandom(3).hex()}"
    admin = create_engine(postgres_url)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{postgres_url}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def prepare(server: Server, n_graphs: int, folder: Path) -> tuple[Path, Path]:
    """Inputs, one finished job (and plan) per graph; the GET paths file and the submission body file."""
    key = server.headers["Authorization"].removeprefix("Bearer ")
    paths: list[str] = []
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as http:
        tid = http.post("/v1/topologies", json=generate_topology("hierarchical", nodes=1).to_document()).json()["id"]
        body: dict[str, Any] = {}
        for seed in range(n_graphs):
            doc = generate_graph("random_dag", n_ops=200, seed=seed).to_document()
            gid = http.post("/v1/graphs", json=doc).json()["id"]
            body = {"graph_id": gid, "topology_id": tid, "solver": "single", "objective": "latency", "cache": True}
            job = _wait(http, http.post("/v1/jobs", json=body).json()["id"])
            assert job["status"] == "succeeded", job
            paths += [f"/v1/jobs/{job['id']}", f"/v1/plans/{job['plan_id']}", f"/v1/graphs/{gid}"]
        again = http.post("/v1/jobs", json=body).json()
        assert again["cached"] and again["status"] == "succeeded", again
    paths_file, body_file = folder / "paths.txt", folder / "submit.txt"
    paths_file.write_text("\n".join([key, *paths]) + "\n")
    body_file.write_text(key + "\n" + json.dumps(body))
    return paths_file, body_file


def _wrk(script: str, arg: Path, url: str, connections: int, duration_s: int, threads: int) -> subprocess.Popen[str]:
    assert url.startswith("http://127.0.0.1:"), url
    cmd = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{duration_s}s", "--timeout", "10s",
           "--latency", "-s", str(LOAD_DIR / script), url, "--", str(arg)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate()
    for line in out.splitlines():
        if line.startswith("WRK_RESULT "):
            return dict(json.loads(line.removeprefix("WRK_RESULT ")))
    raise RuntimeError(f"wrk gave no result:\n{out}")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``)."""
    fields = stat_fields(pid)
    if fields is None:
        raise RuntimeError(f"process {pid} is gone")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_load(server: Server, paths_file: Path, body_file: Path, clients: int, args: argparse.Namespace) -> dict[str, Any]:
    cpu_before_s = cpu_s(server.proc.pid)
    spy = None
    if args.py_spy:  # sample the server meanwhile (a flame graph of where a request's CPU goes)
        spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(server.proc.pid),
                                "--duration", str(max(1, args.duration_s - 2)), "--rate", "200", "--format", "raw",
                                "--output", f"{args.py_spy}.{clients}.txt"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    gets = _wrk("get_mix.lua", paths_file, server.url, clients, args.duration_s, args.wrk_threads)
    posts = (_wrk("submit.lua", body_file, server.url, args.submit_connections, args.duration_s, 1)
             if args.submit_connections else None)
    g = _result(gets)
    p = _result(posts) if posts else {"requests": 0, "duration_us": 1, "non2xx": 0, "socket_errors": 0, "timeouts": 0}
    cpu_used_s = cpu_s(server.proc.pid) - cpu_before_s
    if spy is not None:
        spy.wait()
    seconds = g["duration_us"] / 1e6
    return {"clients": clients, "get_per_s": round(g["requests"] / seconds, 1),
            "get_p50_ms": round(g["p50_us"] / 1e3, 1), "get_p99_ms": round(g["p99_us"] / 1e3, 1),
            "submit_per_s": round(p["requests"] / (p["duration_us"] / 1e6), 1),
            "total_per_s": round(g["requests"] / seconds + p["requests"] / (p["duration_us"] / 1e6), 1),
            "errors": sum(r[k] for r in (g, p) for k in ("non2xx", "socket_errors", "timeouts")),
            "server_cpu_ms_per_request": round(1e3 * cpu_used_s / max(1, g["requests"] + p["requests"]), 3)}


def bench_backend(backend: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp, fresh_database(backend, Path(tmp), args.postgres_url) as url:
        server = Server(url, workers=1, extra_env=args.server_env)
        try:
            paths_file, body_file = prepare(server, args.graphs, Path(tmp))
            rows = []
            for clients in args.clients:
                row = {"database": backend, **run_load(server, paths_file, body_file, clients, args)}
                print(json.dumps(row), flush=True)
                rows.append(row)
            return rows
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"])
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument("--clients", nargs="+", type=int, default=[20, 50], help="GET connections")
    parser.add_argument("--submit-connections", type=int, default=1, help="connections posting jobs meanwhile")
    parser.add_argument("--duration-s", type=int, default=15, help="seconds per run")
    parser.add_argument("--wrk-threads", type=int, default=1, help="threads of the GET generator")
    parser.add_argument("--graphs", type=int, default=8, help="graphs (and jobs, plans) to read")
    parser.add_argument("--env", action="append", default=[], metavar="PLACER_X=VALUE",
                        help="extra server setting (repeatable), e.g. PLACER_UVICORN_WORKERS=2")
    parser.add_argument("--py-spy", metavar="PREFIX", help="record the server with py-spy (a dev dependency) "
                        "during each run into PREFIX.<clients>.txt (collapsed stacks)")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print("bench_load: needs wrk (apt-get install wrk)", file=sys.stderr)
        return 2
    args.server_env = dict(item.split("=", 1) for item in args.env)
    rows = [row for backend in args.databases for row in bench_backend(backend, args)]
    print(f"{'database':<11} {'clients':>7} {'GET/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'POST/s':>7} {'errors':>6} {'CPU ms/req':>10}")
    for r in rows:
        print(f"{r['database']:<11} {r['clients']:>7} {r['get_per_s']:>8} {r['get_p50_ms']:>7} {r['get_p99_ms']:>7} "
              f"{r['submit_per_s']:>7} {r['errors']:>6} {r['server_cpu_ms_per_request']:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
