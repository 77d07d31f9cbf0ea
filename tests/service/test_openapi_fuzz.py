"""Schemathesis against the OpenAPI schema, on SQLite and PostgreSQL: no 5xx on any input, every
answer (problem+json included) matches the documented status codes, content types, headers and
schemas, unsupported methods answer 405 with a complete ``Allow``, and schema-valid requests are
accepted (2xx, or 404 for ids that do not exist) -- uploads and generators included, which may be
refused only by a rule JSON Schema cannot state (:data:`RULES_BEYOND_JSON_SCHEMA`)."""

from __future__ import annotations

import re
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
# Uploaded and generated documents obey a few rules JSON Schema cannot state: for these a
# schema-valid body may be refused, but only with a 422 naming one of these rules (problem type,
# pattern of the detail); any other refusal is a gap between the schema and the server.
DOCUMENT_RULES = {"POST /v1/graphs", "POST /v1/topologies", "POST /v1/topologies:generate",
                  # settings.global_batch: every candidate micro-batch count divides it
                  "POST /v1/jobs", "POST /v1/comparisons", "POST /v1/plans:evaluate",
                  # a calibration's free-form fit record: no NUL in its text
                  "POST /v1/calibrations"}
RULES_BEYOND_JSON_SCHEMA = [
    ("invalid-graph", r"unknown node|duplicate id|self-loop|has a cycle"),  # edges name existing nodes; ids unique
    # a node's backward split: bwd_input_s and bwd_weight_s both or neither, their sum > 0 where bwd_s > 0
    ("invalid-graph", r"bwd_(input|weight)_s: node .*(both or neither|must be > 0 where bwd_s > 0)"),
    ("invalid-topology", r"unknown device|duplicate id|self-link|expected \d+ (rows|entries)|disconnected"),
    # link ends, unique device ids, matrix shapes, connectivity
    ("invalid-input", r"devices, more than the limit"),  # a generator's size parameters multiplied
    (None, r"nested deeper than \d+ levels"),  # free-form members: 64 levels at most
    (None, r"contains a NUL character"),  # no text is stored with NUL (PostgreSQL cannot), free-form members too
    ("invalid-request", r"settings\.global_batch: .*samples do not split into"),  # divisibility
    ("invalid-request", r"settings\.virtual_stages: .*runs (one stage|exactly 2 stages) per rank"),  # by schedule
    ("invalid-request", r"settings\.tp: tensor-parallel stages .* run under gpipe or 1f1b only"),  # by schedule
    # a sweep's member: a swept tp above 1 (or a fixed one) under a swept schedule other than gpipe, 1f1b or auto
    ("invalid-problem", r"sweep\.(tp|schedule)\[\d+\]: .*run under gpipe or 1f1b only"),
]
# The body's schema depends on ?format= (a Piper document, PipeDream text) and a text/plain body is
# read only with ?format=pipedream: those cases are refused by the importers, naming the problem.
IMPORT_FORMATS = {"piper", "pipedream"}


def document_rules_only(ctx: Any, response: Any, case: Any) -> None:
    """Positive-data acceptance for uploads and generators: accepted, or refused by a rule above."""
    if case.operation.label not in DOCUMENT_RULES or not case.meta.generation.mode.is_positive:
        return
    if any(response.status_code == int(s) for s in (200, 201, 401, 404, 409)):
        return
    fmt = (case.query or {}).get("format")
    text_body = "text/plain" in str(case.media_type)
    if fmt in IMPORT_FORMATS or (text_body and fmt != "pipedream"):
        assert response.status_code in (400, 422), response.text
        return
    assert response.status_code == 422, f"a schema-valid body answered {response.status_code}: {response.text}"
    body = response.json()
    slug = body["type"].removeprefix("/problems/")
    assert any((want is None or slug == want) and re.search(pattern, body["detail"])
               for want, pattern in RULES_BEYOND_JSON_SCHEMA), f"schema-valid, refused by no stated rule: {body}"


def _checks(case: Any) -> list[Any]:
    checks = [c for c in CHECKS if c is not positive_data_acceptance or case.operation.label not in DOCUMENT_RULES]
    return [*checks, document_rules_only]



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
