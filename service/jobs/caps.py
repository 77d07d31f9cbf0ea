"""Per-project caps on queued jobs: a project that already has ``PLACER_PROJECT_MAX_QUEUED``
jobs waiting gets 429 with ``Retry-After`` instead of a new job.

The cap on *running* jobs is enforced where jobs start, in the claim
(:func:`service.jobs.store.claim`): a job over its project's cap stays queued.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.config import ServiceConfig
from service.db.models import Job
from service.errors import RateLimited


def check_queued_cap(session: Session, config: ServiceConfig, project_id: str, new_jobs: int = 1) -> None:
    """Refuse ``new_jobs`` more jobs if they would take the project past its cap of queued jobs."""
    cap = config.project_max_queued
    if cap == 0:
        return
    queued = session.scalar(select(func.count()).select_from(Job)
                            .where(Job.project_id == project_id, Job.state == "queued")) or 0
    if queued + new_jobs > cap:
        raise RateLimited(f"the project has {queued} queued job(s); at most {cap} may wait at once "
                          f"(PLACER_PROJECT_MAX_QUEUED); retry when some have started",
                          retry_after_s=max(1.0, config.reaper_interval_s))
