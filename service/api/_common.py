"""Helpers shared by the routers: documented error responses, ownership lookups, cursors."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from fastapi import Response
from sqlalchemy import Select, delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.db.models import Comparison, IdempotencyReservation, Job, utcnow
from service.db.owned import get_owned
from service.documents import decompress
from service.errors import IdempotencyInProgress
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


IDEMPOTENCY_RETRY_AFTER_S = 1.0
"""The ``Retry-After`` of a 409 ``idempotency-in-progress``: creating a job or a comparison takes
milliseconds to a second."""


def create_once(session: Session, model: type[Idempotent], project: str, key: str | None, request_digest: str,
                create: Callable[[], Idempotent], reserve_s: float = 30.0) -> tuple[Idempotent, bool]:
    """Create a job or comparison and commit it, at most once per ``Idempotency-Key``.

    Returns ``(row, created)``: the row made by ``create`` (then committed), or the one an
    earlier request with the same key and body created.  Following the IETF Idempotency-Key
    draft, a request whose key is still being used by another request to create the resource
    is answered at once with 409 ``idempotency-in-progress`` and ``Retry-After``
    (:class:`~service.errors.IdempotencyInProgress`), never made to wait:

    1. the resource already created with the key is the answer (422 if the body differs);
    2. else the key is claimed: an :class:`~service.db.models.IdempotencyReservation` row is
       inserted and committed at once (its primary key admits one claim per project and key);
       a request that finds the claim held gets the 409 (or the 422 if its body differs);
    3. the claimer creates the resource and deletes its claim in the same transaction; if the
       work fails the claim is deleted and the error answered.  A claim left by a crashed server
       expires after ``reserve_s`` and is taken over (compare-and-set on ``reserved_until``);
       even then the resource's own unique index on ``(project_id, idempotency_key)`` keeps it
       to one.

    It returns with no transaction open.  On SQLite a write transaction holds the database's one
    write lock, and a request must not keep it while it waits for a thread to serialise its
    answer; each transaction here is short (a claim, or the creation itself).
    """
    if not key:
        row = create()
        session.commit()
        return row, True
    if found := idempotent_existing(session, model, project, key, request_digest):
        session.commit()
        return found, False
    scope = model.__tablename__
    if found := _claim(session, model, project, key, request_digest, reserve_s):
        return found, False
    try:
        row = create()
        session.execute(_unclaim(project, scope, key))
        session.commit()
    except IntegrityError:  # a creator that took over an expired claim won the resource's unique index
        session.rollback()
        session.execute(_unclaim(project, scope, key))
        found = idempotent_existing(session, model, project, key, request_digest)
        session.commit()
        if found is None:
            raise
        return found, False
    except BaseException:
        session.rollback()
        session.execute(_unclaim(project, scope, key))
        session.commit()
        raise
    return row, True


def _the_claim(project: str, scope: str, key: str) -> tuple[Any, ...]:
    """The conditions that select the claim of ``key``."""
    return (IdempotencyReservation.project_id == project, IdempotencyReservation.scope == scope,
            IdempotencyReservation.key == key)


def _unclaim(project: str, scope: str, key: str) -> Any:
    return delete(IdempotencyReservation).where(*_the_claim(project, scope, key))


def _in_progress(key: str) -> IdempotencyInProgress:
    return IdempotencyInProgress("Idempotency-Key: a request with this key is still creating the resource; "
                                 "retry shortly", retry_after_s=IDEMPOTENCY_RETRY_AFTER_S, field="Idempotency-Key",
                                 ref=key)


def _claim(session: Session, model: type[Idempotent], project: str, key: str, request_digest: str,
           reserve_s: float) -> Idempotent | None:
    """Claim ``key`` for this request (``None``), or return the resource created meanwhile; raise
    409 while another request holds the claim, 422 if that request has another body."""
    scope = model.__tablename__
    for _ in range(3):  # a claim released between our insert and our read: claim again
        now = utcnow()
        try:
            session.add(IdempotencyReservation(project_id=project, scope=scope, key=key,
                                               request_digest=request_digest,
                                               reserved_until=now + timedelta(seconds=reserve_s)))
            session.commit()
            return None
        except IntegrityError:
            session.rollback()
        held = session.scalar(select(IdempotencyReservation).where(*_the_claim(project, scope, key))
                              .execution_options(populate_existing=True))
        found = idempotent_existing(session, model, project, key, request_digest)
        if found is not None:
            session.commit()
            return found
        if held is None:
            session.commit()
            continue
        if held.request_digest != request_digest:
            session.commit()
            raise InvalidInput("Idempotency-Key: the key is being used by a request with a different body",
                               field="Idempotency-Key", ref=key)
        if held.reserved_until > now:
            session.commit()
            raise _in_progress(key)
        taken = session.execute(update(IdempotencyReservation).where(
            *_the_claim(project, scope, key), IdempotencyReservation.reserved_until == held.reserved_until,
        ).values(reserved_until=now + timedelta(seconds=reserve_s)))
        session.commit()
        if getattr(taken, "rowcount", 0) == 1:
            return None  # the expired claim of a crashed request is ours now
    raise _in_progress(key)


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


IF_NONE_MATCH_MAX_CHARS = 2000  # a longer If-None-Match is refused (422)


def plan_etag(plan_id: str) -> str:
    """A stored plan never changes: its id is its strong entity tag (RFC 9110 §8.8.3)."""
    return f'"{plan_id}"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (or ``*``), by weak comparison (RFC 9110 §13.1.2)."""
    if not if_none_match:
        return False
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


def plan_response(plan_id: str, data: bytes, if_none_match: str | None) -> Response:
    """``GET /v1/plans/{id}``'s answer: the plan's compact JSON ``data`` with its ``ETag``, or
    304 when ``If-None-Match`` names it (the full path and the lean one, :mod:`service.api.hot`)."""
    etag = plan_etag(plan_id)
    if etag_matches(if_none_match, etag):
        return Response(status_code=304, headers={"ETag": etag})
    return Response(data, media_type="application/json", headers={"ETag": etag})


def document_json(body: bytes) -> bytes:
    """A stored (gzip) document as compact JSON."""
    return json.dumps(decompress(body), separators=(",", ":")).encode()


def next_cursor(rows: list[Any], limit: int) -> tuple[list[Any], str | None]:
    if len(rows) > limit:
        rows = rows[:limit]
        return rows, str(rows[-1].id)
    return rows, None
