"""``/v1/calibrations``: ``placer.calibration/v1`` documents uploaded, listed, read back and deleted
(attached to a topology by ``PUT /v1/topologies/{id}/calibration``; docs/api.md "Calibrations")."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import select

from service.api.answers import document_response
from service.api.cursors import MAX_PAGE, next_cursor, paginate
from service.api.error_docs import errors
from service.boundary import PlacerRoute
from service.calibrations import refuse_delete_if_used, store_calibration
from service.db.models import CalibrationRow
from service.db.owned import get_owned
from service.deps import CtxDep, ProjectDep, SessionDep
from service.documents import decode_body
from service.schemas import CalibrationOut, Page
from solvers.calibration import calibration_from_document
from solvers.model.documents import parse_json

router = APIRouter(prefix="/v1", tags=["calibrations"], route_class=PlacerRoute)
CALIBRATION_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"$ref": "#/components/schemas/CalibrationDocument"},
    "description": "a placer.calibration/v1 document (what placer calibrate writes)"}}}}


def calibration_out(row: CalibrationRow) -> CalibrationOut:
    return CalibrationOut(id=row.id, digest=row.digest, document_digest=row.document_digest, name=row.name,
                          device_kinds=list(row.device_kinds), size_bytes=row.size_bytes, created_at=row.created_at)


@router.post("/calibrations", status_code=201, response_model=CalibrationOut, openapi_extra=CALIBRATION_BODY,
             responses=errors(415))
async def upload_calibration(request: Request, response: Response, ctx: CtxDep, session: SessionDep,
                             project: ProjectDep,
                             content_encoding: Annotated[str | None, Header(include_in_schema=False)] = None,
                             ) -> CalibrationOut:
    """Store a ``placer.calibration/v1`` document; 422 names the field when it is invalid.  The same document
    uploaded again returns the stored one (``Placer-Deduplicated: true``)."""
    limit = ctx.config.max_request_bytes
    body = await request.body()

    def work() -> tuple[CalibrationOut, bool]:  # CPU-bound: off the event loop
        cal = calibration_from_document(parse_json(decode_body(body, content_encoding, limit), "body", limit,
                                                   field="body"))
        row, created = store_calibration(session, project, cal)
        session.commit()
        return calibration_out(row), created

    out, created = await run_in_threadpool(work)
    response.headers["Location"] = f"/v1/calibrations/{out.id}"
    if not created:
        response.headers["Placer-Deduplicated"] = "true"
    return out


@router.get("/calibrations", response_model=Page[CalibrationOut], responses=errors())
def list_calibrations(session: SessionDep, project: ProjectDep,
                      digest: Annotated[str | None, Query(max_length=80)] = None,
                      cursor: Annotated[str | None, Query(max_length=40)] = None,
                      limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50) -> Page[CalibrationOut]:
    """Calibrations of the project, newest first (``digest``: those with these parameters)."""
    stmt = select(CalibrationRow).where(CalibrationRow.project_id == project)
    if digest is not None:
        stmt = stmt.where(CalibrationRow.digest == digest)
    rows, nxt = next_cursor(list(session.scalars(paginate(stmt, CalibrationRow.id, cursor, limit))), limit)
    return Page[CalibrationOut](items=[calibration_out(r) for r in rows], next_cursor=nxt)


@router.get("/calibrations/{calibration_id:id}", response_model=CalibrationOut, responses=errors())
def get_calibration(calibration_id: str, session: SessionDep, project: ProjectDep) -> CalibrationOut:
    return calibration_out(get_owned(session, CalibrationRow, calibration_id, project, "calibration"))


@router.get("/calibrations/{calibration_id:id}/document", responses={**errors(), 200: {
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CalibrationDocument"}}},
    "description": "the placer.calibration/v1 document"}})
def get_calibration_document(calibration_id: str, session: SessionDep, project: ProjectDep,
                             accept_encoding: Annotated[str | None, Header(include_in_schema=False)] = None,
                             ) -> Response:
    row = get_owned(session, CalibrationRow, calibration_id, project, "calibration")
    return document_response(row.body, accept_encoding)


@router.delete("/calibrations/{calibration_id:id}", status_code=204, responses=errors(409))
def delete_calibration(calibration_id: str, session: SessionDep, project: ProjectDep) -> Response:
    """Delete a calibration; refused (409) while it is attached to a topology or queued or running jobs use it.
    Finished jobs keep its id, their plans its digest."""
    row = get_owned(session, CalibrationRow, calibration_id, project, "calibration")
    refuse_delete_if_used(session, calibration_id)
    session.delete(row)
    session.commit()
    return Response(status_code=204)
