"""Schemathesis against the OpenAPI schema: no 5xx on any input, and every answer (problem+json
included) matches the documented status codes, content types and schemas."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from service.app import create_app
from service.auth import create_key
from service.config import load_config
from service.db import migrate

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def _app() -> Any:
    """The app on a migrated SQLite file (no workers: submitted jobs stay queued) and its key."""
    folder = Path(tempfile.mkdtemp(prefix="placer-fuzz-"))
    app = create_app(load_config({}, database_url=f"sqlite:///{folder / 'fuzz.db'}", workers=0,
                                   rate_limit_per_s=0, max_request_bytes=2**20))
    migrate.upgrade(app.state.ctx.db.engine)
    with app.state.ctx.db.session() as s:
        app.state.fuzz_key = create_key(s, "fuzz")
    return app


APP = _app()
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case: Any) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {APP.state.fuzz_key}"}, checks=CHECKS)
