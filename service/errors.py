"""RFC 9457 problem+json: the one place errors become HTTP responses.

Library errors (:class:`~solvers.model.errors.PlacerError`) carry ``http_status``,
``type_slug``, ``title``, ``field`` and ``ref``; the service's own errors below extend the
same hierarchy, so a single handler serves both.  Request-validation errors and unknown
routes answer in the same shape; a bug's 500 is answered by :mod:`service.boundary`.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from solvers.model.errors import PlacerError

log = logging.getLogger("placer.service")
PROBLEM_JSON = "application/problem+json"
TYPE_BASE = "/problems/"


class NotFound(PlacerError):
    type_slug = "not-found"
    title = "Not found"
    http_status = 404


class Conflict(PlacerError):
    type_slug = "conflict"
    title = "Conflict"
    http_status = 409


class Unauthorized(PlacerError):
    type_slug = "unauthorized"
    title = "Missing or invalid API key"
    http_status = 401


class PayloadTooLarge(PlacerError):
    type_slug = "payload-too-large"
    title = "Request body too large"
    http_status = 413


class UnsupportedMediaType(PlacerError):
    type_slug = "unsupported-media-type"
    title = "Unsupported media type"
    http_status = 415


class RetryLater(PlacerError):
    """An error answered with a ``Retry-After`` header (:attr:`retry_after`)."""

    def __init__(self, message: str, retry_after_s: float, field: str | None = None, ref: str | None = None) -> None:
        super().__init__(message, field=field, ref=ref)
        self.retry_after_s = retry_after_s

    @property
    def retry_after(self) -> str:
        """``Retry-After``'s value: whole seconds, at least 1."""
        return str(max(1, round(self.retry_after_s)))


class RateLimited(RetryLater):
    type_slug = "rate-limited"
    title = "Too many requests"
    http_status = 429


class IdempotencyInProgress(RetryLater):
    """409: another request with the same ``Idempotency-Key`` is still creating the resource
    (the IETF Idempotency-Key draft); retry after ``Retry-After`` seconds."""

    type_slug = "idempotency-in-progress"
    title = "A request with this Idempotency-Key is in progress"
    http_status = 409


class DatabaseUnavailable(Exception):
    """The database could not be reached for a read on the event loop (answered 503 with
    ``Retry-After``, like the ORM's outages; other operational errors, a bad statement say,
    propagate and are answered 500)."""


def problem_body(status: int, slug: str, title: str, detail: str, instance: str | None = None,
                 **extra: Any) -> dict[str, Any]:
    """A problem+json body; ``extra`` members with value ``None`` are left out."""
    body: dict[str, Any] = {"type": TYPE_BASE + slug, "title": title, "status": status, "detail": detail}
    if instance:
        body["instance"] = instance
    body.update({k: v for k, v in extra.items() if v is not None})
    return body


def problem_response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def placer_error_response(exc: PlacerError, instance: str | None = None) -> JSONResponse:
    status = int(getattr(exc, "http_status", 400))
    body = problem_body(status, exc.type_slug, exc.title, exc.message, instance, field=exc.field, ref=exc.ref)
    headers: dict[str, str] = {}
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, RetryLater):
        headers["Retry-After"] = exc.retry_after
    if status == 408:  # the client stopped sending: the connection is not reused
        headers["Connection"] = "close"
    if status >= 500:
        log.error("%s: %s", exc.type_slug, exc.message)
    return problem_response(status, body, headers)


def field_of(loc: Any) -> str:
    """A validation error's location as a field path: ``sweep.micro_batches[2]`` (``body`` dropped)."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header"):
        where = parts.pop(0)
        if not parts:
            return str(where)
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


DATABASE_RETRY_AFTER_S = 2


OUTAGE_MARKERS = ("connect", "terminating", "closed", "shutting down", "starting up", "server closed", "timeout",
                  "recovery mode", "database is locked")


def is_outage_message(text: str) -> bool:
    """Whether a driver's operational error says the database is down, restarting or busy (answered
    503 with Retry-After), not that a statement is wrong (500)."""
    text = text.lower()
    return any(s in text for s in OUTAGE_MARKERS)


def _is_outage(exc: DBAPIError) -> bool:
    """A lost or refused database connection (not a bad statement): the server is down or restarting."""
    if exc.connection_invalidated:
        return True
    from sqlalchemy.exc import InterfaceError, OperationalError

    return isinstance(exc, OperationalError | InterfaceError) and is_outage_message(str(exc.orig))


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers mapping every error to problem+json."""

    @app.exception_handler(PlacerError)
    async def _placer(request: Request, exc: PlacerError) -> JSONResponse:
        return placer_error_response(exc, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if errors and errors[0].get("type") == "json_invalid":
            body = problem_body(400, "malformed-body", "Malformed request body",
                                f"body: invalid JSON: {errors[0].get('ctx', {}).get('error', 'unparseable')}",
                                request.url.path, field="body")
            return problem_response(400, body)
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        field = field_of(first.get("loc", ()))
        detail = f"{field}: {first.get('msg', 'invalid value')}" if field else str(first.get("msg"))
        more = [{"field": field_of(e.get("loc", ())), "message": e.get("msg")} for e in errors[:20]]
        return problem_response(422, problem_body(422, "invalid-request", "Invalid request", detail,
                                                  request.url.path, field=field or None, errors=more))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if isinstance(exc.__cause__, PlacerError):  # raised while FastAPI read the body (the size limit)
            return placer_error_response(exc.__cause__, request.url.path)
        slug = {400: "malformed-body", 404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
        title = {400: "Malformed request body", 404: "Not found", 405: "Method not allowed"}.get(
            exc.status_code, "HTTP error")
        detail = str(exc.detail) if exc.detail else title
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.method} {request.url.path}"
        field = "body" if exc.status_code == 400 else None
        body = problem_body(exc.status_code, slug, title, detail, request.url.path, field=field)
        return problem_response(exc.status_code, body, dict(exc.headers or {}))

    @app.exception_handler(DatabaseUnavailable)
    async def _unavailable(request: Request, exc: DatabaseUnavailable) -> JSONResponse:
        return outage_response(request.method, request.url.path, exc)

    @app.exception_handler(PoolTimeout)
    async def _pool_timeout(request: Request, exc: PoolTimeout) -> JSONResponse:
        log.warning("no pooled database connection within the pool timeout on %s %s", request.method,
                    request.url.path)
        body = problem_body(503, "database-busy", "Database busy",
                            "no database connection became free within the pool timeout; retry after Retry-After",
                            request.url.path)
        return problem_response(503, body, {"Retry-After": str(DATABASE_RETRY_AFTER_S)})

    @app.exception_handler(DBAPIError)
    async def _database(request: Request, exc: DBAPIError) -> JSONResponse:
        response = database_error_response(exc, request.method, request.url.path)
        if response is None:
            raise exc  # a bug: answered 500 by service.boundary
        return response


def database_error_response(exc: DBAPIError, method: str, path: str) -> JSONResponse | None:
    """503 with ``Retry-After`` when the database is unreachable; ``None`` for any other database error."""
    if not _is_outage(exc):
        return None
    return outage_response(method, path, exc.orig)


def outage_response(method: str, path: str, reason: object) -> JSONResponse:
    """503 with ``Retry-After``: the database cannot be reached."""
    log.warning("database unavailable on %s %s: %s", method, path, reason)
    body = problem_body(503, "database-unavailable", "Database unavailable",
                        "the database cannot be reached; retry shortly", path)
    return problem_response(503, body, {"Retry-After": str(DATABASE_RETRY_AFTER_S)})
