"""``/v1/graphs``: upload (JSON, gzip, importer formats), list, metadata, document, delete."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import Row, Table, select

from service.api.answers import document_response, json_response
from service.api.cursors import MAX_PAGE, next_cursor, paginate
from service.api.error_docs import errors
from service.api.head import serve_head
from service.boundary import PlacerRoute
from service.db.models import Graph, Job
from service.db.owned import check_owned, get_owned
from service.deps import CtxDep, ProjectDep, SessionDep, context_of
from service.documents import decode_body, parse_graph
from service.inputs import refuse_if_in_use, store_graph
from service.schemas import GraphOut, Page

router = APIRouter(prefix="/v1", tags=["graphs"], route_class=PlacerRoute)
DOC_BODY: dict[str, Any] = {
    "requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/OpGraphDocument"},
                             "description": "a placer.opgraph/v1 document (Piper input JSON with ?format=piper)"},
        "text/plain": {"schema": {"type": "string", "description": "PipeDream graph.txt (with ?format=pipedream)"}},
    }}
}


GRAPHS = cast(Table, Graph.__table__)
GRAPH_COLUMNS = [GRAPHS.c[name] for name in
                 ("id", "project_id", "digest", "name", "n_ops", "n_edges", "size_bytes", "created_at")]
"""What ``GET /v1/graphs/{id}`` reads: the metadata and the owner, not the document."""


def graph_out(row: Graph | Row[Any] | SimpleNamespace) -> GraphOut:
    """The answer for a graph's metadata, from its ORM row or the columns :data:`GRAPH_COLUMNS` of its row."""
    return GraphOut(id=row.id, digest=row.digest, name=row.name, n_ops=row.n_ops, n_edges=row.n_edges,
                    size_bytes=row.size_bytes, created_at=row.created_at)


@router.post("/graphs", status_code=201, response_model=GraphOut, openapi_extra=DOC_BODY, responses=errors(415, 501))
async def upload_graph(request: Request, response: Response, ctx: CtxDep, session: SessionDep, project: ProjectDep,
                       format: Annotated[Literal["placer", "pipedream", "piper"] | None, Query()] = None,
                       name: Annotated[str | None, Query(max_length=200, description="name of an imported graph")]
                       = None,
                       content_encoding: Annotated[str | None, Header(include_in_schema=False)] = None) -> GraphOut:
    """Upload an operator graph; an identical upload returns the stored one (same id and digest)."""
    limit = ctx.config.max_request_bytes
    body = await request.body()

    def work() -> tuple[GraphOut, bool]:  # CPU-bound: off the event loop
        graph = parse_graph(decode_body(body, content_encoding, limit), format, limit, name)
        row, created = store_graph(session, project, graph)
        session.commit()
        return graph_out(row), created

    out, created = await run_in_threadpool(work)
    response.headers["Location"] = f"/v1/graphs/{out.id}"
    if not created:
        response.headers["Placer-Deduplicated"] = "true"
    return out


@router.get("/graphs", response_model=Page[GraphOut], responses=errors())
def list_graphs(session: SessionDep, project: ProjectDep,
                name: Annotated[str | None, Query(max_length=500, description="exact name")] = None,
                digest: Annotated[str | None, Query(max_length=80)] = None,
                cursor: Annotated[str | None, Query(max_length=40)] = None,
                limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50) -> Page[GraphOut]:
    """Graphs of the project, newest first."""
    stmt = select(Graph).where(Graph.project_id == project)
    if name is not None:
        stmt = stmt.where(Graph.name == name)
    if digest is not None:
        stmt = stmt.where(Graph.digest == digest)
    rows, nxt = next_cursor(list(session.scalars(paginate(stmt, Graph.id, cursor, limit))), limit)
    return Page[GraphOut](items=[graph_out(r) for r in rows], next_cursor=nxt)


@router.get("/graphs/{graph_id:id}", response_model=GraphOut, responses=errors())
async def get_graph(graph_id: str, request: Request, project: ProjectDep) -> Response:
    """A graph's metadata (not its document), answered on the event loop: one primary-key read of
    the answer's columns, no ORM session."""
    ctx = context_of(request)
    row = check_owned(await ctx.db.read_row(GRAPHS, GRAPH_COLUMNS, graph_id), graph_id, project, "graph")
    return json_response(graph_out(row))


serve_head(router, "/graphs/{graph_id:id}", get_graph, errors())


@router.get("/graphs/{graph_id:id}/document", responses={**errors(), 200: {
    "content": {"application/json": {"schema": {"type": "object"}}}, "description": "the placer.opgraph/v1 document"}})
def get_graph_document(graph_id: str, session: SessionDep, project: ProjectDep,
                       accept_encoding: Annotated[str | None, Header(include_in_schema=False)] = None) -> Response:
    """The stored ``placer.opgraph/v1`` document (sent gzip-encoded when the client accepts it)."""
    row = get_owned(session, Graph, graph_id, project, "graph")
    return document_response(row.body, accept_encoding)


@router.delete("/graphs/{graph_id:id}", status_code=204, responses=errors(409))
def delete_graph(graph_id: str, session: SessionDep, project: ProjectDep) -> Response:
    """Delete a graph; refused (409) while queued or running jobs use it."""
    row = get_owned(session, Graph, graph_id, project, "graph")
    refuse_if_in_use(session, Job.graph_id, graph_id, "graph")
    session.delete(row)
    session.commit()
    return Response(status_code=204)
