"""``/v1/jobs``: submit (202, idempotent with ``Idempotency-Key``), list, get, cancel, events, plan."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Annotated, Any, cast

from fastapi import APIRouter, Header, Query, Request, Response
from sqlalchemy import Row, Table, select
from sqlalchemy.orm import defer

from service.api.answers import document_response, json_response
from service.api.cursors import MAX_PAGE, next_cursor, paginate
from service.api.error_docs import errors
from service.api.head import serve_head
from service.api.idempotency import create_once
from service.boundary import PlacerRoute
from service.db.models import Job, PlanRow
from service.db.owned import check_owned, get_owned
from service.deps import CtxDep, ProjectDep, SessionDep, context_of
from service.errors import Conflict
from service.jobs import store
from service.jobs.caps import check_queued_cap
from service.jobs.events import event_stream
from service.jobs.validate import JobRequest, validate_job
from service.schemas import (
    INCLUDE_DESCRIPTION,
    ErrorOut,
    Include,
    JobIn,
    JobOut,
    JobState,
    Page,
    ProgressOut,
    WarningOut,
)
from solvers.model.canonical import digest

router = APIRouter(prefix="/v1", tags=["jobs"], route_class=PlacerRoute)
PLAN_RESPONSE: dict[int | str, dict[str, Any]] = {200: {
    "description": "the placer.plan/v1 document", "content": {"application/json": {"schema": {"type": "object"}}}}}


JOBS = cast(Table, Job.__table__)
JOB_COLUMNS = [JOBS.c[name] for name in (
    "id", "project_id", "state", "graph_id", "topology_id", "comparison_id", "parent_id", "solver", "objective",
    "settings", "options", "time_limit_s", "use_cache", "cached", "cached_from", "attempts", "cancel_requested",
    "progress", "error", "plan_id", "plan_status", "warnings", "calibration_id", "created_at", "started_at", "finished_at")]
"""What ``GET /v1/jobs/{id}`` reads: the answer's columns and the owner (no lease, digest or key)."""


def job_out(job: Job | Row[Any] | SimpleNamespace, *, settings: bool = True) -> JobOut:
    """The answer for a job, from its ORM row or the columns :data:`JOB_COLUMNS` of its row
    (``settings=False``: without its settings, as lists answer unless asked)."""
    return JobOut(id=job.id, status=job.state, graph_id=job.graph_id, topology_id=job.topology_id,
                  comparison_id=job.comparison_id, parent_id=job.parent_id, solver=job.solver, objective=job.objective,
                  settings=job.settings if settings else None, options=job.options, time_limit_s=job.time_limit_s, cache=job.use_cache,
                  cached=job.cached, cached_from=job.cached_from, attempts=job.attempts,
                  cancel_requested=job.cancel_requested,
                  progress=ProgressOut(**job.progress) if job.progress else None,
                  error=ErrorOut(**{k: v for k, v in job.error.items() if k in ErrorOut.model_fields})
                  if job.error else None,
                  plan_id=job.plan_id, plan_status=job.plan_status,
                  warnings=[WarningOut(**w) for w in job.warnings or []], calibration_id=job.calibration_id,
                  created_at=job.created_at,
                  started_at=job.started_at, finished_at=job.finished_at)


@router.post("/jobs", status_code=202, response_model=JobOut, responses=errors(409, 501))
def submit_job(body: JobIn, response: Response, ctx: CtxDep, session: SessionDep, project: ProjectDep,
               idempotency_key: Annotated[str | None, Header(max_length=200)] = None) -> JobOut:
    """Submit a job: it is stored, then dispatched; a cached identical plan finishes it at once."""
    request_digest = digest(body.model_dump(mode="json", by_alias=True))

    def create() -> Job:
        check_queued_cap(session, ctx.config, project)
        spec = validate_job(session, ctx.config, project, JobRequest(
            body.graph_id, body.topology_id, body.solver, body.objective, body.settings, body.options,
            body.time_limit_s, calibration=body.calibration))
        return store.submit(session, project, spec, use_cache=body.cache, idempotency_key=idempotency_key,
                            request_digest=request_digest)

    job, created = create_once(session, Job, project, idempotency_key, request_digest, create,
                               ctx.config.idempotency_reserve_s)
    if not created:
        return job_out(job)
    if job.state == "queued":
        ctx.dispatcher.dispatch(job.id)
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return job_out(job)


