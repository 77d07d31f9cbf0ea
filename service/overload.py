"""Admission control, request deadlines and body read deadlines (docs/operations.md, "Overload").

Every request except ``/healthz``, ``/readyz`` and ``/metrics`` belongs to one *route class*:

- ``reads``: ``GET``/``HEAD`` of one resource (``/v1/jobs/{id}``, a plan, a graph, dashboard pages);
- ``lists``: ``GET`` of a collection (``/v1/jobs``, ``/v1/graphs``, ``/v1/topologies``, ...);
- ``writes``: every other method (uploads, submissions, cancellations, deletions);
- ``streams``: Server-Sent Events (``.../events``), which hold their slot while they stream.

A class admits at most ``limit`` requests at once and lets at most ``queue`` more wait, each for at
most ``wait_s``.  A request beyond that is answered at once with 503 ``overloaded`` and
``Retry-After``: the server never takes more work than its database pool can serve, so nothing
waits for a pooled connection long enough to fail with 500 (the pool's timeout is below the
request deadline, :class:`~service.config.ServiceConfig`).  A request leaving the queue whose
client has disconnected meanwhile is dropped before it touches the database.

An admitted request has ``deadline_s`` from its arrival to start its answer; past it, it is
answered 503 ``deadline-exceeded`` with ``Retry-After`` and its handler is cancelled (work in a
thread ends at its next return to the event loop).  A request body that stops arriving for
``body_timeout_s`` is answered 408 ``request-timeout`` and the connection is closed; headers that
do not arrive in time are answered by :mod:`service.protocol`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import PROBLEM_JSON, RetryLater, problem_body
from solvers.model.errors import PlacerError

log = logging.getLogger("placer.service")

EXEMPT_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""Never queued, never refused: probes and scrapes must answer while the server is saturated."""

OVERLOAD_RETRY_AFTER_S = 1.0
"""``Retry-After`` of a 503 ``overloaded`` or ``deadline-exceeded``: queues here drain in about a second."""


class Overloaded(RetryLater):
    """503: the route class's requests in flight and its queue are full (or the wait ran out)."""

    type_slug = "overloaded"
    title = "Server overloaded"
    http_status = 503


class DeadlineExceeded(RetryLater):
    """503: the request could not be answered within the request deadline."""

    type_slug = "deadline-exceeded"
    title = "Request deadline exceeded"
    http_status = 503


class RequestTimeout(PlacerError):
    """408: the client stopped sending its request body (or headers); the connection is closed."""

    type_slug = "request-timeout"
    title = "Request timeout"
    http_status = 408


