"""``/v1/plans/{id}/runs``: launcher run records (``placer.run/v1``) uploaded for a plan, listed, read back."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import select

from service.api.answers import document_response
from service.api.cursors import MAX_PAGE, next_cursor, paginate
from service.api.error_docs import errors
from service.boundary import PlacerRoute
from service.db.models import PlanRow, RunRow, new_id
from service.db.owned import get_owned
from service.deps import CtxDep, ProjectDep, SessionDep
from service.documents import decode_body, decompress, encode_canonical
from service.errors import NotFound
from service.schemas import Page, RunOut
from solvers.model.documents import parse_json
from solvers.model.plan import plan_from_document
from solvers.model.run import check_run_matches, run_from_document

router = APIRouter(prefix="/v1", tags=["runs"], route_class=PlacerRoute)
RUN_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"$ref": "#/components/schemas/RunDocument"},
    "description": "a placer.run/v1 document (the run.json launch.py writes)"}}}}


def run_out(row: RunRow) -> RunOut:
    return RunOut(id=row.id, plan_id=row.plan_id, digest=row.digest, world_size=row.world_size,
                  device_kind=row.device_kind, iteration_s=row.iteration_s, profiled=row.profiled,
                  size_bytes=row.size_bytes, created_at=row.created_at)


@router.post("/plans/{plan_id}/runs", status_code=201, response_model=RunOut, openapi_extra=RUN_BODY,
             responses=errors(415))
async def upload_run(plan_id: str, request: Request, response: Response, ctx: CtxDep, session: SessionDep,
                     project: ProjectDep,
                     content_encoding: Annotated[str | None, Header(include_in_schema=False)] = None) -> RunOut:
    """Store a launcher run record of the plan; 422 names the field when it is invalid or the plan's
    digests, devices or stages are not the run's.  The same record uploaded again returns the stored one."""
    limit = ctx.config.max_request_bytes
    body = await request.body()

    def work() -> tuple[RunOut, bool]:  # CPU-bound: off the event loop
        plan_row = get_owned(session, PlanRow, plan_id, project, "plan", field="plan_id")
        run = run_from_document(parse_json(decode_body(body, content_encoding, limit), "body", limit, field="body"))
        check_run_matches(run, plan_from_document(decompress(plan_row.body)))
        encoded = encode_canonical(run.to_document())
        stored = session.scalar(select(RunRow).where(RunRow.project_id == project, RunRow.plan_id == plan_id,
                                                     RunRow.digest == encoded.digest).limit(1))
        if stored is not None:
            return run_out(stored), False
        row = RunRow(id=new_id("run"), project_id=project, plan_id=plan_id, digest=encoded.digest,
                     world_size=len(run.ranks), device_kind=str(run.environment.get("device_kind", ""))[:200],
                     iteration_s=run.summary.get("iteration_s"), profiled=run.profile_steps > 0,
                     size_bytes=encoded.size_bytes, body=encoded.body)
        session.add(row)
        session.commit()
        return run_out(row), True

    out, created = await run_in_threadpool(work)
    response.headers["Location"] = f"/v1/plans/{plan_id}/runs/{out.id}"
    if not created:
        response.headers["Placer-Deduplicated"] = "true"
    return out


@router.get("/plans/{plan_id}/runs", response_model=Page[RunOut], responses=errors())
def list_runs(plan_id: str, session: SessionDep, project: ProjectDep,
              cursor: Annotated[str | None, Query(max_length=40)] = None,
              limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50) -> Page[RunOut]:
    """The plan's run records, newest first."""
    get_owned(session, PlanRow, plan_id, project, "plan", field="plan_id")
    stmt = select(RunRow).where(RunRow.project_id == project, RunRow.plan_id == plan_id)
    rows, nxt = next_cursor(list(session.scalars(paginate(stmt, RunRow.id, cursor, limit))), limit)
    return Page[RunOut](items=[run_out(r) for r in rows], next_cursor=nxt)


@router.get("/plans/{plan_id}/runs/{run_id}", responses={**errors(), 200: {
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RunDocument"}}},
    "description": "the placer.run/v1 document"}})
def get_run(plan_id: str, run_id: str, session: SessionDep, project: ProjectDep,
            accept_encoding: Annotated[str | None, Header(include_in_schema=False)] = None) -> Response:
    """A stored run record (``placer.run/v1``)."""
    row = get_owned(session, RunRow, run_id, project, "run", field="run_id")
    if row.plan_id != plan_id:
        raise NotFound(f"run {run_id!r} is not a run of plan {plan_id!r}", field="run_id", ref=run_id)
    return document_response(row.body, accept_encoding)
