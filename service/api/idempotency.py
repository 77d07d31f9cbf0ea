"""Creating a job or a comparison at most once per ``Idempotency-Key`` (the IETF Idempotency-Key draft)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.db.models import Comparison, IdempotencyReservation, Job, utcnow
from service.errors import IdempotencyInProgress
from service.owner import owner_is_dead, this_process
from solvers.model.errors import InvalidInput

Idempotent = TypeVar("Idempotent", Job, Comparison)


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
       is taken over at once when its ``owner`` process (:mod:`service.owner`: host, boot, pid and
       start time) is known dead, else once it expires after ``reserve_s`` (a server on another
       host); the takeover is a compare-and-set on ``reserved_until``;
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
    me = this_process()
    for _ in range(3):  # a claim released between our insert and our read: claim again
        now = utcnow()
        try:
            session.add(IdempotencyReservation(project_id=project, scope=scope, key=key,
                                               request_digest=request_digest,
                                               reserved_until=now + timedelta(seconds=reserve_s), owner=me))
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
        if held.reserved_until > now and not owner_is_dead(held.owner):
            session.commit()
            raise _in_progress(key)
        taken = session.execute(update(IdempotencyReservation).where(
            *_the_claim(project, scope, key), IdempotencyReservation.reserved_until == held.reserved_until,
        ).values(reserved_until=now + timedelta(seconds=reserve_s), owner=me))
        session.commit()
        if getattr(taken, "rowcount", 0) == 1:
            return None  # the claim of a crashed server (expired, or its process gone) is ours now
    raise _in_progress(key)
