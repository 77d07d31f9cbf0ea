"""Storing graphs and topologies: one row per (project, digest), bodies compressed."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.db.models import ACTIVE_STATES, Graph, Job, TopologyRow, new_id
from service.documents import encode_canonical
from service.errors import Conflict
from solvers.model.graph import OpGraph
from solvers.model.topology import Topology

R = TypeVar("R", Graph, TopologyRow)


def store_graph(session: Session, project_id: str, graph: OpGraph) -> tuple[Graph, bool]:
    """The stored row for ``graph`` (deduplicated by digest) and whether it was created now."""
    enc = encode_canonical(graph.to_document())
    found = session.scalar(select(Graph).where(Graph.project_id == project_id, Graph.digest == enc.digest))
    if found is not None:
        return found, False
    row = Graph(id=new_id("g"), project_id=project_id, digest=enc.digest, name=graph.name[:500],
                n_ops=graph.n_ops, n_edges=len(graph.edges), size_bytes=enc.size_bytes, body=enc.body)
    return _insert(session, row, Graph, project_id, enc.digest)


def store_topology(session: Session, project_id: str, topology: Topology) -> tuple[TopologyRow, bool]:
    enc = encode_canonical(topology.to_document())
    found = session.scalar(select(TopologyRow).where(TopologyRow.project_id == project_id,
                                                     TopologyRow.digest == enc.digest))
    if found is not None:
        return found, False
    row = TopologyRow(id=new_id("t"), project_id=project_id, digest=enc.digest, name=topology.name[:500],
                      n_devices=topology.n_devices, n_hosts=len(topology.hosts), size_bytes=enc.size_bytes,
                      body=enc.body)
    return _insert(session, row, TopologyRow, project_id, enc.digest)


def _insert(session: Session, row: R, model: type[R], project_id: str, digest: str) -> tuple[R, bool]:
    try:
        with session.begin_nested():
            session.add(row)
        return row, True
    except IntegrityError:  # an identical upload committed first
        existing = session.scalar(select(model).where(model.project_id == project_id, model.digest == digest))
        if existing is None:
            raise
        return existing, False


def refuse_if_in_use(session: Session, column: object, obj_id: str, what: str) -> None:
    """409 when queued or running jobs use the graph/topology ``obj_id``."""
    n = session.scalar(select(func.count()).select_from(Job).where(column == obj_id,  # type: ignore[arg-type]
                                                                   Job.state.in_(ACTIVE_STATES)))
    if n:
        raise Conflict(f"{what} {obj_id!r} is used by {n} queued or running job(s); cancel them or wait",
                       field="id", ref=obj_id)