@router.get("/jobs", response_model=Page[JobOut], responses=errors())
def list_jobs(session: SessionDep, project: ProjectDep,
              status: Annotated[JobState | None, Query()] = None,
              solver: Annotated[str | None, Query(max_length=100)] = None,
              graph_id: Annotated[str | None, Query(max_length=40)] = None,
              topology_id: Annotated[str | None, Query(max_length=40)] = None,
              comparison_id: Annotated[str | None, Query(max_length=40)] = None,
              cursor: Annotated[str | None, Query(max_length=40)] = None,
              limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
              include: Annotated[Include | None, Query(description=INCLUDE_DESCRIPTION)] = None) -> Page[JobOut]:
    """Jobs of the project, newest first, filtered by status, solver, inputs or comparison.

    Items carry no ``settings`` (``null``) unless asked for with ``include=settings``.
    """
    stmt = select(Job).where(Job.project_id == project)
    if include != "settings":
        stmt = stmt.options(defer(Job.settings))
    for column, value in ((Job.state, status), (Job.solver, solver), (Job.graph_id, graph_id),
                          (Job.topology_id, topology_id), (Job.comparison_id, comparison_id)):
        if value is not None:
            stmt = stmt.where(column == value)
    rows, nxt = next_cursor(list(session.scalars(paginate(stmt, Job.id, cursor, limit))), limit)
    return Page[JobOut](items=[job_out(j, settings=include == "settings") for j in rows], next_cursor=nxt)


@router.get("/jobs/{job_id:id}", response_model=JobOut, responses=errors())
async def get_job(job_id: str, request: Request, project: ProjectDep) -> Response:
    """One job: its status, progress, error and plan id.

    The hottest read (clients poll it), answered on the event loop: one primary-key read of the
    answer's columns, no ORM session, the answer serialised once.
    """
    ctx = context_of(request)
    row = check_owned(await ctx.db.read_row(JOBS, JOB_COLUMNS, job_id), job_id, project, "job")
    return json_response(job_out(row))


serve_head(router, "/jobs/{job_id:id}", get_job, errors())


@router.post("/jobs/{job_id:id}:cancel", status_code=202, response_model=JobOut, responses=errors(409))
def cancel_job(job_id: str, session: SessionDep, project: ProjectDep) -> JobOut:
    """Cancel a queued job at once, or ask the worker of a running job to stop it."""
    job = get_owned(session, Job, job_id, project, "job")
    if job.state not in ("queued", "running"):
        raise Conflict(f"job {job_id!r} is already {job.state}", field="status", ref=job_id)
    store.request_cancel(session, job)
    session.commit()
    return job_out(job)


@router.get("/jobs/{job_id:id}/events", responses={**errors(), 200: {
    "description": "Server-Sent Events: `state` and `progress` events, then `end`",
    "content": {"text/event-stream": {"schema": {"type": "string"}}}}})
async def job_events(job_id: str, ctx: CtxDep, session: SessionDep, project: ProjectDep,
                     last_event_id: Annotated[str | None, Header(max_length=20)] = None,
                     after: Annotated[int | None, Query(ge=0, description="resume after this event id")] = None,
                     ) -> Response:
    """Progress of a job as Server-Sent Events (resumable with ``Last-Event-ID``)."""
    get_owned(session, Job, job_id, project, "job")
    session.commit()  # the stream polls in its own transactions
    start = after if after is not None else _event_id(last_event_id)
    return event_stream(ctx.db, job_id, start)


def _event_id(header: str | None) -> int:
    """The ``Last-Event-ID`` to resume after (0: from the start; beyond every id: the end)."""
    return int(header) if header and header.isascii() and header.isdigit() else 0


@router.get("/jobs/{job_id:id}/plan", responses={**errors(409), **PLAN_RESPONSE})
def get_job_plan(job_id: str, session: SessionDep, project: ProjectDep) -> Response:
    """The job's ``placer.plan/v1`` document (409 until the job has succeeded)."""
    job = get_owned(session, Job, job_id, project, "job")
    if job.state != "succeeded" or job.plan_id is None:
        why = f": {job.error.get('detail')}" if job.error else ""
        raise Conflict(f"job {job_id!r} is {job.state} and has no plan{why}", field="status", ref=job_id)
    plan = get_owned(session, PlanRow, job.plan_id, project, "plan")
    return document_response(plan.body, None)
