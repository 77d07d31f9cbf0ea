"""The Celery application shared by the API (which sends job ids) and ``placer worker`` (which runs them).

Redis is the broker; the jobs table stays the source of truth (docs/service.md).  Delivery is at
least once and execution once: a task is acknowledged only after it ran (``acks_late``), is
given back when its worker dies (``reject_on_worker_lost``), and the broker delivers an
unacknowledged task again only after a visibility timeout longer than any job can run
(:attr:`ServiceConfig.visibility_timeout_s`).  A task whose job is already claimed or finished
does nothing, because the claim is a conditional UPDATE (:func:`service.jobs.store.claim`).
"""

from __future__ import annotations

import logging

from celery import Celery

from service.config import ServiceConfig

log = logging.getLogger("placer.jobs")
RUN_JOB = "placer.run_job"


def make_celery(config: ServiceConfig) -> Celery:
    """A Celery app for ``config.broker_url``; messages carry only a job id (JSON)."""
    app = Celery("placer", broker=config.broker_url, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        task_ignore_result=True,
        task_default_queue=config.queue,
        task_serializer="json",
        accept_content=["json"],
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        broker_transport_options={"visibility_timeout": config.visibility_timeout_s,
                                  "socket_connect_timeout": 2.0, "socket_timeout": 5.0},
        task_publish_retry_policy={"max_retries": 2, "interval_start": 0.1, "interval_step": 0.2,
                                   "interval_max": 0.5},
    )
    return app


class Sender:
    """Sends job ids to the broker queue; a failed send is logged, never raised: the job row is
    committed already, and the reaper sends it again (:class:`CeleryDispatcher`)."""

    def __init__(self, app: Celery, queue: str) -> None:
        self.app = app
        self.queue = queue

    def send(self, job_id: str, countdown_s: float | None = None) -> bool:
        try:
            self.app.send_task(RUN_JOB, args=[job_id], queue=self.queue, countdown=countdown_s)
        except Exception as exc:  # broker down: the reaper re-sends queued jobs
            log.warning("could not send job %s to the broker (%s); the reaper will send it again", job_id, exc)
            return False
        return True

    def waiting(self) -> int | None:
        """Messages waiting in the queue (not yet delivered to a worker); ``None`` if the broker is down."""
        try:
            with self.app.connection_for_write() as conn:
                declared = conn.default_channel.queue_declare(self.queue, passive=True)
                return int(declared.message_count)
        except Exception as exc:
            if "NOT_FOUND" in str(exc) or "no queue" in str(exc).lower():
                return 0
            log.warning("could not read the broker queue %r (%s)", self.queue, exc)
            return None
