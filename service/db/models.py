"""SQLAlchemy 2 models.  Every row carries its ``project_id``; queries filter on it.

Documents (graphs, topologies, plans) are stored gzip-compressed in ``body``; the figures a
user sorts or filters by (sizes, plan metrics) are columns of their own.
Ids are ``<prefix>_<time><random>`` strings that sort by creation time (cursor pagination).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JOB_STATES = ("queued", "running", "succeeded", "failed", "cancelled")
ACTIVE_STATES = ("queued", "running")
FINAL_STATES = ("succeeded", "failed", "cancelled")


def new_id(prefix: str) -> str:
    """A unique id that sorts by creation time: prefix, 13 hex digits of µs, 10 random hex."""
    return f"{prefix}_{int(time.time() * 1e6):013x}{os.urandom(5).hex()}"


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored as naive UTC (SQLite and PostgreSQL alike), read back as aware UTC."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON}


class Project(Base):
    __tablename__ = "projects"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiKey(Base):
    """An API key: only the sha256 of the secret is kept; ``prefix`` identifies it in lists."""

    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    rate_limit_per_s: Mapped[float | None] = mapped_column(Float, default=None)  # None: PLACER_RATE_LIMIT_PER_S


class _Document:
    """Columns shared by uploaded documents."""

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    digest: Mapped[str] = mapped_column(String(80))
    name: Mapped[str] = mapped_column(String(500))
    size_bytes: Mapped[int] = mapped_column(Integer)
    body: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Graph(_Document, Base):
    __tablename__ = "graphs"
    __table_args__ = (UniqueConstraint("project_id", "digest"), Index("ix_graphs_project_name", "project_id", "name"))
    n_ops: Mapped[int] = mapped_column(Integer)
    n_edges: Mapped[int] = mapped_column(Integer)


class CalibrationRow(Base):
    """A ``placer.calibration/v1`` document (docs/cost-model.md "Calibration").

    ``digest`` is the calibration's own (its parameters, without ``fit`` and ``name``: what a
    simulation's ``metrics.calibration`` names); uploads are deduplicated by ``document_digest``,
    the digest of the whole canonical document.
    """

    __tablename__ = "calibrations"
    __table_args__ = (UniqueConstraint("project_id", "document_digest"),)
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    digest: Mapped[str] = mapped_column(String(80))
    document_digest: Mapped[str] = mapped_column(String(80))
    name: Mapped[str] = mapped_column(String(500))
    device_kinds: Mapped[list[str]] = mapped_column(JSON)
    size_bytes: Mapped[int] = mapped_column(Integer)
    body: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TopologyRow(_Document, Base):
    __tablename__ = "topologies"
    __table_args__ = (UniqueConstraint("project_id", "digest"),
                      Index("ix_topologies_project_name", "project_id", "name"))
    n_devices: Mapped[int] = mapped_column(Integer)
    n_hosts: Mapped[int] = mapped_column(Integer)
    calibration_id: Mapped[str | None] = mapped_column(ForeignKey("calibrations.id", ondelete="SET NULL"),
                                                       default=None)  # the attached calibration


class Comparison(Base):
    __tablename__ = "comparisons"
    __table_args__ = (UniqueConstraint("project_id", "idempotency_key"),)
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    graph_id: Mapped[str | None] = mapped_column(ForeignKey("graphs.id", ondelete="SET NULL"))
    topology_id: Mapped[str | None] = mapped_column(ForeignKey("topologies.id", ondelete="SET NULL"))
    objective: Mapped[str] = mapped_column(String(20))
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    request_digest: Mapped[str | None] = mapped_column(String(80))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class IdempotencyReservation(Base):
    """A claim on an ``Idempotency-Key`` while its request creates the resource.

    Made and committed before the work, deleted in the transaction that stores the resource (or
    when the work fails).  ``reserved_until`` bounds it: a claim left by a crashed server expires
    and the next request with the key takes it over; so does a request that finds the claim's
    ``owner`` (:mod:`service.owner`) dead, without waiting for the expiry.  ``scope`` is the resource's table
    (``jobs``, ``comparisons``).
    """

    __tablename__ = "idempotency_reservations"
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    scope: Mapped[str] = mapped_column(String(20), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    request_digest: Mapped[str] = mapped_column(String(80))
    reserved_until: Mapped[datetime] = mapped_column()
    owner: Mapped[str | None] = mapped_column(String(200), default=None)  # service.owner: the claiming process
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class PlanRow(Base):
    """A finished plan; the metrics a comparison sorts by are columns."""

    __tablename__ = "plans"
    __table_args__ = (Index("ix_plans_project_cache", "project_id", "cache_key"),)
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    job_id: Mapped[str | None] = mapped_column(String(40), index=True)
    cache_key: Mapped[str | None] = mapped_column(String(80))
    solver: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20))
    objective: Mapped[str | None] = mapped_column(String(20))
    objective_s: Mapped[float | None] = mapped_column(Float)
    iteration_s: Mapped[float | None] = mapped_column(Float)
    latency_s: Mapped[float | None] = mapped_column(Float)
    throughput_samples_per_s: Mapped[float | None] = mapped_column(Float)
    lower_bound_s: Mapped[float | None] = mapped_column(Float)
    efficiency: Mapped[float | None] = mapped_column(Float)
    peak_memory_bytes: Mapped[float | None] = mapped_column(Float)
    solve_time_s: Mapped[float | None] = mapped_column(Float)
    warnings: Mapped[list[dict[str, str]] | None] = mapped_column(JSON, default=None)  # the plan's `warnings`
    body: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RunRow(Base):
    """A launcher run record (``placer.run/v1``) uploaded for a plan; the figures a list shows are columns."""

    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_project_plan", "project_id", "plan_id"),)
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"))
    digest: Mapped[str] = mapped_column(String(80))
    world_size: Mapped[int] = mapped_column(Integer)
    device_kind: Mapped[str] = mapped_column(String(200))
    iteration_s: Mapped[float | None] = mapped_column(Float)
    profiled: Mapped[bool] = mapped_column(Boolean, default=False)
    size_bytes: Mapped[int] = mapped_column(Integer)
    body: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Job(Base):
    """One solver run.  ``state`` moves queued -> running -> succeeded | failed | cancelled.

    ``lease_owner`` / ``lease_expires_at`` belong to the worker that claimed the job; the
    reaper requeues a running job whose lease expired (at most ``max_attempts`` attempts).
    """

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("project_id", "idempotency_key"),
        Index("ix_jobs_state_lease", "state", "lease_expires_at"),
        Index("ix_jobs_project_cache", "project_id", "cache_key"),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    comparison_id: Mapped[str | None] = mapped_column(ForeignKey("comparisons.id", ondelete="SET NULL"), index=True)
    parent_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    graph_id: Mapped[str | None] = mapped_column(ForeignKey("graphs.id", ondelete="SET NULL"), index=True)
    topology_id: Mapped[str | None] = mapped_column(ForeignKey("topologies.id", ondelete="SET NULL"), index=True)
    solver: Mapped[str] = mapped_column(String(100))
    objective: Mapped[str] = mapped_column(String(20))
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    time_limit_s: Mapped[float] = mapped_column(Float)
    use_cache: Mapped[bool] = mapped_column(Boolean, default=True)
    cache_key: Mapped[str] = mapped_column(String(80))
    cached: Mapped[bool] = mapped_column(Boolean, default=False)
    cached_from: Mapped[str | None] = mapped_column(String(40))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    request_digest: Mapped[str | None] = mapped_column(String(80))
    state: Mapped[str] = mapped_column(String(20), default="queued")
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(100))
    lease_expires_at: Mapped[datetime | None] = mapped_column()
    child_pid: Mapped[int | None] = mapped_column(Integer)
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    plan_id: Mapped[str | None] = mapped_column(ForeignKey("plans.id", ondelete="SET NULL"))
    plan_status: Mapped[str | None] = mapped_column(String(20))
    warnings: Mapped[list[dict[str, str]] | None] = mapped_column(JSON, default=None)  # its plan's
    calibration_id: Mapped[str | None] = mapped_column(String(40), index=True, default=None)  # what it simulates with
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column()
    finished_at: Mapped[datetime | None] = mapped_column()


class JobEvent(Base):
    """The event log of a job, read by the Server-Sent Events stream (``seq`` = event id)."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job_seq", "job_id", "seq"),)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(20))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


__all__ = ["ACTIVE_STATES", "FINAL_STATES", "JOB_STATES", "ApiKey", "Base", "CalibrationRow", "Comparison", "Graph",
           "Job", "JobEvent", "PlanRow", "Project", "RunRow", "TopologyRow", "new_id", "utcnow"]
