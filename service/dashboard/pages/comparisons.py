"""Comparison pages: the list, the form that starts one, and the live comparison table."""

from __future__ import annotations

from typing import Any

from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.comparisons import comparison_out, create_comparison, delete_comparison, list_comparisons
from service.api.solvers import catalogue
from service.dashboard.charts.bars import CHART_UNITS, objective_chart, row_label
from service.dashboard.charts.sweep import solve_time_against_quality, throughput_by_setting
from service.dashboard.pages.common import PAGE_SIZE, CursorQ, ViewerDep, json_object, page_router, text_field
from service.dashboard.render import page
from service.db.models import Comparison, Graph, TopologyRow
from service.db.owned import get_owned
from service.deps import CtxDep, SessionDep
from service.errors import field_of
from service.schemas import ComparisonIn, ComparisonOut, ComparisonRow
from solvers.model.errors import InvalidInput, PlacerError
from solvers.model.schedules import PIPELINE_SCHEDULES
from solvers.model.sweep import MAX_SWEEP_MEMBERS, MAX_SWEEP_VALUES

router = page_router()
CHOICES = 200  # graphs / topologies offered in the form's lists (newest first)
# What the form preselects per objective: the fast heuristics and the even baseline (the exact
# solvers and ``auto`` take their whole time limit; tick them to wait for them).
DEFAULT_SOLVERS = {"throughput": ("parmesan", "pipedream", "rannc", "even"),
                   "latency": ("heft", "m-etf", "m-topo", "single")}


@router.get("/comparisons")
def comparisons_list(viewer: ViewerDep, session: SessionDep, cursor: CursorQ = None) -> Response:
    listed = list_comparisons(session=session, project=viewer.project_id, graph_id=None, topology_id=None,
                              cursor=cursor, limit=PAGE_SIZE)
    return page("comparisons.html", viewer, items=listed.items, next_cursor=listed.next_cursor, cursor=cursor,
                names=_names(session, viewer.project_id, listed.items))


def _names(session: Session, project: str, items: list[ComparisonOut]) -> dict[str, str]:
    ids = {i.graph_id for i in items if i.graph_id} | {i.topology_id for i in items if i.topology_id}
    out: dict[str, str] = {}
    for model in (Graph, TopologyRow):
        out.update({r.id: r.name for r in session.execute(select(model.id, model.name).where(
            model.project_id == project, model.id.in_(ids)))})
    return out


def _form_context(session: Session, project: str, values: dict[str, Any]) -> dict[str, Any]:
    graphs = session.execute(select(Graph.id, Graph.name, Graph.n_ops).where(Graph.project_id == project)
                             .order_by(Graph.id.desc()).limit(CHOICES)).all()
    topologies = session.execute(select(TopologyRow.id, TopologyRow.name, TopologyRow.n_devices)
                                 .where(TopologyRow.project_id == project)
                                 .order_by(TopologyRow.id.desc()).limit(CHOICES)).all()
    solvers = [s for s in catalogue() if s.available]
    return {"graphs": graphs, "topologies": topologies, "solvers": solvers, "values": values,
            "defaults": DEFAULT_SOLVERS, "schedules": PIPELINE_SCHEDULES, "max_members": MAX_SWEEP_MEMBERS,
            "max_values": MAX_SWEEP_VALUES}


def default_solvers(objective: str) -> list[str]:
    """The available solvers the form preselects for ``objective``."""
    available = {s.name for s in catalogue() if s.available and objective in s.objectives}
    return [name for name in DEFAULT_SOLVERS.get(objective, ()) if name in available]


def check_objective(solvers: list[str], objective: str) -> None:
    """Every chosen solver answers ``objective`` (the form offers only those; a hand-made POST is told which)."""
    answers = {s.name: s.objectives for s in catalogue()}
    wrong = [name for name in solvers if name in answers and objective not in answers[name]]
    if wrong:
        raise InvalidInput(f"solvers: {', '.join(wrong)} {'does' if len(wrong) == 1 else 'do'} not answer the "
                           f"{objective} objective; choose among "
                           f"{', '.join(s.name for s in catalogue() if s.available and objective in s.objectives)}",
                           field="solvers")


@router.get("/comparisons/new")
def comparison_form(request: Request, viewer: ViewerDep, session: SessionDep) -> Response:
    values = {"graph_id": request.query_params.get("graph_id", ""),
              "topology_id": request.query_params.get("topology_id", ""), "objective": "throughput",
              "pass": "forward", "micro_batches": "8", "global_batch": "", "time_limit_s": "10",
              "sweep_micro_batches": "", "sweep_schedule": [], "sweep_tp": "",
              "solvers": default_solvers("throughput"), "options": {}}
    return page("comparison_new.html", viewer, **_form_context(session, viewer.project_id, values), error=None,
                error_at=None)


