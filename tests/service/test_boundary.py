"""Rules every request meets (service/boundary.py): complete ``Allow`` headers on every route,
and a 500 that leaves the keep-alive connection usable (a real uvicorn server, a real fault)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from sqlalchemy import text

from service.app import create_app
from service.auth import create_key
from service.config import load_config
from service.db import migrate
from tests.service.conftest import BACKENDS, Api, assert_problem, database_url

ALL_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@contextmanager
def serving(url: str) -> Iterator[tuple[str, str, object]]:
    """The app under uvicorn on a free port, in a thread; yields its base URL, a key and the app."""
    app = create_app(load_config({}, database_url=url, workers=0, rate_limit_per_s=0))
    migrate.upgrade(app.state.ctx.db.engine)
    with app.state.ctx.db.session() as s:
        key = create_key(s, "keepalive")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", key, app
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_500_keeps_the_connection_usable(backend: str, tmp_path: Path) -> None:
    with database_url(backend, tmp_path) as url, serving(url) as (base, key, app):
        with app.state.ctx.db.session() as s:  # type: ignore[attr-defined]
            s.execute(text("ALTER TABLE graphs RENAME TO graphs_gone"))  # a real fault: the table is gone
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=10,
                          limits=httpx.Limits(max_connections=1)) as http:
            for _ in range(3):
                broken = http.get("/v1/graphs")
                assert_problem(broken, 500, slug="internal-error")
                assert broken.headers.get("connection", "").lower() != "close"
                assert http.get("/healthz").status_code == 200  # the same pooled connection, not reset
        with app.state.ctx.db.session() as s:  # type: ignore[attr-defined]
            s.execute(text("ALTER TABLE graphs_gone RENAME TO graphs"))


def _operation_paths(api: Api) -> dict[str, set[str]]:
    schema = api.client.get("/openapi.json").json()
    return {path: {m.upper() for m in ops} for path, ops in schema["paths"].items()}


def test_every_405_lists_every_method_of_its_path(api: Api) -> None:
    for path, served in _operation_paths(api).items():
        concrete = path.replace("{", "x_").replace("}", "")  # an id in each id slot
        for method in ALL_METHODS:
            if method in served:
                continue
            r = api.request(method, concrete)
            assert_problem(r, 405, slug="method-not-allowed")
            assert set(r.headers["allow"].split(", ")) == served, (method, path, r.headers["allow"])
