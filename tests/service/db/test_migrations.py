"""Migrations: they build exactly the models' schema, and go down and up again, on both databases."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from service.db import migrate
from service.db.engine import Database
from service.db.models import Base
from tests.service.conftest import BACKENDS, database_url


@pytest.mark.parametrize("backend", BACKENDS)
def test_migrations_match_the_models_and_round_trip(backend: str, tmp_path: Path) -> None:
    with database_url(backend, tmp_path) as url:
        db = Database(url)
        try:
            migrate.upgrade(db.engine)
            assert migrate.current_revision(db.engine) == migrate.head_revision()
            with db.engine.connect() as conn:
                diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
            assert diff == []
            cfg = migrate.alembic_config(url)
            with db.engine.begin() as conn:
                cfg.attributes["connection"] = conn
                command.downgrade(cfg, "base")
            assert migrate.current_revision(db.engine) is None
            migrate.upgrade(db.engine)
            assert migrate.current_revision(db.engine) == migrate.head_revision()
        finally:
            db.dispose()
