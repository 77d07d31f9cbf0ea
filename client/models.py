"""Typed results of the HTTP client: the API's response bodies as pydantic models.

They mirror the service's response schemas field for field (tests/client/test_models.py checks
them against the service's OpenAPI schema), without importing the service. Unknown fields a
newer server adds are ignored. ``settings`` is the solvers' own :class:`ProblemSettings`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from solvers.model.ranking import RankedBy, best_index, comparison_key_s
from solvers.model.settings import ProblemSettings

__all__ = ["FINAL_STATES", "CalibrationInfo", "Comparison", "ComparisonRow", "Evaluation", "GraphInfo", "Health", "Job", "JobError",
           "JobEvent", "JobState", "Page", "Progress", "SolverInfo", "TopologyInfo"]

T = TypeVar("T")
JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
FINAL_STATES: tuple[str, ...] = ("succeeded", "failed", "cancelled")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Page(_Model, Generic[T]):
    """One page of a list (``next_cursor`` is ``None`` on the last page)."""

    items: list[T]
    next_cursor: str | None = None


class GraphInfo(_Model):
    """A stored operator graph (``GET /v1/graphs/{id}``); the document itself is ``graph_document``."""

    id: str
    digest: str
    name: str
    n_ops: int
    n_edges: int
    size_bytes: int
    created_at: datetime


class RunInfo(_Model):
    """A launcher run record stored for a plan (``GET /v1/plans/{plan_id}/runs``); the document is ``run_document``."""

    id: str
    plan_id: str
    digest: str
    world_size: int
    device_kind: str
    iteration_s: float | None
    profiled: bool
    size_bytes: int
    created_at: datetime


class TopologyInfo(_Model):
    """A stored topology (``GET /v1/topologies/{id}``)."""

    id: str
    digest: str
    name: str
    n_devices: int
    n_hosts: int
    size_bytes: int
    calibration_id: str | None = None  # the attached calibration (jobs on the topology simulate with it)
    created_at: datetime


class CalibrationInfo(_Model):
    """A stored calibration (``GET /v1/calibrations/{id}``); the document itself is ``calibration_document``.

    ``digest`` is the calibration's (its parameters): what a simulation's ``metrics.calibration`` names."""

    id: str
    digest: str
    document_digest: str
    name: str
    device_kinds: list[str]
    size_bytes: int
    created_at: datetime


class Progress(_Model):
    """A running job's last progress report."""

    fraction: float | None = None
    incumbent_s: float | None = None
    bound_s: float | None = None
    message: str | None = None


class JobError(_Model):
    """Why a job failed (``type`` e.g. ``time-limit-exceeded``; ``field`` and ``ref`` for bad input)."""

    type: str
    title: str
    detail: str
    field: str | None = None
    ref: str | None = None


class PlanWarning(_Model):
    """Why a plan's predicted times may be off: a stable ``code`` and what to do (docs/simulator.md)."""

    code: str
    message: str


class Job(_Model):
    """A solve job (``POST /v1/jobs``, ``GET /v1/jobs/{id}``)."""

    id: str
    status: JobState
    graph_id: str | None
    topology_id: str | None
    comparison_id: str | None
    parent_id: str | None = None  # the auto job this job is a portfolio member of (Celery workers)
    solver: str
    objective: str
    settings: ProblemSettings | None = None  # None in lists unless asked for (include_settings=True)
    options: dict[str, Any]
    time_limit_s: float
    cache: bool
    cached: bool
    cached_from: str | None
    attempts: int
    cancel_requested: bool
    progress: Progress | None
    error: JobError | None
    plan_id: str | None
    plan_status: str | None
    warnings: list[PlanWarning] = []  # its plan's warnings about the graph's times (docs/simulator.md)
    calibration_id: str | None = None  # the calibration it simulates with
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def done(self) -> bool:
        """Whether the job reached a final state (succeeded, failed or cancelled)."""
        return self.status in FINAL_STATES


class ComparisonRow(_Model):
    """One solver's job in a comparison, with its plan's simulated figures."""

    solver: str
    job_id: str
    job_status: JobState
    plan_id: str | None
    status: str | None
    objective_s: float | None
    iteration_s: float | None
    latency_s: float | None
    throughput_samples_per_s: float | None
    lower_bound_s: float | None
    samples_per_iteration: float | None
    key_s: float | None
    lower_bound_key_s: float | None
    efficiency: float | None
    solve_time_s: float | None
    peak_memory_bytes: float | None
    error: JobError | None
    swept: dict[str, Any] = {}  # this member's value of each swept setting
    micro_batches: int | None = None
    schedule: str | None = None
    virtual_stages: int | None = None
    replicas: list[int] | None = None  # devices per stage
    tensor_degrees: list[int] | None = None
    status_reason: str | None = None  # why the status is not optimal or feasible


class Comparison(_Model):
    """Several solvers on one problem (``POST /v1/comparisons``)."""

    id: str
    graph_id: str | None
    topology_id: str | None
    objective: str
    settings: ProblemSettings | None = None  # None in lists unless asked for (include_settings=True)
    ranked_by: RankedBy
    done: bool
    best_solver: str | None
    best_job_id: str | None = None
    sweep: dict[str, list[Any]] = {}  # the swept settings and their values
    rows: list[ComparisonRow]
    created_at: datetime

    def key_s(self, row: ComparisonRow) -> float | None:
        """A row's comparison key (:func:`solvers.model.ranking.comparison_key_s`): seconds per
        sample for throughput, the iteration with ``settings.global_batch``, the makespan for latency.
        The server's ``row.key_s`` where the answer carries it (lists leave ``settings`` out)."""
        if self.settings is None:
            return row.key_s
        return comparison_key_s(row.model_dump(), self.objective, self.settings.global_batch)

    @property
    def best(self) -> ComparisonRow | None:
        """The optimal or feasible row with the least comparison key (:meth:`key_s`: per sample, so
        that plans of different micro-batch counts compare); ``None`` when no plan qualifies."""
        good = [r for r in self.rows if r.status in ("optimal", "feasible")]
        k = best_index([self.key_s(r) for r in good])
        return None if k is None else good[k]


class Evaluation(_Model):
    """A plan scored by the server's simulator (``POST /v1/plans:evaluate``)."""

    plan: dict[str, Any]
    metrics: dict[str, Any]
    timeline: list[Any] | None = None
    calibration_id: str | None = None  # the calibration it simulated with


class SolverInfo(_Model):
    """One entry of the solver catalogue (``GET /v1/solvers``)."""

    name: str
    summary: str
    objectives: list[str]
    version: str
    options_schema: dict[str, Any]
    available: bool = True
    unavailable_reason: str | None = None


class Health(_Model):
    """``/healthz`` and ``/readyz``."""

    status: str
    database: str | None = None
    revision: str | None = None
    head: str | None = None
    workers: int | None = None


class JobEvent(_Model):
    """One event of a job's stream (``GET /v1/jobs/{id}/events``): ``state``, ``progress``, ``end``..."""

    id: int | None
    event: str
    data: dict[str, Any]
