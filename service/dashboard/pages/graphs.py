"""Graph pages: the list, a graph's summary, upload (file, drag and drop) and generation."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from fastapi import Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse
from sqlalchemy.orm import Session

from service.api.graphs import delete_graph, list_graphs
from service.dashboard.graph_view import summarize, totals
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
from service.db.models import Graph
from service.db.owned import get_owned
from service.deps import CtxDep, SessionDep
from service.documents import decode_body, decompress, parse_graph
from service.inputs import store_graph
from solvers.generate import GRAPH_KINDS, generate_graph
from solvers.model.errors import PlacerError

router = page_router()
FORMATS = ("placer", "pipedream", "piper")


def _list_context(session: Session, project: str, cursor: str | None) -> dict[str, Any]:
    listed = list_graphs(session=session, project=project, name=None, digest=None, cursor=cursor, limit=PAGE_SIZE)
    rows = []
    for g in listed.items:
        row = session.get(Graph, g.id)
        rows.append((g, totals(g.digest, row.body) if row else None))
    return {"rows": rows, "next_cursor": listed.next_cursor, "cursor": cursor, "kinds": sorted(GRAPH_KINDS),
            "formats": FORMATS}


@router.get("/graphs")
def graphs_list(viewer: ViewerDep, session: SessionDep, cursor: CursorQ = None) -> Response:
    return page("graphs.html", viewer, **_list_context(session, viewer.project_id, cursor), error=None)


@router.get("/graphs/{graph_id}")
def graph_page(graph_id: str, viewer: ViewerDep, session: SessionDep,
               depth: Annotated[int, Query(ge=1, le=12)] = 3) -> Response:
    row = get_owned(session, Graph, graph_id, viewer.project_id, "graph")
    doc = decompress(row.body)
    groups, heaviest = summarize(doc, depth)
    return page("graph.html", viewer, graph=row, doc_attrs=doc.get("attrs") or {}, groups=groups, heaviest=heaviest,
                depth=depth, total=totals(row.digest, row.body), batch=doc.get("profiled_batch_size", 1))


async def _store(request: Request, ctx: CtxDep, session: Session, viewer: ViewerDep) -> str:
    """Parse the form (upload or generation) and store the graph like the API does; its id."""
    form = await form_fields(request)
    if text_field(form, "action") == "generate":
        kind = text_field(form, "kind")
        params = json_object(text_field(form, "params"), "params")

        def make() -> str:
            graph = generate_graph(kind, **params)
            row, _ = store_graph(session, viewer.project_id, graph)
            session.commit()
            return row.id
        return await run_in_threadpool(make)
    raw, filename = await file_field(form, "file")
    fmt = text_field(form, "format", "placer")
    given = text_field(form, "name")
    limit = ctx.config.max_request_bytes

    def upload() -> str:
        graph = parse_graph(decode_body(raw, None, limit), None if fmt == "placer" else fmt, limit,
                            given or filename.rsplit(".", 1)[0])
        if given and graph.name != given:  # a placer document names itself; the name typed in the form wins
            graph = replace(graph, name=given)
        row, _ = store_graph(session, viewer.project_id, graph)
        session.commit()
        return row.id
    return await run_in_threadpool(upload)


@router.post("/graphs")
async def graphs_create(request: Request, ctx: CtxDep, session: SessionDep, viewer: ViewerDep) -> Response:
    try:
        graph_id = await _store(request, ctx, session, viewer)
    except PlacerError as exc:
        session.rollback()
        context = await run_in_threadpool(_list_context, session, viewer.project_id, None)
        return page("graphs.html", viewer, status_code=int(getattr(exc, "http_status", 422)), **context,
                    error=exc.message)
    return RedirectResponse(f"/graphs/{graph_id}", status_code=303)


@router.post("/graphs/{graph_id}/delete")
def graph_delete(graph_id: str, viewer: ViewerDep, session: SessionDep) -> Response:
    """Delete the graph as ``DELETE /v1/graphs/{id}`` does: refused (409, its message shown) while
    queued or running jobs use it."""
    delete_graph(graph_id=graph_id, session=session, project=viewer.project_id)
    return RedirectResponse("/graphs", status_code=303)
