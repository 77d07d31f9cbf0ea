"""The event loop's own PostgreSQL reads (service.db.loop_reads): a bounded pool shared by many
concurrent reads, values converted as the ORM converts them, outages answered 503."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from service.db import migrate
from service.db.engine import Database
from service.db.loop_reads import AsyncReader
from service.db.models import Project
from service.errors import DatabaseUnavailable
from tests.service.conftest import BACKENDS, assert_problem, database_url, new_api, running_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres


def test_many_concurrent_reads_share_a_few_connections(tmp_path: Path) -> None:
    with database_url("postgres", tmp_path) as url:
        db = Database(url)
        try:
            migrate.upgrade(db.engine)
            with db.session() as s:
                s.add_all([Project(id=f"prj_{i}", name=f"p{i}") for i in range(5)])
            reader = AsyncReader(url, db.engine.dialect, size=2)
            table = Project.__table__
            columns = list(table.columns)  # type: ignore[attr-defined]

            async def main() -> list[object]:
                try:
                    return await asyncio.gather(*(reader.row(table, columns, f"prj_{i % 6}")  # type: ignore[arg-type]
                                                  for i in range(30)))
                finally:
                    await reader.close()

            rows = asyncio.run(main())
            assert reader._opened == 0 and not reader._waiting
            for i, row in enumerate(rows):
                if i % 6 == 5:
                    assert row is None
                else:
                    assert row.name == f"p{i % 6}" and row.created_at.tzinfo is not None  # type: ignore[attr-defined]
        finally:
            db.dispose()


def test_an_unreachable_database_is_unavailable(tmp_path: Path) -> None:
    with database_url("postgres", tmp_path) as url:
        db = Database(url)
        try:
            reader = AsyncReader(url, db.engine.dialect)
            reader.conninfo = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2"
            table = Project.__table__
            with pytest.raises(DatabaseUnavailable):
                asyncio.run(reader.row(table, list(table.columns), "prj_x"))  # type: ignore[arg-type, attr-defined]
            assert reader._opened == 0
        finally:
            db.dispose()


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.id == "postgres"])
def test_the_hot_get_answers_503_when_the_database_is_gone(backend: str, tmp_path: Path) -> None:
    with running_app(backend, tmp_path, workers=0) as (client, cfg):
        api = new_api(client, cfg)
        gid = api.graph()
        assert api.get(f"/v1/graphs/{gid}").status_code == 200
        reader = client.app.state.ctx.db.async_reader  # type: ignore[attr-defined]
        client.portal.call(reader.close)  # type: ignore[union-attr]
        reader.conninfo = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2"
        r = api.get(f"/v1/graphs/{gid}")
        assert_problem(r, 503, slug="database-unavailable")
        assert r.headers["Retry-After"] == "2"


def test_a_bad_statement_is_500_on_the_hot_path_as_on_the_full_path(tmp_path: Path) -> None:
    """An operational error that is no outage (SQLite's "no such table") is a bug, answered 500
    by both paths, not 503 with Retry-After."""
    with running_app("sqlite", tmp_path, workers=0) as (client, cfg):
        api = new_api(client, cfg)
        gid = api.graph()
        assert api.get(f"/v1/graphs/{gid}").status_code == 200
        with sqlite3.connect(tmp_path / "placer.db") as conn:
            conn.execute("DROP TABLE graphs")
        loose = TestClient(client.app, raise_server_exceptions=False)
        lean = loose.get(f"/v1/graphs/{gid}", headers=api.headers)
        full = loose.get("/v1/graphs", headers=api.headers)
        assert lean.status_code == full.status_code == 500
        assert "Retry-After" not in lean.headers


def test_sqlite_service_runs_without_the_postgres_driver(tmp_path: Path) -> None:
    """psycopg is in the ``postgres`` extra: the default SQLite service imports, migrates and
    answers without it (the PostgreSQL reader imports it only when a PostgreSQL database is used)."""
    code = f"""
import sys
sys.modules["psycopg"] = None  # as if not installed: importing it raises ImportError
from service.db import migrate
from service.db.engine import Database
import service.app
db = Database("sqlite:///{tmp_path / 'placer.db'}")
migrate.upgrade(db.engine)
assert db.sqlite_reader is not None and db.async_reader is None
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[3])
    assert result.returncode == 0, result.stderr
