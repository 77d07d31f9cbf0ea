"""Dashboard benchmarks (docs/benchmarks.md, "Dashboard").

``.venv/bin/python -m bench.bench_dashboard`` builds an app on a fresh SQLite file, stores a
2,000-op graph on a 32-device topology, solves it with ``even`` for both objectives (a
throughput plan, simulated stage by stage, and a latency plan, simulated op by op), and a
12-solver comparison; then it times the pages through the ASGI app (request in, HTML out, in
process: server-side time without the network).  Target: <= 0.3 s each.

"Cold" plan pages clear the dashboard's caches before every request, so the plan's problem is
rebuilt from the stored documents and simulated each time; "warm" ones find both cached.
Each figure is the median of 11 requests: wall-clock and the process's CPU seconds.
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

from service.app import create_app
from service.auth import create_key, ensure_project
from service.config import load_config
from service.dashboard.plan_view import PROBLEMS, TIMELINES
from service.jobs import store
from service.jobs.validate import JobRequest, validate_job
from solvers.generate import generate_graph, generate_topology

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

RUNS = 11
N_OPS = 2000


def median_s(fn: Callable[[], Any], before: Callable[[], None] = lambda: None) -> tuple[float, float]:
    """Median wall-clock and CPU seconds of ``fn``."""
    wall, cpu = [], []
    for _ in range(RUNS):
        before()
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def _wait(client: TestClient, key: str, job_id: str) -> dict[str, Any]:
    while True:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"}).json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.1)


def main() -> None:
    folder = tempfile.mkdtemp(prefix="placer-bench-dashboard-")
    cfg = load_config({}, database_url=f"sqlite:///{folder}/placer.db", workers=1, rate_limit_per_s=0.0,
                      max_time_limit_s=600.0)
    app = create_app(cfg)
    with TestClient(app) as client:
        db = app.state.ctx.db
        with db.session() as s:
            key = create_key(s, "bench")
        auth = {"Authorization": f"Bearer {key}"}
        graph = generate_graph("random_dag", n_ops=N_OPS, seed=0)
        graph_id = client.post("/v1/graphs", json=graph.to_document(), headers=auth).json()["id"]
        topo = generate_topology("hierarchical", nodes=4, gpus_per_node=8)
        topology_id = client.post("/v1/topologies", json=topo.to_document(), headers=auth).json()["id"]
        plans = {}
        for objective, solver in (("throughput", "pipedream"), ("latency", "even")):
            body = {"graph_id": graph_id, "topology_id": topology_id, "solver": solver, "objective": objective,
                    "settings": {"micro_batches": [16], "pass": "training"}, "time_limit_s": 120}
            job = _wait(client, key, client.post("/v1/jobs", json=body, headers=auth).json()["id"])
            assert job["status"] == "succeeded" and job["plan_status"] == "feasible", job
            plans[objective] = job["plan_id"]
        with db.session() as s:  # 12 jobs of one comparison, finished from the plan cache
            project = ensure_project(s, "bench").id
            spec = validate_job(s, cfg, project, JobRequest(
                graph_id, topology_id, "pipedream", "throughput", {"micro_batches": [16], "pass": "training"}, {}, 120))
            cmp, _ = store.create_comparison(s, project, [spec] * 12, "throughput", use_cache=True)
            s.commit()
            comparison_id = cmp.id

        web = TestClient(app)
        form = web.get("/signin").text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', form).group(1)  # type: ignore[union-attr]
        web.post("/signin", data={"csrf": csrf, "api_key": key}, follow_redirects=False)

        def get(url: str) -> Callable[[], None]:
            def run() -> None:
                r = web.get(url)
                assert r.status_code == 200, (url, r.status_code, r.text[:300])
            return run

        def cold() -> None:
            TIMELINES.clear()
            PROBLEMS.clear()

        cmp_page = web.get(f"/comparisons/{comparison_id}").text
        assert cmp_page.count("<tr") == 13, "12 rows and the header"
        rows = [
            ("plan page, 2,000-op throughput plan (stage-level timeline), cold",
             median_s(get(f"/plans/{plans['throughput']}"), cold)),
            ("plan page, same, warm", median_s(get(f"/plans/{plans['throughput']}"))),
            ("plan page, 2,000-op latency plan (op-level timeline), cold",
             median_s(get(f"/plans/{plans['latency']}"), cold)),
            ("plan page, same, warm", median_s(get(f"/plans/{plans['latency']}"))),
            ("Chrome trace download, latency plan, warm", median_s(get(f"/plans/{plans['latency']}/trace.json"))),
            ("comparison page, 12 solvers", median_s(get(f"/comparisons/{comparison_id}"))),
            ("comparison live fragment, 12 solvers", median_s(get(f"/comparisons/{comparison_id}/live"))),
            ("graph page, 2,000 ops", median_s(get(f"/graphs/{graph_id}"))),
            ("topology page, 32 devices", median_s(get(f"/topologies/{topology_id}"))),
        ]
        entries = {}
        for objective, plan_id in plans.items():
            cold()
            html = web.get(f"/plans/{plan_id}").text
            entries[objective] = len(next(iter(TIMELINES._items.values()), []))
            assert html.count("<rect") > 100, (objective, "no timeline drawn")
    print("| page | target | median wall | median CPU |\n|---|---|---|---|")
    for name, (wall, cpu) in rows:
        print(f"| {name} | <= 0.3 s | {wall:.3f} s | {cpu:.3f} s |")
    print(f"\ntimeline intervals: {entries}")


if __name__ == "__main__":
    main()
