"""Pydantic v2 schemas at the API boundary (requests and responses)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from solvers import registry
from solvers.generate import MAX_GENERATED_DEVICES, MAX_SEED, TOPOLOGY_KINDS, TOPOLOGY_SIZE_MAXIMA, parameter_types
from solvers.model.ranking import RankedBy
from solvers.model.settings import ProblemSettings
from solvers.model.sweep import MAX_SWEEP_MEMBERS, Sweep

T = TypeVar("T")
Include = Literal["settings"]
INCLUDE_DESCRIPTION = "settings: carry each item's settings (left out of lists otherwise, to keep pages small)"
JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
Objective = Literal["throughput", "latency"]


def _solver_names(schema: dict[str, Any]) -> None:
    """The catalogue as the schema's ``enum`` (built-in and entry-point solvers, lower-case; the
    server also takes other spellings), read when the schema is generated."""
    schema["enum"] = list[JsonValue](registry.names())


SolverName = Annotated[str, Field(min_length=1, max_length=100, json_schema_extra=_solver_names)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Page(BaseModel, Generic[T]):
    """One page of a list; pass ``next_cursor`` as ``cursor`` to get the next page."""

    items: list[T]
    next_cursor: str | None = None


class GraphOut(BaseModel):
    id: str
    digest: str
    name: str
    n_ops: int
    n_edges: int
    size_bytes: int = Field(description="size of the canonical JSON document")
    created_at: datetime


class TopologyOut(BaseModel):
    id: str
    digest: str
    name: str
    n_devices: int
    n_hosts: int
    size_bytes: int
    calibration_id: str | None = Field(None, description="the attached calibration: jobs, comparisons and "
                                                         "evaluations on the topology simulate with it")
    created_at: datetime


CALIBRATION_DESCRIPTION = ("the calibration to simulate with: absent or null, the one attached to the topology (if "
                           "any); \"none\", none; or a calibration id (docs/cost-model.md \"Calibration\")")
CalibrationChoice = Annotated[str | None, Field(min_length=1, max_length=40, description=CALIBRATION_DESCRIPTION)]


class CalibrationOut(BaseModel):
    """A stored ``placer.calibration/v1`` (the document: ``GET /v1/calibrations/{id}/document``)."""

    id: str
    digest: str = Field(description="the calibration's digest (its parameters): what metrics.calibration names")
    document_digest: str = Field(description="the digest of the whole document (fit and name included)")
    name: str
    device_kinds: list[str] = Field(description="the device kinds it is fitted for")
    size_bytes: int = Field(description="size of the canonical JSON document")
    created_at: datetime


class AttachCalibrationIn(Strict):
    calibration_id: str = Field(min_length=1, max_length=40, description="a calibration of the project")


MAX_GENERATOR_NUMBER = 1e15  # bandwidths (GB/s), latencies (s), memory (GiB), speeds: far above any machine


def _generator_parameter(name: str, kind: type) -> dict[str, JsonValue]:
    """The JSON Schema of one generator parameter (what the generators check on their own)."""
    if kind is int:
        if name in TOPOLOGY_SIZE_MAXIMA:
            return {"type": "integer", "minimum": 1, "maximum": TOPOLOGY_SIZE_MAXIMA[name]}
        if name == "dtype_bytes":
            return {"type": "integer", "enum": [2, 4]}
        return {"type": "integer", "minimum": 0, "maximum": MAX_SEED}  # seed
    if kind is float:
        low: dict[str, JsonValue] = {"minimum": 0} if "latency" in name else {"exclusiveMinimum": 0}
        return {"type": "number", **low, "maximum": MAX_GENERATOR_NUMBER}
    return {"type": "string", "minLength": 1, "maxLength": 200}


def _generator_kinds(schema: dict[str, Any]) -> None:
    """One alternative per generator kind, with exactly that kind's parameters (docs/generators.md).
    The product of the size parameters (at most MAX_GENERATED_DEVICES devices) is checked by the server."""
    schema["oneOf"] = [
        {"properties": {"kind": {"const": kind}, "params": {
            "type": "object", "additionalProperties": False,
            "properties": {name: _generator_parameter(name, t) for name, (t, _) in parameter_types(func).items()}}},
         "required": ["kind"]}
        for kind, func in sorted(TOPOLOGY_KINDS.items())]


class GenerateTopologyIn(Strict):
    """A generator kind and its parameters (each kind takes its own; see docs/generators.md)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_generator_kinds)

    kind: str = Field(description="generator kind, e.g. hierarchical, dgx1, mesh2d, torus3d",
                      json_schema_extra={"enum": list[JsonValue](sorted(TOPOLOGY_KINDS))})
    params: dict[str, Any] = Field(
        default_factory=dict,
        description=f"generator parameters (seed, sizes ...); the size parameters together make at most "
                    f"{MAX_GENERATED_DEVICES} devices (nodes x gpus_per_node, nx x ny x nz, 8 x boxes, devices)",
        json_schema_extra={"properties": {name: {"type": "integer", "minimum": 1, "maximum": most}
                                          for name, most in TOPOLOGY_SIZE_MAXIMA.items()}})


