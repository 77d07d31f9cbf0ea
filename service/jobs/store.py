"""Every state transition of a job, as short transactions on the jobs table.

The table is the source of truth: a worker *claims* a queued job by a conditional UPDATE
(exactly one claimant wins), holds a *lease* it renews while the solver runs, and finishes
the job only while it still owns the lease.  The *reaper* requeues running jobs whose lease
expired (their worker died) until ``max_attempts`` is reached, then fails them with the
reason.  Nothing here knows how job ids travel to workers (see ``dispatch``).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, aliased

from service.calibrations import chosen_by_id
from service.db.models import (
    ACTIVE_STATES,
    FINAL_STATES,
    Comparison,
    Graph,
    IdempotencyReservation,
    Job,
    JobEvent,
    PlanRow,
    Project,
    TopologyRow,
    new_id,
    utcnow,
)
from service.documents import compress, decompress
from service.jobs.claimed import Claimed
from service.jobs.portfolio_plan import OWNER, chosen_plan, reported_bound_s
from service.jobs.validate import JobSpec
from solvers.model.errors import PlacerError
from solvers.portfolio import AutoOptions, gap_reason, gap_stop_note, one_count


def add_event(session: Session, job: Job | tuple[str, str], kind: str, data: dict[str, Any]) -> None:
    """Append to a job's event log; ``job`` is the row or its (id, project id)."""
    job_id, project_id = (job.id, job.project_id) if isinstance(job, Job) else job
    session.add(JobEvent(job_id=job_id, project_id=project_id, kind=kind, data=data))


def submit(session: Session, project_id: str, spec: JobSpec, *, use_cache: bool, comparison_id: str | None = None,
           idempotency_key: str | None = None, request_digest: str | None = None) -> Job:
    """Insert a job (not committed).  With ``use_cache`` a finished identical plan is reused at once."""
    job = Job(id=new_id("job"), project_id=project_id, comparison_id=comparison_id, graph_id=spec.graph_id,
              topology_id=spec.topology_id, solver=spec.solver, objective=spec.objective, settings=spec.settings,
              options=spec.options, time_limit_s=spec.time_limit_s, use_cache=use_cache, cache_key=spec.cache_key,
              idempotency_key=idempotency_key, request_digest=request_digest, state="queued", attempts=0,
              calibration_id=spec.calibration_id)
    cached = None
    if use_cache:
        cached = session.scalar(select(PlanRow).where(PlanRow.project_id == project_id,
                                                      PlanRow.cache_key == spec.cache_key)
                                .order_by(PlanRow.created_at.desc()).limit(1))
    if cached is not None:
        now = utcnow()
        job.state, job.cached, job.cached_from = "succeeded", True, cached.job_id
        job.plan_id, job.plan_status, job.warnings = cached.id, cached.status, cached.warnings
        job.started_at = job.finished_at = now
        job.progress = {"fraction": 1.0, "incumbent_s": cached.objective_s, "bound_s": cached.lower_bound_s,
                        "message": f"reused the plan of job {cached.job_id}"}
    session.add(job)
    session.flush()
    add_event(session, job, "state", {"status": job.state, "cached": job.cached})
    return job


def create_comparison(session: Session, project_id: str, specs: list[JobSpec], objective: str, *, use_cache: bool,
                      idempotency_key: str | None = None, request_digest: str | None = None,
                      settings: dict[str, Any] | None = None) -> tuple[Comparison, list[Job]]:
    """Insert a comparison and one job per validated spec (not committed); the specs share the
    graph and topology, and the settings recorded on the comparison are ``settings`` (default:
    the first spec's; a sweep's members differ in the swept ones)."""
    first = specs[0]
    cmp = Comparison(id=new_id("cmp"), project_id=project_id, graph_id=first.graph_id, topology_id=first.topology_id,
                     objective=objective, settings=first.settings if settings is None else settings,
                     idempotency_key=idempotency_key,
                     request_digest=request_digest)
    session.add(cmp)
    session.flush()
    jobs = [submit(session, project_id, spec, use_cache=use_cache, comparison_id=cmp.id) for spec in specs]
    return cmp, jobs


