"""A plan's page (warnings, timeline, stages, memory, mapping, measured beside simulated, options), the
diff of two plans, and the downloads: the plan document and the simulated timeline as a Chrome trace."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Query, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.dashboard.charts.bars import memory_chart, stage_chart
from service.dashboard.charts.gantt import gantt
from service.dashboard.charts.runs import measured_chart
from service.dashboard.charts.runs import span_s as runs_span_s
from service.dashboard.charts.topology import mapping_chart
from service.dashboard.pages.common import ViewerDep, page_router
from service.dashboard.plan_view import (
    PlanContext,
    chrome_trace,
    device_memory,
    diff_plans,
    load_plan,
    stage_bars,
)
from service.dashboard.plan_view import timeline as plan_timeline
from service.dashboard.render import SECURITY_HEADERS, page
from service.dashboard.run_view import measured_bars
from service.db.models import Job, PlanRow, RunRow
from service.db.owned import get_owned
from service.deps import SessionDep
from service.documents import decompress
from service.launchers import launcher_zip
from solvers.advice import problem_warnings
from solvers.model.run import line_up, run_from_document

router = page_router()
IdQ = Annotated[str, Query(max_length=40)]


def _siblings(session: Session, ctx: PlanContext, project: str) -> list[tuple[str, str]]:
    """(plan id, solver) of the other plans of the same comparison, for the diff form."""
    if ctx.job is None or ctx.job.comparison_id is None:
        return []
    rows = session.execute(select(Job.plan_id, Job.solver).where(
        Job.project_id == project, Job.comparison_id == ctx.job.comparison_id, Job.plan_id.is_not(None),
        Job.plan_id != ctx.row.id).order_by(Job.id)).all()
    return [(str(r.plan_id), str(r.solver)) for r in rows]


def latest_runs(session: Session, plan_id: str, project: str, limit: int = 10) -> list[RunRow]:
    """The plan's newest uploaded run records (``placer runs upload``)."""
    return list(session.scalars(select(RunRow).where(RunRow.project_id == project, RunRow.plan_id == plan_id)
                                .order_by(RunRow.id.desc()).limit(limit)))


def render_plan(session: Session, viewer: Any, plan_id: str) -> Response:
    """The plan page's HTML (also what ``bench/bench_dashboard.py`` times)."""
    ctx = load_plan(session, get_owned(session, PlanRow, plan_id, viewer.project_id, "plan"))
    entries = plan_timeline(ctx)
    charts: dict[str, Any] = {}
    runs = latest_runs(session, ctx.row.id, viewer.project_id)
    run = run_from_document(decompress(runs[0].body)) if runs else None
    order = [d.id for d in ctx.problem.topology.devices] if ctx.problem is not None else \
        [d for st in ctx.plan.stages for d in st.devices]
    run_bars = measured_bars(run, ctx.plan.metrics or {}, ctx.plan.micro_batches, order) if run else []
    # one time scale for the simulated timeline and the measured bars: the longer of the two
    span = max(max((e.end_s for e in entries), default=0.0), runs_span_s(run_bars))
    if run_bars:
        charts["measured"] = measured_chart(run_bars, span)
    if ctx.problem is not None and ctx.plan.stages:
        stages_of: dict[str, list[int]] = {}
        for k, st in enumerate(ctx.plan.stages):
            for d in st.devices:
                stages_of.setdefault(d, []).append(k)
        charts["mapping"] = mapping_chart(ctx.problem.topology, stages_of, [len(s.ops) for s in ctx.plan.stages])
        if entries:
            charts["gantt"] = gantt(entries, order, f"simulated timeline of one iteration, {len(entries)} intervals",
                                    span)
    bars = stage_bars(ctx)
    memory = device_memory(ctx)
    if bars and ctx.plan.metrics:
        charts["stages"] = stage_chart(bars)
    if memory:
        charts["memory"] = memory_chart(memory)
    warnings = ([w.to_dict() for w in problem_warnings(ctx.problem.graph, ctx.problem.topology)]
                if ctx.problem is not None else [dict(w) for w in ctx.plan.warnings])
    measured = line_up(run, ctx.plan.metrics or {}) if run else []
    return page("plan.html", viewer, ctx=ctx, plan=ctx.plan, metrics=ctx.plan.metrics or {}, charts=charts,
                bars=bars, n_entries=len(entries), siblings=_siblings(session, ctx, viewer.project_id),
                warnings=warnings, runs=runs, measured=measured, run_bars=run_bars,
                calibration=(ctx.plan.metrics or {}).get("calibration"),
                launchable=ctx.problem is not None and bool(ctx.plan.stages) and "source" in ctx.problem.graph.attrs,
                settings=shown_settings(ctx), options_json=json.dumps(ctx.plan.options, indent=2,
                                                                                      sort_keys=True))


def shown_settings(ctx: PlanContext) -> dict[str, Any]:
    """The job's problem settings as the page shows them: the pass only for a latency plan (a
    throughput plan runs forward and backward, whatever ``pass`` says)."""
    settings = dict(ctx.job.settings) if ctx.job else {}
    if (ctx.job.objective if ctx.job else ctx.plan.objective) != "latency":
        settings.pop("pass", None)
    return settings


@router.get("/plans/diff")
def plans_diff(viewer: ViewerDep, session: SessionDep, a: IdQ, b: IdQ) -> Response:
    """What changed from plan ``a`` to plan ``b``: stage boundaries, replicas, settings, times per stage."""
    pa = load_plan(session, get_owned(session, PlanRow, a, viewer.project_id, "plan", field="a"))
    pb = load_plan(session, get_owned(session, PlanRow, b, viewer.project_id, "plan", field="b"))
    return page("plan_diff.html", viewer, a=pa, b=pb, diff=diff_plans(pa.plan, pb.plan))


@router.get("/plans/{plan_id}")
def plan_page(plan_id: str, viewer: ViewerDep, session: SessionDep) -> Response:
    return render_plan(session, viewer, plan_id)


def _download(body: Any, filename: str) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), media_type="application/json",
                    headers={**SECURITY_HEADERS, "Content-Disposition": f'attachment; filename="{filename}"'})


@router.get("/plans/{plan_id}/plan.json")
def plan_download(plan_id: str, viewer: ViewerDep, session: SessionDep) -> Response:
    """The stored ``placer.plan/v1`` document."""
    row = get_owned(session, PlanRow, plan_id, viewer.project_id, "plan")
    return _download(load_plan(session, row).doc, f"{plan_id}.plan.json")


@router.get("/plans/{plan_id}/trace.json")
def trace_download(plan_id: str, viewer: ViewerDep, session: SessionDep) -> Response:
    """The simulated timeline in the Trace Event Format (chrome://tracing, Perfetto)."""
    ctx = load_plan(session, get_owned(session, PlanRow, plan_id, viewer.project_id, "plan"))
    return _download(chrome_trace(ctx, plan_timeline(ctx)), f"{plan_id}.trace.json")


@router.get("/plans/{plan_id}/launcher.zip")
def launcher_download(plan_id: str, viewer: ViewerDep, session: SessionDep) -> Response:
    """The plan's launcher bundle (docs/launcher.md): the same zip as ``GET /v1/plans/{id}/launcher``."""
    data, filename = launcher_zip(session, get_owned(session, PlanRow, plan_id, viewer.project_id, "plan"),
                                  viewer.project_id)
    return Response(data, media_type="application/zip",
                    headers={**SECURITY_HEADERS, "Content-Disposition": f'attachment; filename="{filename}"'})
