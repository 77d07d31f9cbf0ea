"""Per-project caps: queued jobs past ``project_max_queued`` get 429 with Retry-After; a project
never runs more than ``project_max_running`` jobs at once (the claim enforces it)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.service.conftest import BACKENDS, new_api, running_app

SLEEPY = {"sleep_s": 0.6, "report_progress": False}


@pytest.mark.parametrize("backend", BACKENDS)
def test_queued_cap_answers_429_with_retry_after(backend: str, tmp_path: Path) -> None:
    with running_app(backend, tmp_path, workers=0, project_max_queued=3) as (client, cfg):
        api, other = new_api(client, cfg), new_api(client, cfg)
        gid, tid = api.graph(), api.topology()
        for _ in range(2):
            api.submit(gid, tid, "even", cache=False)
        r = api.post("/v1/comparisons", json={"graph_id": gid, "topology_id": tid, "solvers": ["even", "sleepy"],
                                              "cache": False})
        assert r.status_code == 429 and r.headers["content-type"] == "application/problem+json"
        assert int(r.headers["Retry-After"]) >= 1 and "PLACER_PROJECT_MAX_QUEUED" in r.json()["detail"]
        api.submit(gid, tid, "even", cache=False)
        r = api.post("/v1/jobs", json={"graph_id": gid, "topology_id": tid, "solver": "even", "cache": False})
        assert r.status_code == 429
        other.submit(other.graph(), other.topology(), "even")  # another project is not affected


@pytest.mark.parametrize("backend", BACKENDS)
def test_running_cap_runs_a_project_s_jobs_one_after_another(backend: str, tmp_path: Path) -> None:
    with running_app(backend, tmp_path, workers=2, project_max_running=1) as (client, cfg):
        api = new_api(client, cfg)
        gid, tid = api.graph(), api.topology()
        jobs = [api.submit(gid, tid, "sleepy", options=SLEEPY) for _ in range(3)]
        done = sorted((api.wait(j["id"]) for j in jobs), key=lambda j: j["started_at"])
        assert all(j["status"] == "succeeded" for j in done)
        for before, after in itertools.pairwise(done):
            assert after["started_at"] >= before["finished_at"], (before, after)
