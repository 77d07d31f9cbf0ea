"""The hottest reads on a lean path: ``GET /v1/jobs/{id}``, ``/v1/plans/{id}`` and ``/v1/graphs/{id}``.

Clients poll these, so each costs little CPU: :class:`HotReadMiddleware` answers them before
FastAPI's routing, dependency solving and per-request ORM session, with the same rules and the
same answers as the routes in :mod:`service.api.jobs`, :mod:`service.api.plans` and
:mod:`service.api.graphs` (which still serve every other case):

* authentication only from the key cache (:class:`service.auth.KeyCache`, whose entries expire
  after ``key_cache_s``, so a revoked key is refused at the latest then); a key not in the
  cache, a missing or malformed ``Authorization``, a query string, a ``HEAD`` go the full way,
  which checks the key in the database and caches it;
* the rate limit: a request over it goes the full way, which answers 429 (no token is taken);
* project scoping: another project's id is 404, as on the full path;
* one primary-key ``SELECT``, no ORM session: on PostgreSQL awaited on the connections of
  :class:`service.db.loop_reads.AsyncReader` (autocommit: one round trip, during which the
  event loop serves other requests), on SQLite in-process on a connection of its own in
  autocommit (:class:`service.db.loop_reads.SqliteReader`: one ``sqlite3`` call);
* plans are immutable and are never deleted through the API, so a plan's answer is kept in a
  bounded LRU (:class:`PlanCache`) after its first read, with an ``ETag`` (the plan id) and
  ``If-None-Match`` answered 304.  Jobs change and graphs can be deleted: they are read every
  time.

Paths, query strings and headers have already met :class:`service.boundary.BoundaryMiddleware`
(the middleware sits inside it), and the request metrics are labelled by the same route
templates as the full path's.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from sqlalchemy import Column, Table
from sqlalchemy.exc import DBAPIError
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from service.api._common import IF_NONE_MATCH_MAX_CHARS, document_json, plan_response
from service.boundary import IdConvertor, flat_routes
from service.db.loop_reads import DatabaseUnavailable, SqliteReader
from service.db.models import Graph, Job, PlanRow
from service.db.owned import check_owned
from service.errors import NotFound, Unauthorized, database_error_response, outage_response, placer_error_response

if TYPE_CHECKING:
    from service.deps import Context

HOT_PATH = re.compile(rf"/v1/(jobs|plans|graphs)/({IdConvertor.regex})")


class CachedPlan(NamedTuple):
    project_id: str
    data: bytes  # compact JSON


class PlanCache:
    """Answers of ``GET /v1/plans/{id}``: plan id -> (project id, compact JSON), least recently
    used first out, at most ``max_bytes`` of JSON in all (0: off)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, CachedPlan] = OrderedDict()

    def get(self, plan_id: str) -> CachedPlan | None:
        hit = self._entries.get(plan_id)
        if hit is not None:
            self._entries.move_to_end(plan_id)
        return hit

    def put(self, plan_id: str, project_id: str, data: bytes) -> None:
        if len(data) > self.max_bytes // 4 or plan_id in self._entries:
            return  # off, or a single document too large to be worth a quarter of the cache
        self._entries[plan_id] = CachedPlan(project_id, data)
        self.bytes += len(data)
        while self.bytes > self.max_bytes:
            _, (_, old) = self._entries.popitem(last=False)
            self.bytes -= len(old)