# The form's inputs an error can be shown next to; a request field that is another's (``settings.*``) maps to it.
FORM_FIELDS = ("graph_id", "topology_id", "objective", "pass", "micro_batches", "global_batch", "time_limit_s",
               "solvers", "sweep", "sweep.micro_batches", "sweep.schedule", "sweep.tp")
FIELD_ALIASES = {"settings.micro_batches": "micro_batches", "settings.global_batch": "global_batch",
                 "settings.pass": "pass"}


def error_at(field: str | None) -> str | None:
    """The form input an error naming ``field`` belongs to (``sweep.micro_batches[2]`` ->
    ``sweep.micro_batches``), or ``None`` when it is none of them (the error is then shown above the form)."""
    if not field:
        return None
    for alias, name in FIELD_ALIASES.items():
        if field == alias or field.startswith((alias + "[", alias + ".")):
            return name
    known = [f for f in FORM_FIELDS if field == f or field.startswith((f + "[", f + "."))]
    return max(known, key=len) if known else None


def _counts(text: str, field: str) -> list[int]:
    """Whole numbers separated by commas or spaces; an error naming ``field[i]`` at the first that is not one."""
    out = []
    for i, token in enumerate(str(text).replace(",", " ").split()):
        try:
            out.append(int(token))
        except ValueError:
            raise InvalidInput(f"{field}[{i}]: {token!r} is not a whole number; write counts separated by commas, "
                               "e.g. 4, 8", field=f"{field}[{i}]") from None
    return out


def _sweep(values: dict[str, Any]) -> dict[str, Any] | None:
    """The request's ``sweep`` from the form: the micro-batch counts typed, the schedules ticked and the
    tensor-parallel degrees typed (``None`` when none is given; the API checks the values and the member count)."""
    sweep: dict[str, Any] = {}
    counts = _counts(values.get("sweep_micro_batches", ""), "sweep.micro_batches")
    if counts:
        sweep["micro_batches"] = counts
    if values.get("sweep_schedule"):
        sweep["schedule"] = list(values["sweep_schedule"])
    degrees = _counts(values.get("sweep_tp", ""), "sweep.tp")
    if degrees:
        sweep["tp"] = degrees
    return sweep or None


def _comparison_in(values: dict[str, Any]) -> ComparisonIn:
    """The API's request model from the form's values (errors name the field)."""
    micro = _counts(values["micro_batches"], "micro_batches")
    options = {name: json_object(values["options"].get(name, ""), f"options.{name}") for name in values["solvers"]}
    settings: dict[str, Any] = {"pass": values["pass"]} if values["objective"] == "latency" else {}
    if micro:
        settings["micro_batches"] = micro
    if str(values.get("global_batch") or "").strip():
        try:
            settings["global_batch"] = int(str(values["global_batch"]))
        except ValueError:
            raise InvalidInput("global_batch: a whole number of samples per iteration, or blank",
                               field="global_batch") from None
    limit = values["time_limit_s"]
    try:
        return ComparisonIn.model_validate({
            "graph_id": values["graph_id"], "topology_id": values["topology_id"], "solvers": values["solvers"],
            "objective": values["objective"], "settings": settings, "time_limit_s": float(limit) if limit else None,
            "options": {k: v for k, v in options.items() if v}, "sweep": _sweep(values)})
    except (ValidationError, ValueError) as exc:
        if isinstance(exc, ValidationError):
            err = exc.errors()[0]
            field = field_of(err["loc"]) or "form"
            raise InvalidInput(f"{field}: {str(err['msg']).removeprefix('Value error, ')}", field=field) from None
        raise InvalidInput("time_limit_s: must be a number of seconds", field="time_limit_s") from None