def claim(session: Session, job_id: str, owner: str, lease_s: float, max_running: int = 0) -> Claimed | None:
    """Take a queued job (one claimant only); ``None`` if someone else has it or it is gone, or if
    its project already runs ``max_running`` jobs (0: no cap; the job stays queued)."""
    now = utcnow()
    conditions = [Job.id == job_id, Job.state == "queued", Job.cancel_requested.is_(False)]
    if max_running > 0:  # claims of one project queue on its row, so that each counts the others' claims
        project_id = session.scalar(select(Job.project_id).where(Job.id == job_id))
        session.execute(select(Project.id).where(Project.id == project_id).with_for_update())
        other = aliased(Job)
        running = (select(func.count()).select_from(other)
                   .where(other.project_id == Job.project_id, other.state == "running",
                          other.lease_expires_at.is_not(None))  # not a fanned-out auto job (its members count)
                   .scalar_subquery())
        conditions.append(running < max_running)
    won = session.execute(
        update(Job).where(*conditions)
        .values(state="running", lease_owner=owner, lease_expires_at=now + timedelta(seconds=lease_s),
                attempts=Job.attempts + 1, started_at=now, error=None)
        .returning(Job.id).execution_options(synchronize_session=False)
    ).first()
    if won is None:
        return None
    job = session.get(Job, job_id)
    assert job is not None
    session.refresh(job)
    graph = session.get(Graph, job.graph_id) if job.graph_id else None
    topology = session.get(TopologyRow, job.topology_id) if job.topology_id else None
    add_event(session, job, "state", {"status": "running", "attempt": job.attempts, "worker": owner})
    calibration = chosen_by_id(session, job.calibration_id)
    if graph is None or topology is None or (job.calibration_id is not None and calibration is None):
        _finish(session, job, "failed", error={"type": "not-found", "title": "Input deleted",
                                               "detail": "the job's graph, topology or calibration no longer exists"})
        return None
    time_limit_s = job.time_limit_s
    if job.parent_id is not None and _parent_stopped(session, job.parent_id):
        _finish(session, job, "cancelled")  # auto's gap stop: the member is not needed any more
        return None
    if job.parent_id is not None:
        left = parent_budget_s(session, job.parent_id, now)
        if left is not None and left < MIN_MEMBER_BUDGET_S:
            _finish(session, job, "failed", error={
                "type": "time-limit", "title": "Time limit spent", "field": "time_limit_s",
                "detail": "the auto job's time limit was spent before this portfolio member could start"})
            return None
        if left is not None:
            time_limit_s = min(time_limit_s, left)
    return Claimed(job.id, job.attempts, job.solver, job.objective, dict(job.settings), dict(job.options),
                   time_limit_s, graph.body, topology.body, None if calibration is None else calibration.body)


MIN_MEMBER_BUDGET_S = 0.05
"""A portfolio member left less than this of its parent's time limit fails at its claim (``time-limit``)."""


def parent_budget_s(session: Session, parent_id: str, now: datetime) -> float | None:
    """What is left of a fanned-out ``auto`` job's time limit (:mod:`service.jobs.fanout`): its
    ``time_limit_s`` less the time since it was claimed.  Its members run at once when there are
    workers enough and one after another when there are not; each gets only what is left, so the
    parent ends within its own limit (plus the kill grace).  ``None`` if the parent is gone."""
    row = session.execute(select(Job.time_limit_s, Job.started_at).where(Job.id == parent_id)).first()
    if row is None or row.started_at is None:
        return None
    started: datetime = row.started_at
    left: float = float(row.time_limit_s) - (now - started).total_seconds()
    return left


