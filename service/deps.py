"""FastAPI dependencies: the service context, a database session, the caller's project.

Every dependency here is a coroutine: FastAPI runs a plain function dependency in its thread
pool, a hand-off that would cost more than the dependency itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from service.auth import KeyCache, RateLimiter, bearer_key_hash, key_for_hash
from service.config import ServiceConfig
from service.db.engine import Database
from service.plan_cache import PlanCache

if TYPE_CHECKING:
    from service.jobs.dispatch import Dispatcher
    from service.metrics import Metrics


@dataclass
class Context:
    """Everything a request handler may need, built once per app."""

    config: ServiceConfig
    db: Database
    dispatcher: Dispatcher
    metrics: Metrics
    limiter: RateLimiter
    keys: KeyCache
    plans: PlanCache


def context_of(request: Request) -> Context:
    """The :class:`Context` of the request's app."""
    ctx: Context = request.app.state.ctx
    return ctx


async def get_context(request: Request) -> Context:
    """The app's :class:`Context` (a dependency)."""
    return context_of(request)


CtxDep = Annotated[Context, Depends(get_context)]


async def get_session(ctx: CtxDep, request: Request) -> AsyncIterator[Session]:
    """A session for the request: read-only for GET and HEAD, read-write otherwise.

    Handlers commit their writes themselves; what is left is ended here, on the event loop,
    so that releasing a transaction never waits for a free worker thread.
    """
    read_only = request.method in ("GET", "HEAD")
    session = (ctx.db.read_sessions if read_only else ctx.db.sessions)()
    try:
        yield session
        if session.in_transaction():
            session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


SessionDep = Annotated[Session, Depends(get_session)]
BEARER_SCHEME = {"type": "http", "scheme": "bearer",
                 "description": "an API key from `placer key create --project NAME`"}
"""The OpenAPI security scheme of :func:`get_project` (``HTTPBearer``, stated in :mod:`service.app`)."""


def _lookup_key(db: Database, key_hash: str) -> tuple[str, float | None]:
    with db.session(read_only=True) as s:
        return key_for_hash(s, key_hash)


def bearer_credentials(authorization: str | None) -> str | None:
    """``Bearer <key>`` from an ``Authorization`` header, or ``None`` if it holds no bearer key
    (missing, another scheme, no key)."""
    scheme, _, key = (authorization or "").partition(" ")
    key = key.strip()
    return f"{scheme} {key}" if scheme.lower() == "bearer" and key else None


async def get_project(request: Request) -> str:
    """The project of the request's API key; rate-limited per project, or per key for a key with a
    rate limit of its own (``placer key create --rate-limit``).

    A key found is cached for ``key_cache_s`` (:class:`~service.auth.KeyCache`): most requests
    authenticate without a database round trip, and a revoked key is refused at the latest when
    its entry expires.  One dependency with no dependencies of its own: it reads the header and
    the app's :class:`Context` itself.
    """
    ctx = context_of(request)
    key_hash = bearer_key_hash(bearer_credentials(request.headers.get("authorization")))
    entry = ctx.keys.entry(key_hash)
    if entry is None:
        entry = await run_in_threadpool(_lookup_key, ctx.db, key_hash)
        ctx.keys.put(key_hash, *entry)
    project_id, key_rate = entry
    if key_rate is None:
        ctx.limiter.check(project_id)  # the project's bucket, at PLACER_RATE_LIMIT_PER_S
    else:
        ctx.limiter.check("key:" + key_hash, key_rate)  # the key's own bucket, at its own rate
    return project_id


ProjectDep = Annotated[str, Depends(get_project)]
