"""``/v1/plans``: a stored plan by id, and ``:evaluate`` to score a user's own plan."""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import APIRouter, Header, Request, Response
from sqlalchemy import Table

from service.api.answers import document_json
from service.api.error_docs import errors
from service.api.etags import IF_NONE_MATCH_MAX_CHARS, plan_response
from service.api.head import serve_head
from service.api.jobs import PLAN_RESPONSE
from service.boundary import PlacerRoute
from service.calibrations import choose
from service.db.models import Graph, PlanRow, TopologyRow
from service.db.owned import check_owned, get_owned
from service.deps import ProjectDep, SessionDep, context_of
from service.documents import load_problem
from service.launchers import launcher_zip
from service.plan_cache import CachedPlan
from service.schemas import EvaluateIn, EvaluateOut
from solvers.model.canonical import plain_json
from solvers.model.errors import InvalidPlan
from solvers.model.plan import plan_from_document
from solvers.simulator import simulate
from solvers.solving import finish_plan
from solvers.validity import resolve_plan

router = APIRouter(prefix="/v1", tags=["plans"], route_class=PlacerRoute)
MAX_EVALUATE_MICRO_BATCHES = 4096  # the simulation runs inside the request: keep it bounded
PLANS = cast(Table, PlanRow.__table__)
PLAN_COLUMNS = [PLANS.c.project_id, PLANS.c.body]
"""What ``GET /v1/plans/{id}`` reads: the owner and the document."""


@router.post("/plans:evaluate", response_model=EvaluateOut, responses=errors())
def evaluate_plan(body: EvaluateIn, session: SessionDep, project: ProjectDep) -> EvaluateOut:
    """Validate a ``placer.plan/v1`` against the graph and topology (memory included) and simulate it, with the
    topology's attached calibration unless ``calibration`` says otherwise (``"none"``, or a calibration id)."""
    graph = get_owned(session, Graph, body.graph_id, project, "graph", field="graph_id")
    topology = get_owned(session, TopologyRow, body.topology_id, project, "topology", field="topology_id")
    cal = choose(session, project, topology, body.calibration)
    session.commit()  # the inputs are read: do not hold a transaction (SQLite's write lock) while simulating
    problem = load_problem(graph.body, topology.body, body.objective, body.settings, None if cal is None else cal.body)
    plan = plan_from_document(body.plan)
    if plan.micro_batches > MAX_EVALUATE_MICRO_BATCHES:
        raise InvalidPlan(f"plan.micro_batches: {plan.micro_batches} exceeds the limit of {MAX_EVALUATE_MICRO_BATCHES} "
                          "for an evaluation in the request", field="plan.micro_batches")
    result = simulate(problem, resolve_plan(problem, plan), timeline=body.timeline)
    finished = finish_plan(problem, plan, result)
    timeline = [t.to_dict() for t in result.timeline or []] if body.timeline else None
    doc = plain_json(finished.to_document())
    return EvaluateOut(plan=doc, metrics=doc.get("metrics") or {}, timeline=timeline,
                       calibration_id=None if cal is None else cal.id)


PLAN_GET_RESPONSES = {**errors(), **PLAN_RESPONSE, 304: {
    "description": "not modified: ``If-None-Match`` names the plan's ``ETag`` (a stored plan never changes)"}}


@router.get("/plans/{plan_id:id}", responses=PLAN_GET_RESPONSES)
async def get_plan(plan_id: str, request: Request, project: ProjectDep,
                   if_none_match: Annotated[str | None, Header(max_length=IF_NONE_MATCH_MAX_CHARS)] = None,
                   ) -> Response:
    """A stored ``placer.plan/v1`` document, with an ``ETag`` (plans are immutable).

    Answered on the event loop: from the plan cache (:class:`~service.plan_cache.PlanCache`), or
    by one primary-key read of the plan's owner and document, kept in the cache afterwards.
    """
    ctx = context_of(request)
    hit = ctx.plans.get(plan_id)
    if hit is None:
        row = await ctx.db.read_row(PLANS, PLAN_COLUMNS, plan_id)
        if row is not None:
            hit = CachedPlan(row.project_id, document_json(row.body))
            ctx.plans.put(plan_id, *hit)
    hit = check_owned(hit, plan_id, project, "plan")
    return plan_response(plan_id, hit.data, if_none_match)


serve_head(router, "/plans/{plan_id:id}", get_plan, PLAN_GET_RESPONSES)


@router.get("/plans/{plan_id}/launcher", responses={**errors(409), 200: {
    "description": "the launcher bundle (launch.py, README.md with one torchrun command per node, plan.json, "
                   "graph.json, manifest.json) as a zip", "content": {"application/zip": {}}}})
def get_launcher(plan_id: str, session: SessionDep, project: ProjectDep) -> Response:
    """The plan's PyTorch launcher bundle (docs/launcher.md), built from the plan and its job's graph and topology."""
    data, filename = launcher_zip(session, get_owned(session, PlanRow, plan_id, project, "plan"), project)
    return Response(data, media_type="application/zip",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})
