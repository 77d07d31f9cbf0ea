"""``/healthz`` (the process answers), ``/readyz`` (database reachable, schema at head), ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from sqlalchemy import text

from service.db import migrate
from service.deps import CtxDep
from service.schemas import HealthOut

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthOut, response_model_exclude_none=True)
def healthz() -> HealthOut:
    return HealthOut(status="ok")


@router.get("/readyz", response_model=HealthOut, responses={503: {"model": HealthOut, "description": "not ready"}})
def readyz(ctx: CtxDep) -> JSONResponse:
    """Ready when the database answers and its schema is at the newest migration."""
    head = migrate.head_revision()
    try:
        with ctx.db.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        current = migrate.current_revision(ctx.db.engine)
    except Exception as exc:
        body = HealthOut(status="unavailable", database=f"error: {type(exc).__name__}", head=head)
        return JSONResponse(body.model_dump(), status_code=503)
    ok = current == head
    body = HealthOut(status="ok" if ok else "migrations pending", database="ok", revision=current, head=head,
                     workers=ctx.dispatcher.workers)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


@router.get("/metrics", responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                                         "description": "Prometheus text format"}})
async def metrics(ctx: CtxDep) -> Response:
    body = await run_in_threadpool(ctx.metrics.render)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
