"""Service test fixtures: every API test runs against SQLite and PostgreSQL.

Each backend gets one app (with its local worker pool) for the whole package; every test
gets a fresh project and key, so tests are isolated by the service's own project scoping.
PostgreSQL runs in a fresh schema dropped at the end.  The ``sleepy`` test solver is
registered through the ``placer.solvers`` entry points of ``plugins/``.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from service.app import create_app
from service.auth import create_key
from service.config import ServiceConfig, load_config
from solvers import registry
from solvers.generate import generate_graph, generate_topology

with warnings.catch_warnings():  # starlette's notice about its httpx transport is not ours to act on
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

PLUGINS = Path(__file__).parent / "plugins"
POSTGRES_URL = os.environ.get("PLACER_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BACKENDS = [pytest.param("sqlite", id="sqlite"), pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)]
FINAL = ("succeeded", "failed", "cancelled")
TEST_SETTINGS: dict[str, Any] = {
    "workers": 2, "lease_s": 4.0, "reaper_interval_s": 0.5, "kill_grace_s": 1.0, "max_time_limit_s": 120.0,
    "default_time_limit_s": 30.0, "rate_limit_per_s": 0.0, "progress_interval_s": 0.1, "auto_migrate": True,
    "ready_timeout_s": 5.0, "admit_wait_s": 10.0,  # a loaded test machine: no 503 for a slow queue
}


@pytest.fixture(scope="package", autouse=True)
def test_solvers() -> Iterator[None]:
    """Make the ``sleepy`` plugin visible here and in solver child processes."""
    sys.path.insert(0, str(PLUGINS))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(PLUGINS), old) if p)
    registry._table.cache_clear()
    yield
    sys.path.remove(str(PLUGINS))
    if old is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old
    registry._table.cache_clear()


@contextmanager
def database_url(backend: str, folder: Path) -> Iterator[str]:
    """A fresh, empty database: an SQLite file, or a new PostgreSQL schema (dropped afterwards)."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'placer.db'}"
        return
    schema = f"placer_test_{os.getpid()}_{os.urandom(4).hex()}"
    admin = create_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@contextmanager
def running_app(backend: str, folder: Path, **overrides: Any) -> Iterator[tuple[TestClient, ServiceConfig]]:
    with database_url(backend, folder) as url:
        cfg = load_config({}, database_url=url, **{**TEST_SETTINGS, **overrides})
        app = create_app(cfg)
        with TestClient(app) as client:
            yield client, cfg


class Api:
    """A test client bound to one project's key, with helpers for inputs and jobs."""

    def __init__(self, client: TestClient, settings: ServiceConfig, key: str) -> None:
        self.client = client
        self.settings = settings
        self.key = key
        self.headers = {"Authorization": f"Bearer {key}"}

    def request(self, method: str, path: str, **kw: Any) -> Any:
        headers = {**self.headers, **kw.pop("headers", {})}
        return self.client.request(method, path, headers=headers, **kw)

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> Any:
        return self.request("POST", path, **kw)

    def delete(self, path: str, **kw: Any) -> Any:
        return self.request("DELETE", path, **kw)

    def graph(self, n_ops: int = 24, seed: int = 1) -> str:
        r = self.post("/v1/graphs", json=generate_graph("random_dag", n_ops=n_ops, seed=seed).to_document())
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def topology(self, **params: Any) -> str:
        doc = generate_topology("hierarchical", **{"nodes": 1, "gpus_per_node": 4, **params}).to_document()
        r = self.post("/v1/topologies", json=doc)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def submit(self, graph_id: str, topology_id: str, solver: str = "even", **body: Any) -> dict[str, Any]:
        headers = body.pop("headers", {})
        r = self.post("/v1/jobs", json={"graph_id": graph_id, "topology_id": topology_id, "solver": solver, **body},
                      headers=headers)
        assert r.status_code == 202, r.text
        return dict(r.json())

    def wait(self, job_id: str, timeout_s: float = 60.0, until: tuple[str, ...] = FINAL) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.get(f"/v1/jobs/{job_id}").json()
            if job["status"] in until:
                return dict(job)
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still {job['status']} after {timeout_s} s: {job}")
            time.sleep(0.05)


def new_api(client: TestClient, settings: ServiceConfig, project: str | None = None) -> Api:
    db = client.app.state.ctx.db  # type: ignore[attr-defined]
    with db.session() as s:
        key = create_key(s, project or f"test-{os.urandom(6).hex()}")
    return Api(client, settings, key)


@pytest.fixture(scope="package", params=BACKENDS)
def backend_app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                ) -> Iterator[tuple[str, TestClient, ServiceConfig]]:
    with running_app(request.param, tmp_path_factory.mktemp(request.param)) as (client, cfg):
        yield request.param, client, cfg


@pytest.fixture
def backend(backend_app: tuple[str, TestClient, ServiceConfig]) -> str:
    return backend_app[0]


@pytest.fixture
def api(backend_app: tuple[str, TestClient, ServiceConfig]) -> Api:
    """A fresh project on the shared app of the current backend."""
    _, client, cfg = backend_app
    return new_api(client, cfg)


@pytest.fixture
def other_api(backend_app: tuple[str, TestClient, ServiceConfig]) -> Api:
    """A second, unrelated project on the same app."""
    _, client, cfg = backend_app
    return new_api(client, cfg)


def assert_problem(response: Any, status: int, field: str | None = None, slug: str | None = None) -> dict[str, Any]:
    """The response is RFC 9457 problem+json with ``status`` (and the ``field`` / type slug given)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body = dict(response.json())
    assert body["status"] == status and body["title"] and body["detail"] and body["type"].startswith("/problems/")
    if field is not None:
        assert body.get("field") == field, body
    if slug is not None:
        assert body["type"] == f"/problems/{slug}", body
    return body