class HotReadMiddleware:
    """The lean path of the hot GETs (module docstring); everything else passes through."""

    def __init__(self, app: ASGIApp, ctx: Context, router_routes: Callable[[], list[BaseRoute]]) -> None:
        self.app = app
        self.ctx = ctx
        self.plans = ctx.plans
        self._router_routes = router_routes
        self._routes: dict[str, BaseRoute] | None = None
        self._reader = ctx.db.async_reader
        self._sqlite = ctx.db.sqlite_reader
        job, graph, plan = (cast(Table, model.__table__) for model in (Job, Graph, PlanRow))
        graph_columns = ("id", "project_id", "digest", "name", "n_ops", "n_edges", "size_bytes", "created_at")
        self._columns: dict[str, list[Column[Any]]] = {
            "jobs": list(job.columns),
            "graphs": [graph.c[name] for name in graph_columns],
            "plans": [plan.c.project_id, plan.c.body],
        }
        self._tables: dict[str, Table] = {"jobs": job, "graphs": graph, "plans": plan}

    def routes(self) -> dict[str, BaseRoute]:
        """The full path's route of each kind (the metrics label them by its template)."""
        if self._routes is None:
            from service.api import graphs, jobs, plans

            endpoints = {jobs.get_job: "jobs", plans.get_plan: "plans", graphs.get_graph: "graphs"}
            self._routes = {
                endpoints[endpoint]: r
                for r in flat_routes(self._router_routes())
                if (endpoint := getattr(r, "endpoint", None)) in endpoints
            }
        return self._routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope.get("query_string"):
            await self.app(scope, receive, send)
            return
        match = HOT_PATH.fullmatch(scope["path"])
        if match is None:
            await self.app(scope, receive, send)
            return
        authorization = if_none_match = None
        for name, value in scope["headers"]:  # the first of each, as the full path reads them
            if name == b"authorization" and authorization is None:
                authorization = value.decode("latin-1")
            elif name == b"if-none-match" and if_none_match is None:
                if_none_match = value.decode("latin-1")
        if if_none_match is not None and len(if_none_match) > IF_NONE_MATCH_MAX_CHARS:
            await self.app(scope, receive, send)  # refused (422) the full way
            return
        project = self._cached_project(authorization)
        if project is None or not self.ctx.limiter.allow(project):
            await self.app(scope, receive, send)  # authenticated (and cached), or refused, the full way
            return
        kind, obj_id = match.group(1), match.group(2)
        scope["route"] = self.routes().get(kind)
        try:
            response = await self._answer(kind, obj_id, project, if_none_match)
        except NotFound as exc:
            response = placer_error_response(exc, scope["path"])
        except DatabaseUnavailable as exc:
            response = outage_response("GET", scope["path"], exc)
        except DBAPIError as exc:
            outage = database_error_response(exc, "GET", scope["path"])
            if outage is None:
                raise  # a bug: answered 500 by the boundary
            response = outage
        await response(scope, receive, send)

    def _cached_project(self, authorization: str | None) -> str | None:
        from service.auth import bearer_key_hash

        try:
            return self.ctx.keys.get(bearer_key_hash(authorization))
        except Unauthorized:
            return None

    async def _row(self, kind: str, obj_id: str) -> Any:
        """The row's columns of ``kind``: awaited on PostgreSQL, in-process on SQLite."""
        if self._reader is not None:
            return await self._reader.row(self._tables[kind], self._columns[kind], obj_id)
        return cast(SqliteReader, self._sqlite).row(self._tables[kind], self._columns[kind], obj_id)  # one of the two

    async def _answer(self, kind: str, obj_id: str, project: str, if_none_match: str | None) -> Response:
        if kind == "plans":
            return await self._plan(obj_id, project, if_none_match)
        row = check_owned(await self._row(kind, obj_id), obj_id, project, kind[:-1])
        if kind == "jobs":
            from service.api.jobs import job_out

            return Response(job_out(row).model_dump_json(by_alias=True).encode(), media_type="application/json")
        from service.api.graphs import graph_out

        return Response(graph_out(row).model_dump_json(by_alias=True).encode(), media_type="application/json")

    async def _plan(self, plan_id: str, project: str, if_none_match: str | None) -> Response:
        hit = self.plans.get(plan_id)
        if hit is None:
            row = await self._row("plans", plan_id)
            if row is not None:
                hit = CachedPlan(row.project_id, document_json(row.body))
                self.plans.put(plan_id, *hit)
        hit = check_owned(hit, plan_id, project, "plan")
        return plan_response(plan_id, hit.data, if_none_match)
