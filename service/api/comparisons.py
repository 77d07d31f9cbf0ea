"""``/v1/comparisons``: one job per solver on the same input, and the table comparing them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response
from sqlalchemy import select
from sqlalchemy.orm import Session, defer

from service.api.cursors import next_cursor, paginate
from service.api.error_docs import errors
from service.api.idempotency import create_once
from service.api.jobs import job_out
from service.boundary import PlacerRoute
from service.db.models import FINAL_STATES, Comparison, Job, PlanRow
from service.db.owned import get_owned
from service.deps import CtxDep, ProjectDep, SessionDep
from service.documents import decompress
from service.inputs import refuse_if_in_use
from service.jobs import store
from service.jobs.caps import check_queued_cap
from service.jobs.validate import JobRequest, JobSpec, validate_job
from service.schemas import INCLUDE_DESCRIPTION, ComparisonIn, ComparisonOut, ComparisonRow, Include, Page
from solvers.model.canonical import digest
from solvers.model.errors import InvalidInput
from solvers.model.ranking import best_index, bound_key_s, comparison_key_s, ranked_by, samples_per_iteration
from solvers.model.settings import settings_from_dict
from solvers.model.sweep import (
    SWEEP_AXES,
    check_members,
    combinations,
    member_error,
    member_settings,
    swept_values,
)

router = APIRouter(prefix="/v1", tags=["comparisons"], route_class=PlacerRoute)
GOOD_STATUSES = ("optimal", "feasible")


def comparison_out(session: Session, cmp: Comparison, *, settings: bool = True) -> ComparisonOut:
    """The comparison's table (``settings=False``: without its settings, the members' swept values
    and their plans' details, as lists answer unless asked)."""
    stmt = select(Job, PlanRow).outerjoin(PlanRow, PlanRow.id == Job.plan_id).where(Job.comparison_id == cmp.id)
    if not settings:
        stmt = stmt.options(defer(Job.settings), defer(PlanRow.body))
    rows = session.execute(stmt.order_by(Job.id)).all()
    problem_settings = settings_from_dict(cmp.settings)
    table = []
    for job, plan in rows:
        out = job_out(job, settings=False)
        figures: dict[str, float | None] = {} if plan is None else {
            "objective_s": plan.objective_s, "iteration_s": plan.iteration_s, "latency_s": plan.latency_s,
            "throughput_samples_per_s": plan.throughput_samples_per_s, "lower_bound_s": plan.lower_bound_s}
        table.append(ComparisonRow(
            solver=job.solver, job_id=job.id, job_status=out.status, plan_id=job.plan_id,
            status=plan.status if plan else None, objective_s=figures.get("objective_s"),
            iteration_s=figures.get("iteration_s"), latency_s=figures.get("latency_s"),
            throughput_samples_per_s=figures.get("throughput_samples_per_s"),
            lower_bound_s=figures.get("lower_bound_s"), samples_per_iteration=samples_per_iteration(figures),
            key_s=comparison_key_s(figures, cmp.objective, problem_settings.global_batch),
            lower_bound_key_s=bound_key_s(figures, cmp.objective, problem_settings.global_batch),
            efficiency=plan.efficiency if plan else None, solve_time_s=plan.solve_time_s if plan else None,
            peak_memory_bytes=plan.peak_memory_bytes if plan else None, error=out.error,
            **(plan_details(decompress(plan.body)) if settings and plan is not None else {}),
            **({"swept": swept_values(job.settings or {})} if settings else {})))
    axes = _swept_axes(table)
    for row in table:
        row.swept = {name: row.swept.get(name) for name in axes}
    best = best_index([r.key_s if r.status in GOOD_STATUSES else None for r in table])
    return ComparisonOut(id=cmp.id, graph_id=cmp.graph_id, topology_id=cmp.topology_id, objective=cmp.objective,
                         settings=problem_settings if settings else None,
                         ranked_by=ranked_by(cmp.objective, problem_settings.global_batch),
                         done=all(r.job_status in FINAL_STATES for r in table),
                         best_solver=None if best is None else table[best].solver,
                         best_job_id=None if best is None else table[best].job_id,
                         sweep=axes, rows=table, created_at=cmp.created_at)


def plan_details(doc: Any) -> dict[str, Any]:
    """What a comparison row shows of its stored plan document: micro-batches, schedule, virtual
    stages, devices (and tensor degree, where a stage has ``tp``) per stage, and for a plan that is
    neither optimal nor feasible its notes, which say why (the exact solver's budget, a plan from ``even``)."""
    if not isinstance(doc, dict):
        return {}
    stages = [s for s in doc.get("stages") or [] if isinstance(s, dict)]
    degrees = [int(s.get("tp", 1)) for s in stages]
    notes = [str(n) for n in doc.get("notes") or []]
    return {"micro_batches": doc.get("micro_batches"), "schedule": doc.get("schedule"),
            "virtual_stages": doc.get("virtual_stages", 1), "replicas": [len(s.get("devices") or []) for s in stages],
            "tensor_degrees": degrees if any(d > 1 for d in degrees) else None,
            "status_reason": "; ".join(notes)[:2000] or None
            if doc.get("status") not in GOOD_STATUSES else None}


def _swept_axes(rows: list[ComparisonRow]) -> dict[str, list[Any]]:
    """The settings whose values differ between the members, each with its values in first-seen order."""
    axes: dict[str, list[Any]] = {}
    for name in SWEEP_AXES:
        values = list(dict.fromkeys(r.swept.get(name) for r in rows))
        if len(values) > 1 and None not in values:
            axes[name] = values
    return axes


