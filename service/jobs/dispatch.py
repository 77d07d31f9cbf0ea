"""Getting job ids to runners.  ``Dispatcher`` is the interface; ``LocalPool`` the embedded one.

The API commits a job and only then hands its id to ``dispatch``; a dispatcher may lose or
repeat ids safely, because the claim in the jobs table decides who runs a job and the
reaper re-dispatches queued jobs nobody holds.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Protocol

from service.config import ServiceConfig
from service.db.engine import Database
from service.jobs import store
from service.jobs.runner import JobRunner, warm_up

log = logging.getLogger("placer.jobs")


class Dispatcher(Protocol):
    """Where committed job ids go."""

    workers: int

    def start(self) -> None: ...

    def dispatch(self, job_id: str) -> None: ...

    def stop(self) -> None: ...


def make_dispatcher(db: Database, config: ServiceConfig,
                    on_finish: Callable[[str, float], None] | None = None) -> Dispatcher:
    """The dispatcher ``PLACER_DISPATCH`` names: the embedded pool, or Celery workers via the broker."""
    if config.dispatch == "celery":
        from service.jobs.celery_dispatch import CeleryDispatcher

        return CeleryDispatcher(db, config)
    return LocalPool(db, config, on_finish=on_finish)


class LocalPool:
    """The embedded dispatcher: ``workers`` threads, each supervising one solver child process.

    A reaper thread requeues expired leases and re-dispatches queued jobs (e.g. after a
    restart).  With ``workers=0`` nothing runs here: jobs wait for another worker.
    """

    def __init__(self, db: Database, config: ServiceConfig,
                 on_finish: Callable[[str, float], None] | None = None) -> None:
        self.db = db
        self.config = config
        self.workers = config.workers
        self.runner = JobRunner(db, config, on_finish=on_finish)
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    def start(self) -> None:
        if self.workers == 0:
            return
        warm_up()
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"placer-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        reaper = threading.Thread(target=self._reap_loop, name="placer-reaper", daemon=True)
        reaper.start()
        self._threads.append(reaper)

    def dispatch(self, job_id: str) -> None:
        if self.workers == 0 or self._stop.is_set():
            return
        with self._lock:
            if job_id in self._pending:
                return
            self._pending.add(job_id)
        self._queue.put(job_id)

    def stop(self) -> None:
        """Stop taking work; running jobs are released to the queue for the next server."""
        self._stop.set()
        self.runner.stopping.set()
        for _ in range(self.workers):
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=15)
        self._threads.clear()

    def _work(self) -> None:
        while not self._stop.is_set():
            job_id = self._queue.get()
            if job_id is None:
                return
            with self._lock:
                self._pending.discard(job_id)
            try:
                if self.runner.run(job_id) == "queued":
                    self.dispatch(job_id)
            except Exception:  # the job stays leased; the reaper requeues it
                log.exception("worker error on job %s", job_id)

    def reap_once(self) -> None:
        """One reaper pass: requeue expired leases, then dispatch every queued job."""
        with self.db.session() as s:
            store.reap(s, self.config.max_attempts)
        with self.db.session(read_only=True) as s:
            ids = store.queued_ids(s)
        for job_id in ids:
            self.dispatch(job_id)

    def _reap_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.reap_once()
            except Exception:
                log.exception("reaper pass failed")
            self._stop.wait(self.config.reaper_interval_s)
