"""The plan of a fanned-out ``auto`` job (:mod:`service.jobs.fanout`): the portfolio's choice among
its children's plans, finished by the library for the parent's problem."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from service.calibrations import chosen_by_id
from service.db.models import Graph, Job, PlanRow, TopologyRow
from service.documents import decompress, load_problem
from solvers.model.errors import PlacerError
from solvers.portfolio import AutoSolver, Stream, _choose
from solvers.solving import finish_plan

OWNER = "fan-out"
"""The lease owner of a fanned-out parent job while its children run (the reaper leaves it alone)."""


def reported_bound_s(job: Job) -> float | None:
    """The largest bound a member reported in its progress (``bound_s``; the runner keeps the largest)."""
    bound = (job.progress or {}).get("bound_s")
    return float(bound) if isinstance(bound, int | float) else None


def chosen_plan(session: Session, parent: Job, children: list[Job]) -> dict[str, Any]:
    """The portfolio's choice among the children's plans, finished by the library for the parent's problem."""
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
    graph, topology = session.get(Graph, parent.graph_id), session.get(TopologyRow, parent.topology_id)
    if graph is None or topology is None:
        raise PlacerError("the job's graph or topology no longer exists")
    cal = chosen_by_id(session, parent.calibration_id)
    if parent.calibration_id is not None and cal is None:
        raise PlacerError("the job's calibration no longer exists")
    problem = load_problem(graph.body, topology.body, parent.objective, parent.settings,
                           None if cal is None else cal.body)
    # the bounds members reported in their progress (moirai's before its warm start), as auto in one
    # process keeps those its members stream (solvers.portfolio.Stream)
    streams = {c.solver: Stream(bound_s=b) for c in children for b in [reported_bound_s(c)] if b is not None}
    plan = _choose(problem, names, results, streams)
    solve_time_s = max((r[2] for r in results.values()), default=0.0)
    finished = finish_plan(problem, plan.with_(solver=AutoSolver.name, solver_version=AutoSolver.version,
                                               options=dict(parent.options), solve_time_s=solve_time_s))
    return finished.to_document()
