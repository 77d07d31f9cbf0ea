"""The FastAPI application: routers, error handlers, limits, metrics, and the job pool's lifetime."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from service import dashboard
from service.api import calibrations, comparisons, graphs, health, jobs, plans, runs, topologies
from service.api import solvers as solvers_api
from service.auth import KeyCache, RateLimiter
from service.boundary import BoundaryMiddleware, flat_routes
from service.config import ServiceConfig, load_config
from service.db import migrate
from service.db.engine import Database
from service.deps import BEARER_SCHEME, Context, get_project
from service.errors import PROBLEM_JSON, install_error_handlers
from service.jobs.dispatch import Dispatcher, LocalPool, make_dispatcher
from service.limits import BodyLimitMiddleware
from service.metrics import Metrics, RequestMetricsMiddleware
from service.overload import AdmissionMiddleware, Gate
from service.plan_cache import PlanCache
from service.schemas import ProblemOut
from solvers.model.schemas import load_schema

log = logging.getLogger("placer.service")
API_VERSION = "1"


def create_app(config: ServiceConfig | None = None, dispatcher: Dispatcher | None = None) -> FastAPI:
    """Build the app.  The database is migrated (embedded SQLite by default) and the local pool
    started when the app starts, and stopped when it stops."""
    cfg = config or load_config()
    db = Database(cfg.database_url, cfg.db_pool_size, cfg.db_max_overflow, cfg.db_pool_timeout_s)
    metrics = Metrics(db)
    pool = dispatcher or make_dispatcher(db, cfg, on_finish=metrics.job_finished)
    ctx = Context(cfg, db, pool, metrics, RateLimiter(cfg.rate_limit_per_s, cfg.rate_limit_burst),
                  KeyCache(cfg.key_cache_s), PlanCache(cfg.plan_cache_bytes))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # few threads for blocking handlers: many threads contending for the GIL inflate tail latency
        anyio.to_thread.current_default_thread_limiter().total_tokens = cfg.threads
        if cfg.migrate_on_start:
            migrate.upgrade(db.engine)
        pool.start()
        with contextlib.suppress(Exception):  # open /readyz's connection now; a failure shows in /readyz
            await health.ready_check_of(app).revision()
        if isinstance(pool, LocalPool) and pool.workers:
            pool.reap_once()  # resume jobs queued or left running by a previous server
        try:
            yield
        finally:
            pool.stop()
            health.close_ready_check(app)
            if db.async_reader is not None:
                await db.async_reader.close()
            db.dispose()

    app = FastAPI(title="Placer", version=API_VERSION, lifespan=lifespan,
                  description="Solver-backed placement optimizer for deep learning. Authenticate with "
                              "`Authorization: Bearer <key>`; errors are RFC 9457 problem+json.")
    app.state.ctx = ctx
    for module in (jobs, plans, graphs, topologies, comparisons, runs, calibrations, solvers_api, health):  # the polled GETs first
        app.include_router(module.router)
    install_error_handlers(app)
    dashboard.mount(app, cfg.session_secret)
    app.add_middleware(BodyLimitMiddleware, max_bytes=cfg.max_request_bytes)
    app.add_middleware(BoundaryMiddleware, router=app.router)
    gates = admission_gates(cfg)
    metrics.watch_admission(gates)
    app.add_middleware(AdmissionMiddleware, gates=gates, deadline_s=cfg.request_deadline_s,
                       body_timeout_s=cfg.body_timeout_s)
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def admission_gates(cfg: ServiceConfig) -> dict[str, Gate]:
    """One :class:`~service.overload.Gate` per route class, sized by the ``admit_*`` settings."""
    limits = {"reads": cfg.admit_reads, "lists": cfg.admit_lists, "writes": cfg.admit_writes,
              "streams": cfg.admit_streams}
    return {name: Gate(name, limit, 0 if name == "streams" else cfg.admit_queue, cfg.admit_wait_s)
            for name, limit in limits.items()}


def _depends_on(dependant: Dependant, call: Callable[..., Any]) -> bool:
    """Whether a route's dependency tree calls ``call``."""
    return any(d.call is call or _depends_on(d, call) for d in dependant.dependencies)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI schema, with every 4xx/5xx answer documented as problem+json."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    schema["components"]["securitySchemes"] = {"HTTPBearer": BEARER_SCHEME}
    authenticated = {route.operation_id or route.unique_id for route in flat_routes(app.routes)
                     if isinstance(route, APIRoute) and _depends_on(route.dependant, get_project)}
    components["ProblemOut"] = ProblemOut.model_json_schema(ref_template="#/components/schemas/{model}")
    problem = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/ProblemOut"}}}
    for path, ops in schema.get("paths", {}).items():
        for method, op in ops.items():
            if op.get("operationId") in authenticated:
                op["security"] = [{"HTTPBearer": []}]
            responses = op.setdefault("responses", {})
            if "requestBody" in op:
                responses.setdefault("400", {"description": "the body could not be parsed"})
            if path.startswith("/v1") and path != "/v1/solvers":
                for code, text in (("401", "missing or invalid API key"), ("429", "rate limit exceeded"),
                                   ("413", "request body too large"), ("422", "invalid input"),
                                   ("503", "overloaded, past the request deadline, or the database is "
                                           "unavailable; retry after Retry-After"),
                                   ("408", "the request's headers or body stopped arriving")):
                    responses.setdefault(code, {"description": text})
            responses.setdefault("500", {"description": "internal error (a bug; logged)"})
            for code, resp in responses.items():
                if method == "head":  # no body (service.api.head)
                    resp.pop("content", None)
                elif code.isdigit() and int(code) >= 400 and not (path == "/readyz" and code == "503"):
                    resp["content"] = problem
    components["OpGraphDocument"] = _document_schema("opgraph", "OpGraphDocument", components)
    components["TopologyDocument"] = _document_schema("topology", "TopologyDocument", components)
    components["PlanDocument"] = _document_schema("plan", "PlanDocument", components)
    components["EvaluateIn"]["properties"]["plan"] = {
        "$ref": "#/components/schemas/PlanDocument", "description": "a placer.plan/v1 document"}
    for name, component in components.items():
        if "Out" not in name:  # request schemas only (uploaded documents included)
            _storable_text(component)
    for ops in schema.get("paths", {}).values():
        for op in ops.values():
            for param in op.get("parameters", []):
                _storable_text(param.get("schema", {}))
    components["StorableJSON"] = {"anyOf": [
        {"type": "string", "pattern": TEXT_PATTERN}, {"type": "number"}, {"type": "boolean"}, {"type": "null"},
        {"type": "array", "items": {"$ref": "#/components/schemas/StorableJSON"}},
        {"type": "object", "propertyNames": {"pattern": TEXT_PATTERN},
         "additionalProperties": {"$ref": "#/components/schemas/StorableJSON"}}]}
    components["RunDocument"] = _document_schema("run", "RunDocument", components)
    components["CalibrationDocument"] = _document_schema("calibration", "CalibrationDocument", components)
    schema["components"]["schemas"].pop("HTTPValidationError", None)
    schema["components"]["schemas"].pop("ValidationError", None)
    app.openapi_schema = schema
    return schema


