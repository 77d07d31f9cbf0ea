"""``auto`` on Celery workers: each portfolio member is its own job, and the parent job's choice
is made in the database when its last child ends (DESIGN §6, §7).

A worker that claims an ``auto`` job *expands* it in the claim's transaction: one queued child
job per member (:func:`solvers.portfolio.portfolio_names`), each with the parent's full time
limit, since they run at once on different workers.  The parent stays ``running`` under the
lease owner :data:`OWNER` with no lease expiry, so the reaper leaves it alone while its children
are queued, retried or running.  Whichever transaction finishes the last child chooses: the
children's plans go through the portfolio's own choice (:func:`solvers.portfolio._choose`) and
the library's :func:`solvers.solving.finish_plan`, and the parent succeeds with that plan (or
fails, or is cancelled if that was asked).  The parent's row is locked first, so concurrent
last children cannot both choose.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.models import FINAL_STATES, Graph, Job, PlanRow, TopologyRow
from service.documents import decompress, load_problem
from service.jobs import store
from service.jobs.validate import JobSpec, cache_key
from solvers import registry
from solvers.model.errors import PlacerError
from solvers.portfolio import AutoOptions, AutoSolver, _choose, portfolio_names

OWNER = "fan-out"


def expand(session: Session, job_id: str, owner: str, lease_s: float, max_running: int = 0) -> list[str] | None:
    """Claim the ``auto`` job ``job_id`` and queue one child job per portfolio member.

    Returns the children's ids (to dispatch after the commit), or ``None`` if the job was not
    claimed.  A portfolio with no member fails the parent at once.
    """
    claimed = store.claim(session, job_id, owner, lease_s, max_running)
    if claimed is None:
        return None
    parent = session.get(Job, job_id)
    assert parent is not None and parent.graph_id is not None and parent.topology_id is not None
    graph, topology = session.get(Graph, parent.graph_id), session.get(TopologyRow, parent.topology_id)
    assert graph is not None and topology is not None
    problem = load_problem(graph.body, topology.body, parent.objective, parent.settings)
    names = portfolio_names(problem, AutoOptions.model_validate(parent.options).solvers)
    if not names:
        store.fail(session, job_id, owner, {"type": "solver-failure", "title": "Solver failure",
                                            "detail": f"auto: no registered solver answers the {parent.objective!r} objective"})
        return []
    children = []
    for name in names:
        cls = registry.get_solver_class(name)
        spec = JobSpec(graph.id, topology.id, name, parent.objective, dict(parent.settings), {}, parent.time_limit_s,
                       cache_key(graph, topology, name, cls.version, parent.objective, dict(parent.settings), {},
                                 parent.time_limit_s))
        child = store.submit(session, parent.project_id, spec, use_cache=parent.use_cache,
                             comparison_id=parent.comparison_id)
        child.parent_id = parent.id
        children.append(child)
    parent.lease_owner, parent.lease_expires_at = OWNER, None
    parent.progress = {"fraction": 0.0, "message": f"{len(names)} portfolio members queued as their own jobs"}
    store.add_event(session, parent, "progress", parent.progress)
    session.flush()
    for child in children:
        if child.state in FINAL_STATES:  # a cached plan answered this member at once
            settle(session, parent.id)
    return [c.id for c in children if c.state == "queued"]


def settle(session: Session, parent_id: str) -> None:
    """After a child ended: record the parent's progress, or finish it once every child ended."""
    parent = session.scalar(select(Job).where(Job.id == parent_id).with_for_update())
    if parent is None or parent.state != "running" or parent.lease_owner != OWNER:
        return
    session.flush()
    children = list(session.scalars(select(Job).where(Job.parent_id == parent_id).order_by(Job.id)))
    done = [c for c in children if c.state in FINAL_STATES]
    if len(done) < len(children):
        parent.progress = {**(parent.progress or {}), "fraction": len(done) / len(children),
                           "message": f"{len(done)} of {len(children)} portfolio members done"}
        store.add_event(session, parent, "progress", parent.progress)
        return
    if parent.cancel_requested:
        store.cancel_running(session, parent_id, OWNER)
        return
    try:
        doc = _chosen_plan(session, parent, children)
    except PlacerError as exc:
        store.fail(session, parent_id, OWNER, {**exc.to_dict(), "status": exc.http_status})
        return
    store.succeed(session, parent_id, OWNER, doc)


def _chosen_plan(session: Session, parent: Job, children: list[Job]) -> dict[str, Any]:
    """The portfolio's choice among the children's plans, finished by the library for the parent's problem."""
    from solvers.solving import finish_plan

    results: dict[str, tuple[str, Any, float]] = {}
    for child in children:
        elapsed = (child.finished_at - child.started_at).total_seconds() if child.started_at and child.finished_at else 0.0
        row = session.get(PlanRow, child.plan_id) if child.plan_id else None
        if child.state == "succeeded" and row is not None:
            results[child.solver] = ("ok", decompress(row.body), elapsed)
        else:
            reason = (child.error or {}).get("detail") or child.state
            results[child.solver] = ("error", f"{(child.error or {}).get('type', child.state)}: {reason}", elapsed)
    names = [c.solver for c in children]
    plan = _choose(names, results)
    graph, topology = session.get(Graph, parent.graph_id), session.get(TopologyRow, parent.topology_id)
    if graph is None or topology is None:
        raise PlacerError("the job's graph or topology no longer exists")
    problem = load_problem(graph.body, topology.body, parent.objective, parent.settings)
    solve_time_s = max((r[2] for r in results.values()), default=0.0)
    finished = finish_plan(problem, plan.with_(solver=AutoSolver.name, solver_version=AutoSolver.version,
                                               options=dict(parent.options), solve_time_s=solve_time_s))
    return finished.to_document()
