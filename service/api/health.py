"""``/healthz`` (the process answers), ``/readyz`` (database reachable, schema at head), ``/metrics``.

None of them is admitted through :mod:`service.overload` and none uses the request thread pool or
the database pool that requests share: ``/healthz`` answers from the event loop, and ``/readyz``
checks the database on its own connection in its own thread (:class:`ReadyCheck`), answering
503 when the check takes longer than ``ready_timeout_s``.  Under any load both answer at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import Engine, text

from service.db import migrate
from service.db.engine import make_engine
from service.deps import CtxDep
from service.schemas import HealthOut

router = APIRouter(tags=["health"])


@functools.cache
def _head_revision() -> str | None:
    """The newest migration (read from the migration scripts once)."""
    return migrate.head_revision()


class ReadyCheck:
    """The database check of ``/readyz``: one connection of its own (never waiting behind the
    requests' pool), used by one thread of its own; concurrent probes share the check in progress."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.engine: Engine = make_engine(url, pool_size=1, max_overflow=0, pool_timeout_s=max(1.0, timeout_s))
        self.engine = self.engine.execution_options(placer_read_only=True)  # SQLite: no write lock
        self._running: asyncio.Future[str | None] | None = None

    def _revision(self) -> str | None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return migrate.current_revision(self.engine)

    async def revision(self) -> str | None:
        """The database's migration revision; raises on failure and :class:`TimeoutError` past the timeout."""
        if self._running is None or self._running.done():
            self._running = self._start()
        return await asyncio.wait_for(asyncio.shield(self._running), timeout=self.timeout_s)

    def _start(self) -> asyncio.Future[str | None]:
        """Run one check in a daemon thread (a check hung on an unreachable database never holds up
        the process's exit, as a pool thread would)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str | None] = loop.create_future()

        def settle(result: str | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def check() -> None:
            try:
                result = self._revision()
            except BaseException as exc:  # handed to the awaiting probe
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(settle, None, exc)
                return
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, result, None)

        threading.Thread(target=check, name="placer-readyz", daemon=True).start()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # read: no "never retrieved" log
        return future

    def close(self) -> None:
        self.engine.dispose()


def ready_check_of(app: FastAPI) -> ReadyCheck:
    """The app's :class:`ReadyCheck`, made at the first use."""
    check: ReadyCheck | None = getattr(app.state, "ready_check", None)
    if check is None:
        cfg = app.state.ctx.config
        check = app.state.ready_check = ReadyCheck(cfg.database_url, cfg.ready_timeout_s)
    return check


def close_ready_check(app: FastAPI) -> None:
    """Release the check's connection and thread (at shutdown)."""
    check: ReadyCheck | None = getattr(app.state, "ready_check", None)
    if check is not None:
        check.close()
        app.state.ready_check = None


@router.get("/healthz", response_model=HealthOut, response_model_exclude_none=True)
async def healthz() -> HealthOut:
    return HealthOut(status="ok")


@router.get("/readyz", response_model=HealthOut, responses={503: {"model": HealthOut, "description": "not ready"}})
async def readyz(request: Request, ctx: CtxDep) -> JSONResponse:
    """Ready when the database answers (within ``ready_timeout_s``) and its schema is at the newest migration."""
    head = _head_revision()
    try:
        current = await ready_check_of(request.app).revision()
    except TimeoutError:
        body = HealthOut(status="unavailable", database=f"error: no answer within {ctx.config.ready_timeout_s:g} s",
                         head=head)
        return JSONResponse(body.model_dump(), status_code=503, headers={"Retry-After": "1"})
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
    body = await asyncio.get_running_loop().run_in_executor(None, ctx.metrics.render)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
