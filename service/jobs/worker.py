"""``placer worker``: a Celery worker that runs solver jobs through :class:`JobRunner`.

The worker's pool is threads: each thread supervises one solver child process (forkserver,
killed at the hard time limit), exactly as in the API's embedded pool, so a job runs the same
way wherever it runs.  A warm shutdown (SIGTERM) stops the running solvers and puts their jobs
back in the queue without counting the attempt; a killed worker (SIGKILL) loses its leases,
and the reaper requeues those jobs once the leases expire.
"""

from __future__ import annotations

import logging
import os

from celery import Celery
from celery.signals import worker_shutting_down
from sqlalchemy import select

from service.config import ServiceConfig
from service.db.engine import Database
from service.db.models import Job
from service.jobs import fanout
from service.jobs.celery_app import RUN_JOB, Sender, make_celery
from service.jobs.celery_dispatch import CeleryDispatcher
from service.jobs.runner import JobRunner, Outcome, warm_up
from solvers.portfolio import AutoSolver

log = logging.getLogger("placer.jobs")


def register_task(app: Celery, runner: JobRunner, sender: Sender, retry_s: float) -> None:
    """Bind ``placer.run_job`` to ``runner``.

    An ``auto`` job is not run in one process: it is expanded into one job per portfolio member
    (:mod:`service.jobs.fanout`), which are sent to the queue like any other job.

    A job given back to the queue (its solver process died and attempts remain, or this worker is
    shutting down) is sent again.  A job still queued after a refused claim (its project is at its
    cap of running jobs) is sent again after ``retry_s``; a job claimed or finished elsewhere is done.
    """

    @app.task(name=RUN_JOB, acks_late=True, reject_on_worker_lost=True, ignore_result=True)  # type: ignore[untyped-decorator]
    def run_job(job_id: str) -> str:
        if _solver_of(runner.db, job_id) == AutoSolver.name:
            with runner.db.session() as s:
                children = fanout.expand(s, job_id, runner.owner, runner.config.lease_s,
                                         runner.config.project_max_running)
            for child_id in children or ():  # after the commit: ids of committed rows only
                sender.send(child_id)
            if children is not None:
                return "expanded"
            outcome: Outcome = "not-claimed"
        else:
            outcome = runner.run(job_id)
        if outcome in ("queued", "released"):
            sender.send(job_id)
        elif outcome == "not-claimed" and _still_queued(runner.db, job_id):
            sender.send(job_id, countdown_s=retry_s)
        return outcome


def _solver_of(db: Database, job_id: str) -> str | None:
    with db.session(read_only=True) as s:
        return s.scalar(select(Job.solver).where(Job.id == job_id, Job.state == "queued"))


def _still_queued(db: Database, job_id: str) -> bool:
    with db.session(read_only=True) as s:
        return s.scalar(select(Job.state).where(Job.id == job_id)) == "queued"


def run_worker(config: ServiceConfig, concurrency: int, queues: list[str], loglevel: str = "INFO") -> int:
    """Run a worker until it is stopped; the reaper runs here too, so workers need no API server."""
    app = make_celery(config)
    db = Database(config.database_url)
    runner = JobRunner(db, config)
    sender = Sender(app, config.queue)
    register_task(app, runner, sender, config.reaper_interval_s)
    reaper = CeleryDispatcher(db, config, sender)

    def stop_solvers(**_: object) -> None:
        runner.stopping.set()

    worker_shutting_down.connect(stop_solvers, weak=False)
    warm_up()
    reaper.start()
    argv = ["worker", "--pool=threads", f"--concurrency={concurrency}", f"--queues={','.join(queues)}",
            f"--loglevel={loglevel}", "--without-gossip", "--without-mingle", "--without-heartbeat",
            f"--hostname=placer-{os.getpid()}@%h"]
    try:
        app.worker_main(argv)
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) or exc.code is None else 1
    finally:
        reaper.stop()
        db.dispose()
    return 0
