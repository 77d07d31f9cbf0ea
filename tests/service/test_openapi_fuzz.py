"""Schemathesis against the OpenAPI schema, on SQLite and PostgreSQL: no 5xx on any input, every
answer (problem+json included) matches the documented status codes, content types, headers and
schemas, unsupported methods answer 405 with a complete ``Allow``, and schema-valid requests are
accepted (2xx, or 404 for ids that do not exist)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)
from schemathesis.config import SchemathesisConfig

from service.app import create_app
from service.auth import create_key
from service.config import load_config
from service.db import migrate
from tests.service.conftest import database_url

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          unsupported_method, positive_data_acceptance]
ACCEPTED = ["2xx", "401", "404", "409"]  # 409: a state conflict, e.g. deleting an input in use
EXAMPLES = 6
# Uploaded and generated documents obey rules JSON Schema cannot state (edges name existing nodes,
# a bandwidth matrix matches the devices, each generator has its own parameters): for these a
# schema-valid body may still be refused with a 422 naming the rule.
DOCUMENT_RULES = {"POST /v1/graphs", "POST /v1/topologies", "POST /v1/topologies:generate"}


def _checks(case: Any) -> list[Any]:
    return [c for c in CHECKS if c is not positive_data_acceptance or case.operation.label not in DOCUMENT_RULES]



def _app(backend: str) -> tuple[Any, Any]:
    """The app on a fresh database (no workers: submitted jobs stay queued), with its key, and the
    context that drops the database at the end."""
    database = database_url(backend, Path(tempfile.mkdtemp(prefix="placer-fuzz-")))
    url = database.__enter__()
    app = create_app(load_config({}, database_url=url, workers=0, rate_limit_per_s=0, max_request_bytes=2**20))
    migrate.upgrade(app.state.ctx.db.engine)
    with app.state.ctx.db.session() as s:
        app.state.fuzz_key = create_key(s, "fuzz")
    return app, database


CONFIG = SchemathesisConfig.from_dict({"checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED}}})
SQLITE_APP, SQLITE_DB = _app("sqlite")
POSTGRES_APP, POSTGRES_DB = _app("postgres")
sqlite_schema = schemathesis.openapi.from_asgi("/openapi.json", SQLITE_APP, config=CONFIG)
postgres_schema = schemathesis.openapi.from_asgi("/openapi.json", POSTGRES_APP, config=CONFIG)


@pytest.fixture(scope="module", autouse=True)
def _drop_databases() -> Iterator[None]:
    yield
    for app, database in ((SQLITE_APP, SQLITE_DB), (POSTGRES_APP, POSTGRES_DB)):
        app.state.ctx.db.dispose()
        database.__exit__(None, None, None)


@sqlite_schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema_on_sqlite(case: Any) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {SQLITE_APP.state.fuzz_key}"}, checks=_checks(case))


@pytest.mark.postgres
@postgres_schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema_on_postgres(case: Any) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {POSTGRES_APP.state.fuzz_key}"}, checks=_checks(case))
