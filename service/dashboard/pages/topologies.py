"""Topology pages: the list, upload and generation, a topology's devices and bandwidth heat map."""

from __future__ import annotations

from collections import Counter
from typing import Any

from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.topologies import delete_topology, generate_topology, list_topologies
from service.dashboard.charts.topology import MAX_HEATMAP_DEVICES, bandwidth_heatmap
from service.dashboard.pages.common import (
    PAGE_SIZE,
    CursorQ,
    ViewerDep,
    file_field,
    form_fields,
    json_object,
    page_router,
    text_field,
)
from service.dashboard.render import page
from service.db.models import CalibrationRow, TopologyRow
from service.db.owned import get_owned
from service.deps import CtxDep, SessionDep
from service.documents import decode_body, decompress, parse_topology
from service.inputs import store_topology
from solvers.generate import TOPOLOGY_KINDS
from solvers.model.errors import PlacerError
from solvers.model.topology import topology_from_document

router = page_router()


def device_kinds(doc: dict[str, Any]) -> list[tuple[str, int]]:
    """How many devices of each kind a ``placer.topology/v1`` document has (most first, then by name)."""
    counts = Counter(str(d.get("kind", "GPU")) for d in doc.get("devices") or [] if isinstance(d, dict))
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _list_context(session: Session, project: str, cursor: str | None) -> dict[str, Any]:
    listed = list_topologies(session=session, project=project, name=None, digest=None, min_devices=None,
                             cursor=cursor, limit=PAGE_SIZE)
    bodies = session.execute(select(TopologyRow.id, TopologyRow.body).where(
        TopologyRow.project_id == project, TopologyRow.id.in_([t.id for t in listed.items]))).all()
    return {"rows": listed.items, "next_cursor": listed.next_cursor, "cursor": cursor, "kinds": sorted(TOPOLOGY_KINDS),
            "device_kinds": {r.id: device_kinds(decompress(r.body)) for r in bodies}}


@router.get("/topologies")
def topologies_list(viewer: ViewerDep, session: SessionDep, cursor: CursorQ = None) -> Response:
    return page("topologies.html", viewer, **_list_context(session, viewer.project_id, cursor), error=None)


@router.get("/topologies/{topology_id}")
def topology_page(topology_id: str, viewer: ViewerDep, session: SessionDep) -> Response:
    row = get_owned(session, TopologyRow, topology_id, viewer.project_id, "topology")
    topology = topology_from_document(decompress(row.body))
    cal = session.get(CalibrationRow, row.calibration_id) if row.calibration_id else None
    return page("topology.html", viewer, topology_row=row, topology=topology, heatmap=bandwidth_heatmap(topology),
                heatmap_cap=MAX_HEATMAP_DEVICES, calibration=None if cal is None else calibration_view(cal))


def calibration_view(row: CalibrationRow) -> dict[str, Any]:
    """What the topology page shows of its attached calibration: name, digest, the fitted parameters and the
    median relative error per kind of figure before and after the fit (docs/cost-model.md "Calibration")."""
    doc = decompress(row.body)
    scales = [(kind, cls, value) for kind, kc in sorted(doc.get("devices", {}).items())
              for cls, value in sorted(kc.get("scale", {}).items())]
    overheads = [(kind, kc.get("launch_overhead_s", 0.0)) for kind, kc in sorted(doc.get("devices", {}).items())]
    residuals = [(what, ((sides or {}).get("uncalibrated") or {}).get("median_relative"),
                  ((sides or {}).get("calibrated") or {}).get("median_relative"))
                 for what, sides in sorted((doc.get("fit") or {}).get("residuals", {}).items())]
    return {"id": row.id, "name": row.name, "digest": row.digest, "scales": scales, "overheads": overheads,
            "channels": sorted(doc.get("channels", {}).items()),
            "collective_efficiency": doc.get("collective_efficiency", 1.0), "memory": doc.get("memory", {}),
            "step": doc.get("step", {}), "fitted": (doc.get("fit") or {}).get("parameters", []),
            "residuals": residuals, "split_backward": sorted((doc.get("split_backward") or {}).items()),
            "tp_efficiency": sorted((doc.get("tp_efficiency") or {}).items())}


async def _store(request: Request, ctx: CtxDep, session: Session, viewer: ViewerDep) -> str:
    form = await form_fields(request)
    if text_field(form, "action") == "generate":
        kind = text_field(form, "kind")
        params = json_object(text_field(form, "params"), "params")

        def make() -> str:
            row, _ = store_topology(session, viewer.project_id, generate_topology(kind, params))
            session.commit()
            return row.id
        return await run_in_threadpool(make)
    raw, _ = await file_field(form, "file")
    limit = ctx.config.max_request_bytes

    def upload() -> str:
        row, _ = store_topology(session, viewer.project_id, parse_topology(decode_body(raw, None, limit), limit))
        session.commit()
        return row.id
    return await run_in_threadpool(upload)


@router.post("/topologies")
async def topologies_create(request: Request, ctx: CtxDep, session: SessionDep, viewer: ViewerDep) -> Response:
    try:
        topology_id = await _store(request, ctx, session, viewer)
    except PlacerError as exc:
        session.rollback()
        context = await run_in_threadpool(_list_context, session, viewer.project_id, None)
        return page("topologies.html", viewer, status_code=int(getattr(exc, "http_status", 422)), **context,
                    error=exc.message)
    return RedirectResponse(f"/topologies/{topology_id}", status_code=303)


@router.post("/topologies/{topology_id}/delete")
def topology_delete(topology_id: str, viewer: ViewerDep, session: SessionDep) -> Response:
    """Delete the topology as ``DELETE /v1/topologies/{id}`` does (409 while queued or running jobs use it)."""
    delete_topology(topology_id=topology_id, session=session, project=viewer.project_id)
    return RedirectResponse("/topologies", status_code=303)
