"""``/v1/topologies``: upload, generate, list, metadata, document, delete, attach and detach a calibration."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import select

from service.api.answers import document_response
from service.api.cursors import MAX_PAGE, next_cursor, paginate
from service.api.error_docs import errors
from service.boundary import PlacerRoute
from service.calibrations import check_fits
from service.db.models import CalibrationRow, Job, TopologyRow
from service.db.owned import get_owned
from service.deps import CtxDep, ProjectDep, SessionDep
from service.documents import decode_body, parse_topology
from service.inputs import refuse_if_in_use, store_topology
from service.schemas import AttachCalibrationIn, GenerateTopologyIn, Page, TopologyOut
from solvers.generate import generate_topology as generate
from solvers.model.topology import Topology

router = APIRouter(prefix="/v1", tags=["topologies"], route_class=PlacerRoute)
MAX_INT32 = 2**31 - 1  # integer query parameters compared with 32-bit columns
TOPOLOGY_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"$ref": "#/components/schemas/TopologyDocument"}}}}}


def topology_out(row: TopologyRow) -> TopologyOut:
    return TopologyOut(id=row.id, digest=row.digest, name=row.name, n_devices=row.n_devices, n_hosts=row.n_hosts,
                       size_bytes=row.size_bytes, calibration_id=row.calibration_id, created_at=row.created_at)


@router.post("/topologies", status_code=201, response_model=TopologyOut, openapi_extra=TOPOLOGY_BODY,
             responses=errors(415, 501))
async def upload_topology(request: Request, response: Response, ctx: CtxDep, session: SessionDep,
                          project: ProjectDep,
                          content_encoding: Annotated[str | None, Header(include_in_schema=False)] = None,
                          ) -> TopologyOut:
    """Upload a ``placer.topology/v1`` document; an identical upload returns the stored one."""
    limit = ctx.config.max_request_bytes
    body = await request.body()

    def work() -> tuple[TopologyOut, bool]:  # CPU-bound: off the event loop
        row, created = store_topology(session, project, parse_topology(decode_body(body, content_encoding, limit),
                                                                        limit))
        session.commit()
        return topology_out(row), created

    out, created = await run_in_threadpool(work)
    response.headers["Location"] = f"/v1/topologies/{out.id}"
    if not created:
        response.headers["Placer-Deduplicated"] = "true"
    return out


def generate_topology(kind: str, params: dict[str, Any]) -> Topology:
    """Run the library's generator (unknown kinds or parameters raise errors naming them)."""
    return generate(kind, **params)


@router.post("/topologies:generate", status_code=201, response_model=TopologyOut, responses=errors(501))
def generate_and_store(body: GenerateTopologyIn, response: Response, session: SessionDep,
                       project: ProjectDep) -> TopologyOut:
    """Generate a topology (hierarchical, dgx1, mesh, torus, random ... ; see the generators) and store it."""
    row, _ = store_topology(session, project, generate_topology(body.kind, body.params))
    session.commit()
    response.headers["Location"] = f"/v1/topologies/{row.id}"
    return topology_out(row)


@router.get("/topologies", response_model=Page[TopologyOut], responses=errors())
def list_topologies(session: SessionDep, project: ProjectDep,
                    name: Annotated[str | None, Query(max_length=500)] = None,
                    digest: Annotated[str | None, Query(max_length=80)] = None,
                    min_devices: Annotated[int | None, Query(ge=0, le=MAX_INT32)] = None,
                    cursor: Annotated[str | None, Query(max_length=40)] = None,
                    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50) -> Page[TopologyOut]:
    """Topologies of the project, newest first."""
    stmt = select(TopologyRow).where(TopologyRow.project_id == project)
    if name is not None:
        stmt = stmt.where(TopologyRow.name == name)
    if digest is not None:
        stmt = stmt.where(TopologyRow.digest == digest)
    if min_devices is not None:
        stmt = stmt.where(TopologyRow.n_devices >= min_devices)
    rows, nxt = next_cursor(list(session.scalars(paginate(stmt, TopologyRow.id, cursor, limit))), limit)
    return Page[TopologyOut](items=[topology_out(r) for r in rows], next_cursor=nxt)


@router.get("/topologies/{topology_id:id}", response_model=TopologyOut, responses=errors())
def get_topology(topology_id: str, session: SessionDep, project: ProjectDep) -> TopologyOut:
    return topology_out(get_owned(session, TopologyRow, topology_id, project, "topology"))


@router.get("/topologies/{topology_id:id}/document", responses={**errors(), 200: {
    "content": {"application/json": {"schema": {"type": "object"}}}, "description": "the placer.topology/v1 document"}})
def get_topology_document(topology_id: str, session: SessionDep, project: ProjectDep,
                          accept_encoding: Annotated[str | None, Header(include_in_schema=False)] = None) -> Response:
    row = get_owned(session, TopologyRow, topology_id, project, "topology")
    return document_response(row.body, accept_encoding)


@router.delete("/topologies/{topology_id:id}", status_code=204, responses=errors(409))
def delete_topology(topology_id: str, session: SessionDep, project: ProjectDep) -> Response:
    """Delete a topology; refused (409) while queued or running jobs use it."""
    row = get_owned(session, TopologyRow, topology_id, project, "topology")
    refuse_if_in_use(session, Job.topology_id, topology_id, "topology")
    session.delete(row)
    session.commit()
    return Response(status_code=204)


@router.put("/topologies/{topology_id:id}/calibration", response_model=TopologyOut, responses=errors())
def attach_calibration(topology_id: str, body: AttachCalibrationIn, session: SessionDep,
                       project: ProjectDep) -> TopologyOut:
    """Attach a calibration of the project (replacing any): jobs, comparisons and evaluations on the topology then
    simulate with it unless they ask otherwise.  422 naming ``calibration_id`` when it is not fitted for a device
    kind of the topology (the kind is the error's ``ref``) or does not apply to it."""
    row = get_owned(session, TopologyRow, topology_id, project, "topology")
    cal = get_owned(session, CalibrationRow, body.calibration_id, project, "calibration", field="calibration_id")
    check_fits(cal, row, "calibration_id")
    row.calibration_id = cal.id
    out = topology_out(row)
    session.commit()
    return out


@router.delete("/topologies/{topology_id:id}/calibration", response_model=TopologyOut, responses=errors())
def detach_calibration(topology_id: str, session: SessionDep, project: ProjectDep) -> TopologyOut:
    """Detach the topology's calibration (nothing to detach is no error); jobs already submitted keep theirs."""
    row = get_owned(session, TopologyRow, topology_id, project, "topology")
    row.calibration_id = None
    out = topology_out(row)
    session.commit()
    return out
