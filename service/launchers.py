"""The launcher bundle of a stored plan (``GET /v1/plans/{id}/launcher`` and the dashboard's download)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from launcher import bundle_zip
from launcher.check import check_plan
from service.db.models import Graph, Job, PlanRow, TopologyRow
from service.documents import decompress
from service.errors import Conflict
from solvers.model.errors import InvalidPlan
from solvers.model.graph import graph_from_document
from solvers.model.plan import plan_from_document
from solvers.model.topology import topology_from_document


def launcher_zip(session: Session, row: PlanRow, project_id: str) -> tuple[bytes, str]:
    """The bundle of the project's plan ``row`` as a zip, and its file name.

    409 when the plan's graph or topology no longer exists or the plan places nothing; 422
    (:class:`~solvers.model.errors.InvalidPlan`) when the graph records no model to rebuild
    (only graphs made by ``placer extract`` / ``placer profile`` can be launched) or when
    ``placer launcher check`` refuses the plan (run here where torch and the model import; a model
    that cannot be built on the server is not checked).
    """
    job = session.get(Job, row.job_id) if row.job_id else None
    graph = session.get(Graph, job.graph_id) if job is not None and job.graph_id else None
    topology = session.get(TopologyRow, job.topology_id) if job is not None and job.topology_id else None
    if graph is None or topology is None or graph.project_id != project_id or topology.project_id != project_id:
        raise Conflict(f"plan {row.id!r}: its graph or topology no longer exists", field="plan_id", ref=row.id)
    plan = plan_from_document(decompress(row.body))
    if not plan.stages:
        raise Conflict(f"plan {row.id!r} is {plan.status} and places nothing: there is nothing to launch",
                       field="plan_id", ref=row.id)
    name = f"placer-launcher-{row.id}"
    op_graph, topo = graph_from_document(decompress(graph.body)), topology_from_document(decompress(topology.body))
    report = check_plan(plan, op_graph, topo, model_required=False)
    if not report.ok:
        raise InvalidPlan(f"plan {row.id!r} would not launch: {report.reason}", field="plan_id", ref=row.id)
    data = bundle_zip(plan, op_graph, topo, folder=name)
    return data, f"{name}.zip"