@dataclass
class Gate:
    """A bounded number of requests in flight plus a bounded FIFO queue of waiters."""

    name: str
    limit: int
    queue: int
    wait_s: float
    in_flight: int = 0
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)
    refused: int = 0  # answered 503 overloaded
    dropped: int = 0  # left the queue to find their client gone
    late: int = 0  # answered 503 deadline-exceeded

    async def enter(self) -> None:
        """Take a slot, waiting in the queue if there is room there; :class:`Overloaded` otherwise."""
        if self.in_flight < self.limit and not self.waiters:
            self.in_flight += 1
            return
        if len(self.waiters) >= self.queue or self.wait_s <= 0:
            self.refused += 1
            raise Overloaded(f"the server is at its limit of {self.limit} {self.name} in flight and "
                             f"{self.queue} waiting; retry after Retry-After",
                             retry_after_s=OVERLOAD_RETRY_AFTER_S)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout=self.wait_s)
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self.leave()  # the slot was handed over just as the wait ended: pass it on
            else:
                waiter.cancel()
                self._drop(waiter)
            if not isinstance(exc, TimeoutError):
                raise
            self.refused += 1
            raise Overloaded(f"no {self.name} slot became free within {self.wait_s:g} s; retry after Retry-After",
                             retry_after_s=OVERLOAD_RETRY_AFTER_S) from None

    def leave(self) -> None:
        """Give the slot to the oldest waiter, or free it."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes on: in_flight is unchanged
                return
        self.in_flight -= 1

    def _drop(self, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self.waiters.remove(waiter)


def route_class(scope: Scope) -> str | None:
    """The route class of a request (module docstring); ``None`` for the exempt paths."""
    path: str = scope.get("path", "")
    if path in EXEMPT_PATHS:
        return None
    method = scope.get("method", "GET")
    if method not in ("GET", "HEAD"):
        return "writes"
    if path.endswith("/events") or path.endswith("/live"):
        return "streams"
    if path.startswith("/v1/"):
        parts = path[4:].strip("/").split("/")
        return "lists" if len(parts) == 1 and ":" not in parts[0] else "reads"
    return "reads"


async def client_gone(receive: Receive, pending: list[Message]) -> bool:
    """Whether the client disconnected, without waiting: a message that has already arrived is
    read (under a cancelled scope, as Starlette's ``Request.is_disconnected`` does) and kept in
    ``pending`` for the application."""
    if pending:
        return bool(pending[0]["type"] == "http.disconnect")
    message: Message = {}
    with anyio.CancelScope() as cancelled:
        cancelled.cancel()
        message = await receive()
    if message:
        pending.append(message)
    return bool(message.get("type") == "http.disconnect")


class AdmissionMiddleware:
    """Admission per route class, the request deadline and the body read deadline (module docstring)."""

    def __init__(self, app: ASGIApp, gates: dict[str, Gate], deadline_s: float, body_timeout_s: float) -> None:
        self.app = app
        self.gates = gates
        self.deadline_s = deadline_s
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (name := route_class(scope)) is None:
            await self.app(scope, receive, send)
            return
        arrived = time.monotonic()
        gate = self.gates[name]
        try:
            await gate.enter()
        except Overloaded as exc:
            await _send_problem(send, exc, scope)
            return
        task: asyncio.Task[None] | None = None
        try:
            pending: list[Message] = []
            if await client_gone(receive, pending):
                gate.dropped += 1
                return  # nobody to answer: no work for it
            task = await self._serve(scope, receive, send, pending, arrived, gate)
        finally:
            if task is None or task.done():
                gate.leave()
            else:  # the handler was cancelled but is still unwinding (a thread finishing): keep the slot
                task.add_done_callback(lambda _t: gate.leave())

    async def _serve(self, scope: Scope, receive: Receive, send: Send, pending: list[Message], arrived: float,
                     gate: Gate) -> asyncio.Task[None]:
        state = {"started": False, "answered": False, "timed_out": False, "body_done": False}
        body_timeout_s = self.body_timeout_s

        def seen(message: Message) -> Message:
            if message["type"] != "http.request" or not message.get("more_body", False):
                state["body_done"] = True
            return message

        async def guarded_receive() -> Message:
            if pending:
                return seen(pending.pop(0))
            if state["answered"]:
                return {"type": "http.disconnect"}
            if state["body_done"]:  # waiting for a disconnect (a streamed answer), not for the client's bytes
                return await receive()
            try:
                return seen(await asyncio.wait_for(receive(), timeout=body_timeout_s))
            except TimeoutError:
                state["timed_out"] = True
                raise RequestTimeout(f"body: no part of the request body arrived for {body_timeout_s:g} s",
                                     field="body") from None

        async def guarded_send(message: Message) -> None:
            if state["answered"]:
                return  # answered already (deadline): the late handler's answer goes nowhere
            if message["type"] == "http.response.start":
                state["started"] = True
                headers = list(message.get("headers", []))
                if state["timed_out"] and not any(name.lower() == b"connection" for name, _ in headers):
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        task = asyncio.ensure_future(self.app(scope, guarded_receive, guarded_send))
        remaining = self.deadline_s - (time.monotonic() - arrived)
        try:
            done, _ = await asyncio.wait({task}, timeout=max(0.0, remaining))
        except asyncio.CancelledError:  # the server is shutting down: the handler goes too
            task.cancel()
            raise
        if done:
            exc = task.exception()
            if isinstance(exc, RequestTimeout) and not state["started"]:
                state["answered"] = True
                await _send_problem(send, exc, scope, close=True)
                return task
            if exc is not None:
                raise exc
            return task
        if state["started"]:  # streaming its answer: it is on its way
            try:
                await task
            except asyncio.CancelledError:
                task.cancel()
                raise
            return task
        task.cancel()
        state["answered"] = True
        gate.late += 1
        log.warning("deadline of %g s exceeded on %s %s (%s)", self.deadline_s, scope.get("method"),
                    scope.get("path"), gate.name)
        err = DeadlineExceeded(f"the request could not be answered within the deadline of {self.deadline_s:g} s; "
                               "retry after Retry-After", retry_after_s=OVERLOAD_RETRY_AFTER_S)
        await _send_problem(send, err, scope)
        return task


async def _send_problem(send: Send, exc: PlacerError, scope: Scope, close: bool = False) -> None:
    status = int(getattr(exc, "http_status", 500))
    body = problem_body(status, exc.type_slug, exc.title, exc.message, scope.get("path"), field=exc.field)
    data = json.dumps(body).encode()
    headers = [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(data)).encode())]
    if isinstance(exc, RetryLater):
        headers.append((b"retry-after", exc.retry_after.encode()))
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