def heartbeat(session: Session, job_id: str, owner: str, lease_s: float, child_pid: int | None = None,
              progress: dict[str, Any] | None = None) -> tuple[bool, bool]:
    """Renew the lease (and record progress); returns (still the owner, cancel requested)."""
    values: dict[str, Any] = {"lease_expires_at": utcnow() + timedelta(seconds=lease_s)}
    if child_pid is not None:
        values["child_pid"] = child_pid
    rose = False  # whether this progress brings a larger bound than the one stored (it may stop the others)
    if progress is not None:
        values["progress"] = progress
        bound = progress.get("bound_s")
        if isinstance(bound, int | float):
            stored = session.scalar(select(Job.progress).where(Job.id == job_id)) or {}
            rose = not isinstance(stored.get("bound_s"), int | float) or bound > stored["bound_s"]
    row = session.execute(
        update(Job).where(Job.id == job_id, Job.lease_owner == owner, Job.state == "running").values(**values)
        .returning(Job.cancel_requested, Job.project_id, Job.parent_id).execution_options(synchronize_session=False)
    ).first()
    if row is None:
        return False, False
    if progress is not None:
        add_event(session, (job_id, row[1]), "progress", progress)
    if row[2] is None:
        return True, bool(row[0])
    if rose:  # a member's larger bound: may stop the others (a member ending settles the parent and asks
        # the same, so a parent another transaction holds is skipped rather than waited for)
        parent = session.scalar(select(Job).where(Job.id == row[2]).with_for_update(skip_locked=True))
        if parent is not None and parent.state == "running" and parent.lease_owner == OWNER:
            children = list(session.scalars(select(Job).where(Job.parent_id == parent.id).order_by(Job.id)))
            _stop_on_gap(session, parent, children)
    return True, bool(row[0]) or _parent_stopped(session, row[2])


def _owned(session: Session, job_id: str, owner: str) -> Job | None:
    job = session.scalar(select(Job).where(Job.id == job_id, Job.lease_owner == owner, Job.state == "running")
                         .with_for_update())
    return job


def _finish(session: Session, job: Job, state: str, *, error: dict[str, Any] | None = None) -> None:
    job.state, job.finished_at, job.error = state, utcnow(), error
    job.lease_owner, job.lease_expires_at, job.child_pid = None, None, None
    add_event(session, job, "state", {"status": state, "plan_status": job.plan_status, "error": error})
    if job.parent_id is not None:
        settle_parent(session, job.parent_id)


def settle_parent(session: Session, parent_id: str) -> None:
    """A member of a fanned-out ``auto`` job ended (:mod:`service.jobs.fanout`): record the parent's
    progress, or finish it once every child ended, with the portfolio's choice among their plans."""
    parent = session.scalar(select(Job).where(Job.id == parent_id).with_for_update())
    if parent is None or parent.state != "running" or parent.lease_owner != OWNER:
        return
    session.flush()
    children = list(session.scalars(select(Job).where(Job.parent_id == parent_id).order_by(Job.id)))
    done = [c for c in children if c.state in FINAL_STATES]
    if len(done) < len(children):
        parent.progress = {**(parent.progress or {}), "fraction": len(done) / len(children),
                           "message": f"{len(done)} of {len(children)} portfolio members done"}
        add_event(session, parent, "progress", parent.progress)
        _stop_on_gap(session, parent, children)
        return
    if parent.cancel_requested:
        cancel_running(session, parent_id, OWNER)
        return
    try:
        doc = chosen_plan(session, parent, children)
    except PlacerError as exc:
        fail(session, parent_id, OWNER, {**exc.to_dict(), "status": exc.http_status})
        return
    stopped = (parent.progress or {}).get("stopped")
    if stopped:  # as auto in one process says it (solvers.portfolio)
        doc = {**doc, "stats": {**(doc.get("stats") or {}), "stopped": stopped},
               "notes": [*(doc.get("notes") or []), gap_stop_note(stopped)]}
    succeed(session, parent_id, OWNER, doc)


