"""Waiting for jobs, shared by the sync and async clients: the event stream's bookkeeping
(resume after the last event id), events made from polled job states, timeouts and errors."""

from __future__ import annotations

import time
from typing import Protocol

import httpx

from client._calls import EventParser
from client.errors import (
    LauncherUnavailable,
    NotFound,
    PlacerConnectionError,
    RateLimited,
    ServerError,
    WaitTimeout,
)
from client.models import Job, JobEvent

MAX_POLL_S = 2.0
STREAM_READ_S = 45.0  # the server sends a keep-alive comment every 15 s
TRANSIENT = (httpx.TransportError, PlacerConnectionError, ServerError, RateLimited)
"""Failures after which a wait reopens the stream or falls back to polling."""


class HasId(Protocol):
    @property
    def id(self) -> str: ...


Ref = str | HasId
"""An id, or a result that has one (``GraphInfo``, ``Job``, ``Comparison`` ...)."""


def ref_id(ref: Ref) -> str:
    return ref if isinstance(ref, str) else ref.id


class EventFollower:
    """One reading of a job's event stream, and the polling that stands in for it."""

    def __init__(self, job_id: str, after: int | None) -> None:
        self.job_id = job_id
        self.path = f"/v1/jobs/{job_id}/events"
        self.parser = EventParser()
        self.parser.last_id = after
        self.ended = False
        self._seen: tuple[str, object] | None = None
        self._polls = 0

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        if self.parser.last_id is not None:
            headers["Last-Event-ID"] = str(self.parser.last_id)
        return headers

    def read_s(self, timeout_s: float, deadline: float | None) -> float:
        """How long one read of the stream may block: until the deadline, or past a keep-alive."""
        longest = max(timeout_s, STREAM_READ_S)
        if deadline is None:
            return longest
        return max(0.01, min(longest, deadline - time.monotonic()))

    def feed(self, line: str) -> JobEvent | None:
        event = self.parser.feed(line)
        if event is not None and event.event == "end":
            self.ended = True
        return event

    def changes(self, job: Job) -> list[JobEvent]:
        """Polling's stand-in for the stream: a ``state`` event when the status changed, a
        ``progress`` event when the progress did."""
        out: list[JobEvent] = []
        progress = job.progress.model_dump() if job.progress is not None else None
        previous = self._seen
        self._seen = (job.status, progress)
        if previous is None or previous[0] != job.status:
            data: dict[str, object] = {"status": job.status}
            if job.done:
                data.update(plan_status=job.plan_status, error=job.error.model_dump() if job.error else None)
            out.append(JobEvent(id=None, event="state", data=data))
        if progress is not None and (previous is None or previous[1] != progress):
            out.append(JobEvent(id=None, event="progress", data=progress))
        return out

    def poll_delay_s(self, interval_s: float, deadline: float | None) -> float:
        """Polls start at ``interval_s`` and slow down to ``MAX_POLL_S``; never past the deadline."""
        self._polls += 1
        delay = min(MAX_POLL_S, interval_s * 1.25 ** min(self._polls, 20))
        if deadline is not None:
            delay = min(delay, max(0.0, deadline - time.monotonic()))
        return delay


def wait_timeout(what: str, resource_id: str, status: str | None, timeout_s: float | None) -> WaitTimeout:
    return WaitTimeout(f"{what} {resource_id} is still {status} after waiting {timeout_s:g} s", resource_id, status)


def launcher_error(exc: NotFound, plan_id: str) -> NotFound:
    """A missing plan stays :class:`NotFound`; a missing route becomes :class:`LauncherUnavailable`."""
    if exc.ref == plan_id:
        return exc
    problem = {**exc.problem, "detail": f"this server does not offer launcher bundles "
               f"(GET /v1/plans/{plan_id}/launcher: {exc.detail})"}
    return LauncherUnavailable(exc.status, problem, exc.headers)
