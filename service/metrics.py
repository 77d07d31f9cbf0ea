"""Prometheus metrics: jobs by state (read from the table at scrape time), job durations,
request latencies.  Each app has its own registry."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.db.engine import Database
from service.db.models import JOB_STATES, Job

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
JOB_BUCKETS_S = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class _JobStates(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily("placer_jobs", "Jobs by state (all projects)", labels=["state"])
        with self.db.session(read_only=True) as s:
            counts = dict(s.execute(select(Job.state, func.count()).group_by(Job.state)).all())
        for state in JOB_STATES:
            gauge.add_metric([state], counts.get(state, 0))
        yield gauge


class _Admission(Collector):
    """The admission gates of :mod:`service.overload`, read at scrape time."""

    def __init__(self, gates: dict[str, Any]) -> None:
        self.gates = gates

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        families: list[GaugeMetricFamily | CounterMetricFamily] = [
            GaugeMetricFamily("placer_admission_in_flight", "Requests admitted and not yet ended, by route class",
                              labels=["route_class"]),
            GaugeMetricFamily("placer_admission_waiting", "Requests waiting for a slot, by route class",
                              labels=["route_class"]),
            CounterMetricFamily("placer_admission_refused", "Requests answered 503 overloaded",
                                labels=["route_class"]),
            CounterMetricFamily("placer_admission_dropped", "Queued requests dropped because their client had gone",
                                labels=["route_class"]),
            CounterMetricFamily("placer_deadline_exceeded", "Requests answered 503 deadline-exceeded",
                                labels=["route_class"])]
        for name, gate in self.gates.items():
            for family, value in zip(families, (gate.in_flight, len(gate.waiters), gate.refused, gate.dropped,
                                                gate.late), strict=True):
                family.add_metric([name], value)
        yield from families


class Metrics:
    """The registry and the instruments of one app."""

    def __init__(self, db: Database) -> None:
        self.registry = CollectorRegistry()
        self.requests = Histogram("placer_http_request_duration_seconds", "HTTP request latency",
                                  ["method", "route", "status"], buckets=LATENCY_BUCKETS_S, registry=self.registry)
        self.jobs = Histogram("placer_job_duration_seconds", "Wall-clock time of finished jobs (claim to finish)",
                              ["state"], buckets=JOB_BUCKETS_S, registry=self.registry)
        self.registry.register(_JobStates(db))

    def watch_admission(self, gates: dict[str, Any]) -> None:
        """Export the admission gates' state (``placer_admission_*``, ``placer_deadline_exceeded``)."""
        self.registry.register(_Admission(gates))

    def job_finished(self, state: str, duration_s: float) -> None:
        self.jobs.labels(state).observe(duration_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestMetricsMiddleware:
    """Times every HTTP request, labelled by its route template (not the raw path)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route: Any = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.labels(scope["method"], path, str(status[0])).observe(time.perf_counter() - started)