def _stop_on_gap(session: Session, parent: Job, children: list[Job]) -> None:
    """``auto``'s gap stop for a fanned-out job (:func:`solvers.portfolio.gap_reason`): once the best
    plan of the members that ended is within the parent's ``gap`` of the largest bound (their plans'
    own and those the running members reported in their progress, ``bound_s``), the parent's
    progress keeps why (``stopped``).  Only the parent's row is written here (its lock is held; a
    member's row taken now could deadlock with that member ending): each member still running
    learns it at its next heartbeat, which answers "cancel" (:func:`heartbeat`), and one still
    queued ends cancelled at its claim (:func:`claim`); the choice follows when the last of them
    ends (:func:`settle_parent`)."""
    if parent.cancel_requested or (parent.progress or {}).get("stopped"):
        return
    settings = parent.settings or {}
    if not one_count(parent.objective, settings.get("micro_batches")):
        return
    plans = [session.get(PlanRow, c.plan_id) for c in children if c.state == "succeeded" and c.plan_id]
    docs = [decompress(row.body) for row in plans if row is not None]
    bounds = [b for c in children if c.state in ACTIVE_STATES for b in [reported_bound_s(c)] if b is not None]
    reason = gap_reason(docs, bounds, AutoOptions.model_validate(parent.options or {}).gap)
    if reason is None:
        return
    parent.progress = {**(parent.progress or {}), "stopped": reason}
    add_event(session, parent, "progress", parent.progress)


def _parent_stopped(session: Session, parent_id: str) -> bool:
    """Whether a fanned-out ``auto`` job's gap stop has fired (:func:`_stop_on_gap`), read without a lock."""
    progress = session.scalar(select(Job.progress).where(Job.id == parent_id))
    return bool((progress or {}).get("stopped"))


def succeed(session: Session, job_id: str, owner: str, plan_doc: dict[str, Any]) -> bool:
    """Store the plan and mark the job succeeded, if ``owner`` still holds it."""
    job = _owned(session, job_id, owner)
    if job is None:
        return False
    metrics = plan_doc.get("metrics") or {}
    plan = PlanRow(id=new_id("plan"), project_id=job.project_id, job_id=job.id, cache_key=job.cache_key,
                   solver=str(plan_doc.get("solver", job.solver)), status=str(plan_doc.get("status", "unknown")),
                   objective=job.objective, objective_s=_scalar(metrics.get("objective_s")),
                   iteration_s=_scalar(metrics.get("iteration_s")), latency_s=_scalar(metrics.get("latency_s")),
                   throughput_samples_per_s=_scalar(metrics.get("throughput_samples_per_s")),
                   lower_bound_s=_scalar(plan_doc.get("lower_bound_s", metrics.get("lower_bound_s"))),
                   efficiency=_scalar(metrics.get("efficiency")),
                   peak_memory_bytes=_scalar(metrics.get("peak_memory_bytes")),
                   solve_time_s=_scalar(plan_doc.get("solve_time_s")), warnings=plan_doc.get("warnings") or None,
                   body=compress(plan_doc))
    session.add(plan)
    session.flush()
    job.plan_id, job.plan_status, job.warnings = plan.id, plan.status, plan.warnings
    job.progress = {**(job.progress or {}), "fraction": 1.0, "incumbent_s": plan.objective_s}
    _finish(session, job, "succeeded")
    return True


def fail(session: Session, job_id: str, owner: str, error: dict[str, Any]) -> bool:
    job = _owned(session, job_id, owner)
    if job is None:
        return False
    _finish(session, job, "failed", error=error)
    return True


def cancel_running(session: Session, job_id: str, owner: str) -> bool:
    job = _owned(session, job_id, owner)
    if job is None:
        return False
    _finish(session, job, "cancelled")
    return True


