"""FastAPI dependencies: the service context, a database session, the caller's project."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from service.auth import KeyCache, RateLimiter, bearer_key_hash, project_for_key_hash
from service.config import ServiceConfig
from service.db.engine import Database

if TYPE_CHECKING:
    from service.api.hot import PlanCache
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


def get_context(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


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
bearer = HTTPBearer(auto_error=False, description="an API key from `placer key create --project NAME`")


def _lookup_project(db: Database, key_hash: str) -> str:
    with db.session(read_only=True) as s:
        return project_for_key_hash(s, key_hash)


async def get_project(ctx: CtxDep,
                      credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> str:
    """The project of the request's API key (cached for ``key_cache_s``); rate-limited per project."""
    key_hash = bearer_key_hash(f"{credentials.scheme} {credentials.credentials}" if credentials else None)
    project_id = ctx.keys.get(key_hash)
    if project_id is None:
        project_id = await run_in_threadpool(_lookup_project, ctx.db, key_hash)
        ctx.keys.put(key_hash, project_id)
    ctx.limiter.check(project_id)
    return project_id


ProjectDep = Annotated[str, Depends(get_project)]