class JobIn(Strict):
    graph_id: str = Field(max_length=40)
    topology_id: str = Field(max_length=40)
    solver: SolverName = Field(description="a solver of GET /v1/solvers")
    objective: Objective = "throughput"
    settings: ProblemSettings = Field(default_factory=ProblemSettings, description="problem settings (docs/formats.md)")
    options: dict[str, Any] = Field(default_factory=dict, description="solver options (see GET /v1/solvers)")
    time_limit_s: float | None = Field(None, gt=0, description="defaults to the server's default time limit")
    cache: bool = Field(True, description="reuse a finished plan of an identical job")
    calibration: CalibrationChoice = None


class ProgressOut(BaseModel):
    fraction: float | None = None
    incumbent_s: float | None = None
    bound_s: float | None = None
    message: str | None = None


class ErrorOut(BaseModel):
    type: str
    title: str
    detail: str
    field: str | None = None
    ref: str | None = None


class WarningOut(BaseModel):
    """Why a plan's predicted times may be off (docs/simulator.md)."""

    code: str
    message: str


class JobOut(BaseModel):
    id: str
    status: JobState
    graph_id: str | None
    topology_id: str | None
    comparison_id: str | None
    parent_id: str | None = Field(None, description="the auto job this job is a portfolio member of (Celery workers)")
    solver: str
    objective: str
    settings: ProblemSettings | None = Field(
        None, description="the job's settings; null in lists unless asked for with include=settings")
    options: dict[str, Any]
    time_limit_s: float
    cache: bool
    cached: bool
    cached_from: str | None
    attempts: int
    cancel_requested: bool
    progress: ProgressOut | None
    error: ErrorOut | None
    plan_id: str | None
    plan_status: str | None
    warnings: list[WarningOut] = Field(default_factory=list, description="its plan's warnings about the graph's "
                                                                          "times (a device kind the topology lacks, "
                                                                          "roofline estimates)")
    calibration_id: str | None = Field(None, description="the calibration the job simulates with")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class RunOut(BaseModel):
    """A launcher run record stored for a plan (the document: ``GET /v1/plans/{plan_id}/runs/{id}``)."""

    id: str
    plan_id: str
    digest: str
    world_size: int = Field(description="ranks that ran the plan")
    device_kind: str = Field(description="cpu, or the CUDA device's name")
    iteration_s: float | None = Field(description="the median measured iteration (summary.iteration_s)")
    profiled: bool = Field(description="the run profiled steps (stage and transfer times are in the record)")
    size_bytes: int = Field(description="size of the canonical JSON document")
    created_at: datetime