def retry_or_fail(session: Session, job_id: str, owner: str, reason: str, max_attempts: int) -> str | None:
    """After a lost solver process: requeue (``"queued"``) or fail once attempts are used up."""
    job = _owned(session, job_id, owner)
    if job is None:
        return None
    return _retry_or_fail(session, job, reason, max_attempts)


def _retry_or_fail(session: Session, job: Job, reason: str, max_attempts: int) -> str:
    if job.cancel_requested:
        _finish(session, job, "cancelled")
        return "cancelled"
    if job.attempts >= max_attempts:
        _finish(session, job, "failed", error={
            "type": "worker-lost", "title": "Job failed after repeated worker loss",
            "detail": f"{reason}; gave up after {job.attempts} attempt(s) (max_attempts={max_attempts})"})
        return "failed"
    job.state, job.lease_owner, job.lease_expires_at, job.child_pid = "queued", None, None, None
    add_event(session, job, "state", {"status": "queued", "reason": reason, "attempts": job.attempts})
    return "queued"


def release(session: Session, job_id: str, owner: str) -> bool:
    """Give a running job back to the queue without counting the attempt (clean shutdown)."""
    job = _owned(session, job_id, owner)
    if job is None:
        return False
    job.state, job.lease_owner, job.lease_expires_at, job.child_pid = "queued", None, None, None
    job.attempts = max(0, job.attempts - 1)
    add_event(session, job, "state", {"status": "queued", "reason": "the server shut down; requeued"})
    return True


def reap(session: Session, max_attempts: int) -> list[str]:
    """Requeue (or fail) running jobs whose lease expired; returns the requeued ids.

    The same pass deletes expired ``Idempotency-Key`` claims (a server killed while creating a
    resource leaves its claim; the next request with the key would take it over, but a key never
    retried would keep its row for ever).
    """
    now = utcnow()
    session.execute(delete(IdempotencyReservation).where(IdempotencyReservation.reserved_until < now))
    expired = list(session.scalars(
        select(Job).where(Job.state == "running", Job.lease_expires_at < now).limit(1000).with_for_update()))
    requeued = []
    for job in expired:
        reason = f"the lease of worker {job.lease_owner!r} expired (worker lost)"
        if _retry_or_fail(session, job, reason, max_attempts) == "queued":
            requeued.append(job.id)
    return requeued


def queued_ids(session: Session, limit: int = 1000) -> list[str]:
    """Queued jobs, oldest first (used to re-dispatch after a restart)."""
    return list(session.scalars(select(Job.id).where(Job.state == "queued").order_by(Job.id).limit(limit)))


def request_cancel(session: Session, job: Job) -> None:
    """Cancel a queued job now; ask the worker of a running job to stop it."""
    if job.state == "queued":
        won = session.execute(
            update(Job).where(Job.id == job.id, Job.state == "queued")
            .values(state="cancelled", finished_at=utcnow(), cancel_requested=True)
            .returning(Job.id).execution_options(synchronize_session=False)).first()
        if won is not None:
            add_event(session, job, "state", {"status": "cancelled"})
            session.refresh(job)
            if job.parent_id is not None:
                settle_parent(session, job.parent_id)
            return
        session.refresh(job)
    if job.state in ACTIVE_STATES:
        job.cancel_requested = True
        add_event(session, job, "state", {"status": job.state, "cancel_requested": True})
        children = list(session.scalars(select(Job).where(Job.parent_id == job.id, Job.state.in_(ACTIVE_STATES))))
        for child in children:  # a fanned-out auto job: its members stop, then it ends cancelled
            request_cancel(session, child)


def _scalar(value: Any) -> float | None:
    """A finite float from a metric (the maximum of a per-device list or mapping)."""
    if isinstance(value, dict):
        value = max(value.values(), default=None)
    elif isinstance(value, list | tuple):
        value = max(value, default=None)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
