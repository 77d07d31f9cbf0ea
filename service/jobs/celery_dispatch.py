"""``CeleryDispatcher``: the API sends committed job ids to Celery workers through Redis.

It also runs the reaper (in the API process and in every ``placer worker``): expired leases
are requeued in the jobs table and sent again, and queued jobs whose ids may have been lost in
transit (a Redis restart without persistence, an API that died between its commit and its send)
are sent again: all of them at once when the broker queue is empty, and otherwise, since a busy
queue is never empty, each queued job again every ``stranded_resend_s`` seconds.  Duplicates are
harmless: only one claim of a queued job succeeds, and a task whose job is claimed or finished
does nothing.
"""

from __future__ import annotations

import logging
import threading
import time

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
        self._sent_at: dict[str, float] = {}  # queued job id -> when this reaper last saw it sent

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
        now = time.monotonic()
        sent = sum(self._send(job_id, now) for job_id in requeued)
        with self.db.session(read_only=True) as s:
            queued = [i for i in store.queued_ids(s) if i not in requeued]
        if self.sender.waiting() == 0:
            stranded = queued
        else:  # the queue is busy: what waited a full interval since it was last sent is sent again
            for job_id in queued:
                self._sent_at.setdefault(job_id, now)  # first seen: its submitter sent it
            stranded = [i for i in queued if now - self._sent_at[i] >= self.config.stranded_resend_s]
        sent += sum(self._send(job_id, now) for job_id in stranded)
        still = set(queued) | set(requeued)
        self._sent_at = {i: t for i, t in self._sent_at.items() if i in still}
        return sent

    def _send(self, job_id: str, now: float) -> bool:
        self._sent_at[job_id] = now
        return self.sender.send(job_id)

    def _reap_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.reap_once()
            except Exception:
                log.exception("reaper pass failed")
            self._stop.wait(self.config.reaper_interval_s)