def _document_schema(name: str, component: str, components: dict[str, Any]) -> dict[str, Any]:
    """The library's JSON Schema of ``placer.<name>/v1`` as an OpenAPI component; its ``$defs``
    become components ``<component>_<def>`` (references inside OpenAPI resolve from its root)."""
    def rewrite(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: (f"#/components/schemas/{component}_" + v.removeprefix("#/$defs/")
                        if k == "$ref" and isinstance(v, str) else rewrite(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [rewrite(v) for v in value]
        return value

    doc = {k: v for k, v in load_schema(name).items() if k not in ("$schema", "$id", "$defs")}
    for def_name, definition in load_schema(name).get("$defs", {}).items():
        components[f"{component}_{def_name}"] = rewrite(definition)
    out: dict[str, Any] = rewrite(doc)
    return out


# No NUL (service.boundary).  Unpaired surrogates are refused too, but a pattern cannot name them:
# they are not Unicode scalar values, so validators that work on Unicode text (Rust's regex
# engine, which schemathesis validates with) reject such a pattern.
TEXT_PATTERN = "^[^\\u0000]*$"


def _storable_text(schema: Any) -> None:
    """State in a request schema that strings (and object keys) hold no NUL or unpaired surrogate."""
    if isinstance(schema, list):
        for item in schema:
            _storable_text(item)
        return
    if not isinstance(schema, dict):
        return
    kinds = schema.get("type")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}  # e.g. ["object", "null"]
    if "string" in kinds and "enum" not in schema and "pattern" not in schema:
        schema["pattern"] = TEXT_PATTERN
    extra = schema.get("additionalProperties")
    free_form = extra is True or (extra is None and "properties" not in schema)  # e.g. a document's attrs
    if "object" in kinds and extra is not False:
        schema.setdefault("propertyNames", {"pattern": TEXT_PATTERN})
        if free_form:  # free-form values: any JSON of storable text
            schema["additionalProperties"] = {"$ref": "#/components/schemas/StorableJSON"}
    for value in schema.values():
        _storable_text(value)
