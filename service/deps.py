"""FastAPI dependencies: the service context, a database session, the caller's project."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from service.auth import RateLimiter, project_for_key
from service.db.engine import Database
from service.settings import Settings

if TYPE_CHECKING:
    from service.jobs.dispatch import Dispatcher
    from service.metrics import Metrics


@dataclass
class Context:
    """Everything a request handler may need, built once per app."""

    settings: Settings
    db: Database
    dispatcher: Dispatcher
    metrics: Metrics
    limiter: RateLimiter


def get_context(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


CtxDep = Annotated[Context, Depends(get_context)]


def get_session(ctx: CtxDep) -> Iterator[Session]:
    with ctx.db.session() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]
bearer = HTTPBearer(auto_error=False, description="an API key from `placer keys create --project NAME`")


def get_project(ctx: CtxDep, session: SessionDep,
                credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> str:
    """The project of the request's API key; rate-limited per project."""
    header = f"{credentials.scheme} {credentials.credentials}" if credentials else None
    project_id = project_for_key(session, header)
    session.commit()  # end the read transaction: SQLite serialises transactions, keep them short
    ctx.limiter.check(project_id)
    return project_id


ProjectDep = Annotated[str, Depends(get_project)]
