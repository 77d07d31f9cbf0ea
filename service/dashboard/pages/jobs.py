"""Job pages: the list with live status, a job's progress (its event stream) and its plan."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Header, Query, Response
from fastapi.responses import RedirectResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.jobs import cancel_job, job_out, list_jobs
from service.dashboard.pages.common import PAGE_SIZE, CursorQ, ViewerDep, page_router
from service.dashboard.render import page
from service.db.models import Graph, Job, PlanRow, TopologyRow
from service.db.owned import get_owned
from service.deps import CtxDep, SessionDep
from service.jobs.events import event_stream
from service.schemas import JobState

router = page_router()


def _list_context(session: Session, project: str, cursor: str | None, status: str | None) -> dict[str, Any]:
    listed = list_jobs(session=session, project=project, status=status, solver=None,  # type: ignore[arg-type]
                       graph_id=None, topology_id=None, comparison_id=None, cursor=cursor, limit=PAGE_SIZE)
    live = any(j.status in ("queued", "running") for j in listed.items)
    ids = {j.graph_id for j in listed.items if j.graph_id} | {j.topology_id for j in listed.items if j.topology_id}
    names: dict[str, str] = {}
    for model in (Graph, TopologyRow):
        names.update({r.id: r.name for r in session.execute(select(model.id, model.name).where(
            model.project_id == project, model.id.in_(ids)))})
    return {"jobs": listed.items, "names": names, "next_cursor": listed.next_cursor, "cursor": cursor, "status": status or "",
            "live": live, "states": ("queued", "running", "succeeded", "failed", "cancelled")}


@router.get("/jobs")
def jobs_list(viewer: ViewerDep, session: SessionDep, cursor: CursorQ = None,
              status: Annotated[JobState | None, Query()] = None) -> Response:
    return page("jobs.html", viewer, **_list_context(session, viewer.project_id, cursor, status))


@router.get("/jobs/rows")
def jobs_rows(viewer: ViewerDep, session: SessionDep, cursor: CursorQ = None,
              status: Annotated[JobState | None, Query()] = None) -> Response:
    """The list's table alone, for the page's live refresh."""
    return page("_jobs_table.html", viewer, **_list_context(session, viewer.project_id, cursor, status))


@router.get("/jobs/{job_id}")
def job_page(job_id: str, viewer: ViewerDep, session: SessionDep) -> Response:
    job = job_out(get_owned(session, Job, job_id, viewer.project_id, "job"))
    plan = get_owned(session, PlanRow, job.plan_id, viewer.project_id, "plan") if job.plan_id else None
    graph = session.get(Graph, job.graph_id) if job.graph_id else None
    topology = session.get(TopologyRow, job.topology_id) if job.topology_id else None
    return page("job.html", viewer, job=job, plan=plan, live=job.status in ("queued", "running"),
                graph_name=graph.name if graph else None, topology_name=topology.name if topology else None)


@router.get("/jobs/{job_id}/events")
async def job_events(job_id: str, viewer: ViewerDep, ctx: CtxDep, session: SessionDep,
                     last_event_id: Annotated[str | None, Header(max_length=20)] = None) -> Response:
    """The job's event stream (the API's), for the page's EventSource (signed in by cookie)."""
    get_owned(session, Job, job_id, viewer.project_id, "job")
    session.commit()
    start = int(last_event_id) if last_event_id and last_event_id.isascii() and last_event_id.isdigit() else 0
    return event_stream(ctx.db, job_id, start)


@router.post("/jobs/{job_id}/cancel")
def job_cancel(job_id: str, viewer: ViewerDep, session: SessionDep) -> Response:
    """Cancel the job as ``POST /v1/jobs/{id}:cancel`` does (409 once it has finished)."""
    cancel_job(job_id=job_id, session=session, project=viewer.project_id)
    return RedirectResponse(f"/jobs/{job_id}", status_code=303)