@router.post("/comparisons", status_code=202, response_model=ComparisonOut, responses=errors(409, 501))
def create_comparison(body: ComparisonIn, response: Response, ctx: CtxDep, session: SessionDep,
                      project: ProjectDep,
                      idempotency_key: Annotated[str | None, Header(max_length=200)] = None) -> ComparisonOut:
    """Run several solvers on the same graph, topology, objective and settings; with ``sweep``, every
    solver once per combination of the swept settings' values.

    With an ``Idempotency-Key`` a repeated request returns the comparison it first created.
    """
    request_digest = digest(body.model_dump(mode="json", by_alias=True))
    created_jobs: list[Job] = []

    def create() -> Comparison:
        combos = combinations(body.sweep)
        check_members(len(body.solvers), combos)
        check_queued_cap(session, ctx.config, project, len(body.solvers) * len(combos))
        base = body.settings.to_dict()

        def member(i: int, name: str, combo: dict[str, Any]) -> JobSpec:
            try:
                return validate_job(session, ctx.config, project, JobRequest(
                    body.graph_id, body.topology_id, name, body.objective, member_settings(base, combo),
                    body.options.get(name, {}), body.time_limit_s, solver_field=f"solvers[{i}]",
                    options_field=f"options.{name}", calibration=body.calibration))
            except InvalidInput as exc:  # a member's settings are wrong: name the swept value that made them so
                raise member_error(exc, combo, body.sweep) from None

        specs = [member(i, name, combo) for i, name in enumerate(body.solvers) for combo in combos]
        if len({s.lower() for s in body.solvers}) != len(body.solvers):
            raise InvalidInput("solvers: a solver is listed twice", field="solvers")
        unknown = sorted(set(body.options) - set(body.solvers))  # after the inputs: a missing id is 404 first
        if unknown:
            raise InvalidInput(f"options.{unknown[0]}: options given for a solver not in solvers",
                               field=f"options.{unknown[0]}", ref=unknown[0])
        swept = body.sweep.axes() if body.sweep is not None else {}
        recorded = {**specs[0].settings, **({"micro_batches": swept["micro_batches"]} if "micro_batches" in swept
                                            else {})}  # the swept counts, as candidates
        if "tp" in swept:  # the swept degrees are the members'; the comparison fixes none
            del recorded["tp"]
        cmp, jobs = store.create_comparison(session, project, specs, body.objective, use_cache=body.cache,
                                            idempotency_key=idempotency_key, request_digest=request_digest,
                                            settings=recorded)
        created_jobs.extend(jobs)
        return cmp

    cmp, created = create_once(session, Comparison, project, idempotency_key, request_digest, create,
                               ctx.config.idempotency_reserve_s)
    out = comparison_out(session, cmp)
    session.commit()  # end the read before the answer is serialised (create_once explains why)
    if not created:
        return out
    for job in created_jobs:
        if job.state == "queued":
            ctx.dispatcher.dispatch(job.id)
    response.headers["Location"] = f"/v1/comparisons/{cmp.id}"
    return out


@router.get("/comparisons", response_model=Page[ComparisonOut], responses=errors())
def list_comparisons(session: SessionDep, project: ProjectDep,
                     graph_id: Annotated[str | None, Query(max_length=40)] = None,
                     topology_id: Annotated[str | None, Query(max_length=40)] = None,
                     cursor: Annotated[str | None, Query(max_length=40)] = None,
                     limit: Annotated[int, Query(ge=1, le=100)] = 20,
                     include: Annotated[Include | None, Query(description=INCLUDE_DESCRIPTION)] = None,
                     ) -> Page[ComparisonOut]:
    """Comparisons of the project, newest first; items carry no ``settings`` unless ``include=settings``."""
    stmt = select(Comparison).where(Comparison.project_id == project)
    # The settings are read (a comparison ranks its rows by them: settings.global_batch) but are
    # answered only with include=settings.
    if graph_id is not None:
        stmt = stmt.where(Comparison.graph_id == graph_id)
    if topology_id is not None:
        stmt = stmt.where(Comparison.topology_id == topology_id)
    rows, nxt = next_cursor(list(session.scalars(paginate(stmt, Comparison.id, cursor, limit))), limit)
    return Page[ComparisonOut](items=[comparison_out(session, c, settings=include == "settings") for c in rows],
                               next_cursor=nxt)


@router.get("/comparisons/{comparison_id:id}", response_model=ComparisonOut, responses=errors())
def get_comparison(comparison_id: str, session: SessionDep, project: ProjectDep) -> ComparisonOut:
    """The comparison table: per solver its status, objective, throughput, efficiency vs bound, time, memory."""
    return comparison_out(session, get_owned(session, Comparison, comparison_id, project, "comparison"))


@router.delete("/comparisons/{comparison_id:id}", status_code=204, responses=errors(409))
def delete_comparison(comparison_id: str, session: SessionDep, project: ProjectDep) -> Response:
    """Delete a comparison; refused (409) while any of its jobs is queued or running.  Its jobs and
    plans stay (listed under ``/v1/jobs`` without a comparison)."""
    row = get_owned(session, Comparison, comparison_id, project, "comparison")
    refuse_if_in_use(session, Job.comparison_id, comparison_id, "comparison")
    session.delete(row)
    session.commit()
    return Response(status_code=204)
