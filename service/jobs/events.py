"""Server-Sent Events for a job, read from the ``job_events`` table (any worker may write it)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi.responses import StreamingResponse
from sqlalchemy import select

from service.db.engine import Database
from service.db.models import FINAL_STATES, Job, JobEvent

POLL_S = 0.2
KEEPALIVE_S = 15.0
MAX_SEQ = 2**31 - 1  # ``job_events.seq`` is a 32-bit INTEGER on PostgreSQL


def _fetch(db: Database, job_id: str, after: int) -> tuple[list[tuple[int, str, Any]], str | None]:
    # the state first: the events committed together with a final state are then visible too
    with db.session(read_only=True) as s:
        state = s.scalar(select(Job.state).where(Job.id == job_id))
        rows = s.execute(select(JobEvent.seq, JobEvent.kind, JobEvent.data)
                         .where(JobEvent.job_id == job_id, JobEvent.seq > after)
                         .order_by(JobEvent.seq).limit(500)).all()
    return list(rows), state


async def _events(db: Database, job_id: str, after: int) -> AsyncIterator[str]:
    last_sent = time.monotonic()
    yield "retry: 1000\n\n"
    while True:
        rows, state = await anyio.to_thread.run_sync(_fetch, db, job_id, after)
        for seq, kind, data in rows:
            after = seq
            yield f"id: {seq}\nevent: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"
            last_sent = time.monotonic()
        if state is None or (state in FINAL_STATES and len(rows) < 500):
            yield f"event: end\ndata: {json.dumps({'status': state})}\n\n"
            return
        if time.monotonic() - last_sent > KEEPALIVE_S:
            yield ": keep-alive\n\n"
            last_sent = time.monotonic()
        await anyio.sleep(POLL_S)


def event_stream(db: Database, job_id: str, after: int) -> StreamingResponse:
    """The job's events after event id ``after`` (a larger id than any column value means none)."""
    return StreamingResponse(_events(db, job_id, min(after, MAX_SEQ)), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
