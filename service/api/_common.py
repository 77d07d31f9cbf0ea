"""Helpers shared by the routers: documented error responses, ownership lookups, cursors."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Response
from sqlalchemy import Select, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.db.models import Comparison, Job
from service.db.owned import get_owned
from service.documents import decompress
from solvers.model.errors import InvalidInput

__all__ = ["ERRORS", "MAX_INT32", "MAX_PAGE", "create_once", "document_json", "document_response", "errors", "get_owned", "idempotent_existing",
           "next_cursor", "paginate"]

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"description": text} for code, text in (
        (401, "missing or invalid API key"), (404, "not found (or another project's)"),
        (413, "request body too large"), (422, "invalid input; `field` names what is wrong"),
        (429, "rate limit exceeded"))
}
MAX_PAGE = 500
MAX_INT32 = 2**31 - 1  # integer query parameters compared with 32-bit columns
Idempotent = TypeVar("Idempotent", Job, Comparison)


def errors(*extra: int) -> dict[int | str, dict[str, Any]]:
    """The documented error responses of a route (problem+json), plus ``extra`` codes."""
    texts = {409: "conflict with the resource's current state", 415: "unsupported Content-Encoding",
             501: "an optional dependency is missing"}
    out = dict(ERRORS)
    for code in extra:
        out[code] = {"description": texts.get(code, "error")}
    return out


def idempotent_existing(session: Session, model: type[Idempotent], project: str, key: str,
                        request_digest: str) -> Idempotent | None:
    """The job / comparison created earlier with ``Idempotency-Key: key``; 422 if the key came with another request."""
    found = session.scalar(select(model).where(model.project_id == project, model.idempotency_key == key))
    if found is not None and found.request_digest != request_digest:
        raise InvalidInput("Idempotency-Key: the key was already used with a different request",
                           field="Idempotency-Key", ref=key)
    return found


def create_once(session: Session, model: type[Idempotent], project: str, key: str | None, request_digest: str,
                create: Callable[[], Idempotent]) -> tuple[Idempotent, bool]:
    """Create a job or comparison and commit it, at most once per ``Idempotency-Key``.

    Returns ``(row, created)``: the row made by ``create`` (then committed), or the one an
    earlier request with the same key and body created, including a concurrent request whose
    insert won the key's unique constraint while this one was creating.

    It returns with no transaction open.  On SQLite a write transaction holds the database's one
    write lock, and a request must not keep it while it waits for a thread to serialise its
    answer: parallel retries, each holding a thread while waiting for the lock, would stall
    until the busy timeout.  A retry waits only while the first request creates (one writer at
    a time on SQLite, the key's unique index on PostgreSQL), then gets the committed row.
    """
    if key and (found := idempotent_existing(session, model, project, key, request_digest)):
        session.commit()
        return found, False
    try:
        row = create()
        session.commit()
    except IntegrityError:
        session.rollback()
        found = idempotent_existing(session, model, project, key or "", request_digest)
        session.commit()
        if found is None:
            raise
        return found, False
    return row, True


def paginate(stmt: Select[Any], id_column: Any, cursor: str | None, limit: int) -> Select[Any]:
    """Newest first; ``cursor`` is the last id of the previous page."""
    if cursor:
        stmt = stmt.where(id_column < cursor)
    return stmt.order_by(id_column.desc()).limit(limit + 1)


def document_response(body: bytes, accept_encoding: str | None, headers: dict[str, str] | None = None) -> Response:
    """A stored (gzip) document: sent as stored when the client accepts gzip, else as compact JSON."""
    if accept_encoding and "gzip" in accept_encoding.lower():
        return Response(body, media_type="application/json", headers={**(headers or {}), "Content-Encoding": "gzip"})
    return Response(document_json(body), media_type="application/json", headers=headers)


def document_json(body: bytes) -> bytes:
    """A stored (gzip) document as compact JSON."""
    return json.dumps(decompress(body), separators=(",", ":")).encode()


def next_cursor(rows: list[Any], limit: int) -> tuple[list[Any], str | None]:
    if len(rows) > limit:
        rows = rows[:limit]
        return rows, str(rows[-1].id)
    return rows, None