@router.post("/comparisons")
async def comparison_create(request: Request, ctx: CtxDep, session: SessionDep, viewer: ViewerDep) -> Response:
    form = await request.form()
    fields = {k: v for k, v in form.items()}
    solvers = [s for s in form.getlist("solvers") if isinstance(s, str)]
    values: dict[str, Any] = {
        "graph_id": text_field(fields, "graph_id"), "topology_id": text_field(fields, "topology_id"),
        "objective": text_field(fields, "objective", "throughput"), "pass": text_field(fields, "pass", "forward"),
        "micro_batches": text_field(fields, "micro_batches"), "global_batch": text_field(fields, "global_batch"),
        "time_limit_s": text_field(fields, "time_limit_s"),
        "sweep_micro_batches": text_field(fields, "sweep.micro_batches"),
        "sweep_schedule": [s for s in form.getlist("sweep.schedule") if isinstance(s, str)],
        "sweep_tp": text_field(fields, "sweep.tp"),
        "solvers": solvers, "options": {k[len("options."):]: text_field(fields, k) for k in fields
                                        if k.startswith("options.")}}

    def create() -> str:
        out = create_comparison(body=_comparison_in(values), response=Response(), ctx=ctx, session=session,
                                project=viewer.project_id, idempotency_key=None)
        return out.id

    try:
        if not solvers:
            raise InvalidInput("solvers: choose at least one solver", field="solvers")
        check_objective(solvers, values["objective"])
        comparison_id = await run_in_threadpool(create)
    except PlacerError as exc:
        session.rollback()
        context = await run_in_threadpool(_form_context, session, viewer.project_id, values)
        return page("comparison_new.html", viewer, status_code=int(getattr(exc, "http_status", 422)), **context,
                    error=exc.message, error_at=error_at(getattr(exc, "field", None)))
    return RedirectResponse(f"/comparisons/{comparison_id}", status_code=303)


def layout(row: ComparisonRow) -> str:
    """Stages × replicas (× tensor degree) of a row's plan: ``4 × 2``, ``3 stages (2, 1, 1)``, ``2 × 2 × tp 2``."""
    if not row.replicas:
        return "–"
    counts = row.replicas
    text = f"{len(counts)} × {counts[0]}" if len(set(counts)) == 1 else \
        f"{len(counts)} stages ({', '.join(str(c) for c in counts)})"
    degrees = row.tensor_degrees or []
    if degrees:
        text += f" × tp {degrees[0]}" if len(set(degrees)) == 1 else f" × tp ({', '.join(str(d) for d in degrees)})"
    return text


def schedule_text(row: ComparisonRow) -> str:
    """The plan's schedule, with its virtual stages when there are several per rank group."""
    if row.schedule is None:
        return "–"
    return row.schedule + (f", {row.virtual_stages} virtual" if (row.virtual_stages or 1) > 1 else "")


def ranked(rows: list[ComparisonRow]) -> list[ComparisonRow]:
    """The rows by comparison key (least first), the rows without one last in job order."""
    return sorted(rows, key=lambda r: (r.key_s is None, r.key_s or 0.0))


def _comparison_context(session: Session, project: str, comparison_id: str) -> dict[str, Any]:
    out = comparison_out(session, get_owned(session, Comparison, comparison_id, project, "comparison"))
    names = _names(session, project, [out])
    rows = ranked(out.rows)
    unit = CHART_UNITS.get(out.ranked_by, ("objective", ""))[0]
    sweeps = {axis: throughput_by_setting(rows, axis, values) for axis, values in out.sweep.items()}
    return {"cmp": out, "rows": rows, "names": names, "chart": objective_chart(rows, out.best_job_id, out.ranked_by),
            "sweep_charts": sweeps, "tradeoff": solve_time_against_quality(rows, unit),
            "layout": {r.job_id: layout(r) for r in rows}, "schedule": {r.job_id: schedule_text(r) for r in rows},
            "label": {r.job_id: row_label(r) for r in rows}, "plans": [r for r in rows if r.plan_id]}


@router.get("/comparisons/{comparison_id}")
def comparison_page(comparison_id: str, viewer: ViewerDep, session: SessionDep) -> Response:
    return page("comparison.html", viewer, **_comparison_context(session, viewer.project_id, comparison_id))


@router.get("/comparisons/{comparison_id}/live")
def comparison_live(comparison_id: str, viewer: ViewerDep, session: SessionDep) -> Response:
    """The table and chart alone, refreshed by the page until every job has finished."""
    return page("_comparison_live.html", viewer, **_comparison_context(session, viewer.project_id, comparison_id))


@router.post("/comparisons/{comparison_id}/delete")
def comparison_delete(comparison_id: str, viewer: ViewerDep, session: SessionDep) -> Response:
    """Delete the comparison as ``DELETE /v1/comparisons/{id}`` does (409 while its jobs are queued or
    running); its jobs and plans stay."""
    delete_comparison(comparison_id=comparison_id, session=session, project=viewer.project_id)
    return RedirectResponse("/comparisons", status_code=303)
