"""``CeleryDispatcher``: the API sends committed job ids to Celery workers through Redis.

It also runs the reaper (in the API process and in every ``placer worker``): expired leases
are requeued in the jobs table and sent again, and when the broker queue is empty while the
table still holds queued jobs — ids lost in transit, e.g. a Redis restart without persistence
or an API that died between its commit and its send — those are sent again.  Duplicates are
harmless: only one claim of a queued job succeeds.
"""

from __future__ import annotations

import logging
import threading

from service.config import ServiceConfig
from service.db.engine import Database
from service.jobs import store
from service.jobs.celery_app import Sender, make_celery

log = logging.getLogger("placer.jobs")


class CeleryDispatcher:
    """The dispatcher for ``PLACER_DISPATCH=celery``: no solver runs in this process."""

    workers = 0

    def __init__(self, db: Database, config: ServiceConfig, sender: Sender | None = None) -> None:
        self.db = db
        self.config = config
        self.sender = sender or Sender(make_celery(config), config.queue)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._reap_loop, name="placer-reaper", daemon=True)
        self._thread.start()

    def dispatch(self, job_id: str) -> None:
        self.sender.send(job_id)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None

    def reap_once(self) -> int:
        """One pass; returns how many ids were sent."""
        with self.db.session() as s:
            requeued = store.reap(s, self.config.max_attempts)
        sent = sum(self.sender.send(job_id) for job_id in requeued)
        if self.sender.waiting() == 0:
            with self.db.session(read_only=True) as s:
                stranded = [i for i in store.queued_ids(s) if i not in requeued]
            sent += sum(self.sender.send(job_id) for job_id in stranded)
        return sent

    def _reap_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.reap_once()
            except Exception:
                log.exception("reaper pass failed")
            self._stop.wait(self.config.reaper_interval_s)
