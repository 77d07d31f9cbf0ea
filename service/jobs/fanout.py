"""``auto`` on Celery workers: each portfolio member is its own job, and the parent job's choice
is made in the database when its last child ends (docs/python.md, docs/service.md).

A worker that claims an ``auto`` job *expands* it in the claim's transaction: one queued child
job per member (:func:`solvers.portfolio.portfolio_names`), with the options ``auto`` gives it
(:func:`solvers.portfolio.member_options`).  Each member runs for at most what is
left of the parent's time limit when it is claimed (:func:`service.jobs.store.parent_budget_s`):
on enough workers they run at once with the whole limit, on fewer one after another with what
the earlier ones left, and a member claimed after the limit is spent fails at once, so that the
parent ends within its time limit.  The parent stays ``running`` under the
lease owner :data:`OWNER` with no lease expiry, so the reaper leaves it alone while its children
are queued, retried or running.  Whichever transaction finishes the last child chooses: the
children's plans go through the portfolio's own choice (:func:`solvers.portfolio._choose`) and
the library's :func:`solvers.solving.finish_plan` (:mod:`service.jobs.portfolio_plan`), and the
parent succeeds with that plan (or fails, or is cancelled if that was asked:
:func:`service.jobs.store.settle_parent`).  The parent's row is locked first, so concurrent last
children cannot both choose.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from service.calibrations import chosen_by_id
from service.db.models import FINAL_STATES, Graph, Job, TopologyRow
from service.documents import load_problem
from service.jobs import store
from service.jobs.portfolio_plan import OWNER
from service.jobs.validate import JobSpec, cache_key
from solvers import registry
from solvers.portfolio import AutoOptions, member_options, portfolio_names


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
    cal = chosen_by_id(session, parent.calibration_id)
    problem = load_problem(graph.body, topology.body, parent.objective, parent.settings,
                           None if cal is None else cal.body)
    names = portfolio_names(problem, AutoOptions.model_validate(parent.options).solvers)
    if not names:
        store.fail(session, job_id, owner, {"type": "solver-failure", "title": "Solver failure",
                                            "detail": f"auto: no registered solver answers the {parent.objective!r} objective"})
        return []
    children = []
    for name in names:
        cls = registry.get_solver_class(name)
        options = member_options(name, names)  # as in one process: celeritas bare beside the list schedulers
        spec = JobSpec(graph.id, topology.id, name, parent.objective, dict(parent.settings), options,
                       parent.time_limit_s, cache_key(graph, topology, name, cls.version, parent.objective,
                                                      dict(parent.settings), options, parent.time_limit_s,
                                                      None if cal is None else cal.digest),
                       None if cal is None else cal.id)
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
            store.settle_parent(session, parent.id)
    return [c.id for c in children if c.state == "queued"]