class ComparisonIn(Strict):
    graph_id: str = Field(max_length=40)
    topology_id: str = Field(max_length=40)
    solvers: list[SolverName] = Field(min_length=1, max_length=64, json_schema_extra={"uniqueItems": True})
    objective: Objective = "throughput"
    settings: ProblemSettings = Field(default_factory=ProblemSettings, description="problem settings (docs/formats.md)")
    options: dict[str, dict[str, Any]] = Field(default_factory=dict, max_length=64,
                                               description="solver name (one of solvers) -> its options")
    time_limit_s: float | None = Field(None, gt=0)
    cache: bool = True
    calibration: CalibrationChoice = None
    sweep: Sweep | None = Field(None, description=(
        "settings to sweep: one member per solver and combination of the values (settings.micro_batches becomes "
        "the swept counts; each member's settings are checked as a job's, an error naming the swept value, e.g. "
        f"sweep.tp[1]), at most {MAX_SWEEP_MEMBERS} members"))


class ComparisonRow(BaseModel):
    solver: str
    job_id: str
    job_status: JobState
    plan_id: str | None
    status: str | None = Field(description="the plan's status (optimal, feasible, infeasible, unknown)")
    objective_s: float | None
    iteration_s: float | None
    latency_s: float | None
    throughput_samples_per_s: float | None
    lower_bound_s: float | None = Field(description="the plan's own lower bound (one iteration of its micro-batches)")
    samples_per_iteration: float | None = Field(description="micro_batches × samples per micro-batch")
    key_s: float | None = Field(description="the comparison key, in the unit ranked_by names (docs/simulator.md)")
    lower_bound_key_s: float | None = Field(description="lower_bound_s in the unit of key_s")
    efficiency: float | None
    solve_time_s: float | None
    peak_memory_bytes: float | None
    error: ErrorOut | None
    swept: dict[str, Any] = Field(default_factory=dict, description=(
        "this member's value of each swept setting (empty without a sweep)"))
    micro_batches: int | None = Field(None, description="the plan's micro-batches per iteration")
    schedule: str | None = Field(None, description="the plan's pipeline schedule")
    virtual_stages: int | None = Field(None, description="the plan's stages per rank group")
    replicas: list[int] | None = Field(None, description="devices per stage of the plan (its length: the stages)")
    tensor_degrees: list[int] | None = Field(None, description="tensor-parallel degree per stage, where the plan has one")
    status_reason: str | None = Field(None, description=(
        "why the plan's status is not optimal or feasible (its notes), e.g. the exact solver's budget"))


class ComparisonOut(BaseModel):
    id: str
    graph_id: str | None
    topology_id: str | None
    objective: str
    settings: ProblemSettings | None = Field(
        None, description="the comparison's settings; null in lists unless asked for with include=settings")
    ranked_by: RankedBy = Field(description=(
        "what key_s is: time_per_sample_s (throughput: plans with different micro-batch counts compare per "
        "sample), iteration_s (throughput with settings.global_batch), latency_s"))
    done: bool
    best_solver: str | None = Field(description="the solver with the least key_s among optimal and feasible plans")
    best_job_id: str | None = Field(None, description="the job of that row (a sweep has several rows per solver)")
    sweep: dict[str, list[Any]] = Field(default_factory=dict, description=(
        "the swept settings and their values, read back from the members (empty without a sweep)"))
    rows: list[ComparisonRow]
    created_at: datetime


class EvaluateIn(Strict):
    graph_id: str = Field(max_length=40)
    topology_id: str = Field(max_length=40)
    objective: Objective = "throughput"
    settings: ProblemSettings = Field(default_factory=ProblemSettings, description="problem settings (docs/formats.md)")
    plan: dict[str, Any] = Field(description="a placer.plan/v1 document (schema: PlanDocument)")
    timeline: bool = False
    calibration: CalibrationChoice = None


class EvaluateOut(BaseModel):
    plan: dict[str, Any]
    metrics: dict[str, Any]
    timeline: list[Any] | None = None
    calibration_id: str | None = Field(None, description="the calibration it simulated with")


class SolverOut(BaseModel):
    name: str
    summary: str
    objectives: list[str]
    version: str
    options_schema: dict[str, Any]
    available: bool = True
    unavailable_reason: str | None = None


class ProblemOut(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    field: str | None = None
    ref: str | None = None
    errors: list[dict[str, Any]] | None = None


class HealthOut(BaseModel):
    status: str
    database: str | None = None
    revision: str | None = None
    head: str | None = None
    workers: int | None = None
