"""What a plan's page shows, computed from the stored plan and the simulator (docs/simulator.md):
the timeline, compute and communication per stage, memory per device, the mapping, the diff
of two plans, and the timeline as a Chrome trace (Trace Event Format)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy.orm import Session

from service.calibrations import chosen_by_id
from service.db.models import Graph, Job, PlanRow, TopologyRow
from service.documents import decompress, load_problem
from solvers.model.canonical import digest
from solvers.model.plan import Plan, plan_from_document
from solvers.model.problem import Problem
from solvers.simulator import TimelineEntry, simulate
from solvers.simulator.trace import chrome_trace as trace_of

V = TypeVar("V")


@dataclass(frozen=True)
class PlanContext:
    """A stored plan with the problem it was solved for (``None`` once its inputs are deleted)."""

    row: PlanRow
    doc: dict[str, Any]
    plan: Plan
    job: Job | None
    problem: Problem | None


@dataclass(frozen=True)
class StageBar:
    stage: int
    devices: tuple[str, ...]
    n_ops: int
    compute_s: float
    comm_s: float


@dataclass(frozen=True)
class DeviceMemory:
    device: str
    host: str
    stage: int | None
    peak_bytes: float
    capacity_bytes: float


class _Cache(Generic[V]):
    """A few recent values by key (stored documents never change, so nothing goes stale)."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._items: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def get(self, key: str) -> V | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: str, value: V) -> None:
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)


TIMELINES: _Cache[list[TimelineEntry]] = _Cache()  # by plan id
PROBLEMS: _Cache[Problem] = _Cache(8)  # by graph, topology, objective and settings: the plans of a comparison share one


def load_plan(session: Session, row: PlanRow) -> PlanContext:
    """The plan and, when its graph and topology still exist, its problem (rebuilt like a job's)."""
    doc = decompress(row.body)
    plan = plan_from_document(doc)
    job = session.get(Job, row.job_id) if row.job_id else None
    problem = None
    if job is not None and job.graph_id and job.topology_id:
        key = digest([job.graph_id, job.topology_id, job.objective, job.settings, job.calibration_id])
        problem = PROBLEMS.get(key)
        graph = session.get(Graph, job.graph_id) if problem is None else None
        topology = session.get(TopologyRow, job.topology_id) if problem is None else None
        cal = chosen_by_id(session, job.calibration_id) if problem is None else None
        if graph is not None and topology is not None and (cal is not None or job.calibration_id is None):
            problem = load_problem(graph.body, topology.body, job.objective, job.settings,
                                   None if cal is None else cal.body)
            PROBLEMS.put(key, problem)
    return PlanContext(row, doc, plan, job, problem)


def timeline(ctx: PlanContext) -> list[TimelineEntry]:
    """The simulator's timeline of the plan (empty without its problem or for an infeasible plan)."""
    if ctx.problem is None or ctx.plan.status == "infeasible" or not ctx.plan.stages:
        return []
    cached = TIMELINES.get(ctx.row.id)
    if cached is None:
        cached = list(simulate(ctx.problem, ctx.plan, timeline=True).timeline or [])
        TIMELINES.put(ctx.row.id, cached)
    return cached


def stage_bars(ctx: PlanContext) -> list[StageBar]:
    """Per stage and micro-batch: compute (the first device's busy time / micro-batches) and
    communication (the rest of the simulator's ``stage_times_s``, docs/simulator.md)."""
    metrics = ctx.plan.metrics or {}
    stage_times = list(metrics.get("stage_times_s") or [])
    busy = dict(metrics.get("busy_s") or {})
    mb = max(1, ctx.plan.micro_batches)
    out = []
    for k, stage in enumerate(ctx.plan.stages):
        compute_s = float(busy.get(stage.devices[0], 0.0)) / mb if stage.devices else 0.0
        total_s = float(stage_times[k]) if k < len(stage_times) else compute_s
        compute_s = min(compute_s, total_s) if k < len(stage_times) else compute_s
        out.append(StageBar(k, tuple(stage.devices), len(stage.ops), compute_s, max(0.0, total_s - compute_s)))
    return out


def device_memory(ctx: PlanContext) -> list[DeviceMemory]:
    """Peak memory of every used device (the simulator's) against its capacity less the headroom."""
    peak = dict((ctx.plan.metrics or {}).get("peak_memory_bytes") or {})
    stage_of: dict[str, int] = {}  # a device's first stage (its colour; the mapping chart's too)
    for k, st in enumerate(ctx.plan.stages):
        for d in st.devices:
            stage_of.setdefault(d, k)
    if ctx.problem is None:
        return [DeviceMemory(d, "", stage_of.get(d), float(v), 0.0) for d, v in peak.items()]
    free = 1.0 - ctx.problem.settings.memory_headroom
    return [DeviceMemory(dev.id, dev.node, stage_of.get(dev.id), float(peak.get(dev.id, 0.0)),
                         dev.memory_bytes * free)
            for dev in ctx.problem.topology.devices if dev.id in stage_of or dev.id in peak]


def chrome_trace(ctx: PlanContext, entries: list[TimelineEntry]) -> dict[str, Any]:
    """The timeline in the Trace Event Format (:func:`solvers.simulator.trace.chrome_trace`: devices are
    threads of process 1, channels of process 2; each task named by its kind, stage and micro-batch)."""
    return trace_of(entries, {"plan_id": ctx.row.id, "solver": ctx.plan.solver})


@dataclass(frozen=True)
class MovedOp:
    op: str
    stage_a: int | None
    devices_a: tuple[str, ...]
    stage_b: int | None
    devices_b: tuple[str, ...]


def plan_diff(a: Plan, b: Plan) -> list[MovedOp]:
    """Ops whose devices differ between plans ``a`` and ``b`` (in ``a``'s stage order)."""
    def where(plan: Plan) -> dict[str, tuple[int, tuple[str, ...]]]:
        return {op: (k, tuple(st.devices)) for k, st in enumerate(plan.stages) for op in st.ops}

    in_a, in_b = where(a), where(b)
    out = []
    for op in list(in_a) + [op for op in in_b if op not in in_a]:
        sa, da = in_a.get(op, (None, ()))
        sb, db = in_b.get(op, (None, ()))
        if da != db:
            out.append(MovedOp(op, sa, da, sb, db))
    return out


@dataclass(frozen=True)
class StageDiff:
    """One stage index in two plans: its ops (count, first and last), replicas and simulated time.

    ``None`` counts mean the stage does not exist in that plan.  The time is the simulator's
    ``stage_times_s`` entry (per micro-batch, compute plus communication; docs/simulator.md).
    """

    stage: int
    ops_a: int | None
    ops_b: int | None
    first_a: str | None
    first_b: str | None
    last_a: str | None
    last_b: str | None
    devices_a: tuple[str, ...]
    devices_b: tuple[str, ...]
    time_a_s: float | None
    time_b_s: float | None

    @property
    def status(self) -> str:
        """``added``, ``removed``, ``changed`` (ops or devices) or ``same``."""
        if self.ops_a is None:
            return "added"
        if self.ops_b is None:
            return "removed"
        same = (self.first_a, self.last_a, self.ops_a, self.devices_a) == \
            (self.first_b, self.last_b, self.ops_b, self.devices_b)
        return "same" if same else "changed"

    @property
    def boundary_moved(self) -> bool:
        """Whether the stage ends at another op (both plans have it)."""
        return self.ops_a is not None and self.ops_b is not None and self.last_a != self.last_b

    @property
    def devices_added(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices_b if d not in self.devices_a)

    @property
    def devices_removed(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices_a if d not in self.devices_b)


@dataclass(frozen=True)
class SettingDiff:
    """A plan-wide setting (micro-batches, schedule, recompute ...) or metric in both plans."""

    name: str
    a: Any
    b: Any

    @property
    def changed(self) -> bool:
        return bool(self.a != self.b)


@dataclass(frozen=True)
class PlanDiff:
    """What differs between plans ``a`` and ``b``, read stage by stage (docs/dashboard.md "Plan diff")."""

    stages: tuple[StageDiff, ...]
    settings: tuple[SettingDiff, ...]
    times: tuple[SettingDiff, ...]
    moved: tuple[MovedOp, ...]
    n_ops: int

    @property
    def boundaries_moved(self) -> tuple[StageDiff, ...]:
        return tuple(s for s in self.stages if s.boundary_moved)

    @property
    def replicas_changed(self) -> tuple[StageDiff, ...]:
        return tuple(s for s in self.stages if s.ops_a is not None and s.ops_b is not None
                     and s.devices_a != s.devices_b)

    def summary(self) -> list[str]:
        """Sentences a reader takes in first: stages added or removed, boundaries moved, replica and
        device changes, the plan-wide settings that changed, and ops on other devices."""
        out: list[str] = []
        n_a = sum(1 for s in self.stages if s.ops_a is not None)
        n_b = sum(1 for s in self.stages if s.ops_b is not None)
        if n_a != n_b:
            out.append(f"{_count(n_a, 'stage')} → {_count(n_b, 'stage')}")
        moved = self.boundaries_moved
        out.append(f"{_count(len(moved), 'stage boundary', 'stage boundaries')} moved" if moved
                   else "no stage boundary moved")
        for s in self.replicas_changed:
            if len(s.devices_a) != len(s.devices_b):
                out.append(f"stage {s.stage}: {_count(len(s.devices_a), 'replica')} → {len(s.devices_b)}")
            else:
                out.append(f"stage {s.stage}: on other devices ({', '.join(s.devices_b)})")
        out.extend(f"{c.name}: {_show(c.a)} → {_show(c.b)}" for c in self.settings if c.changed)
        out.append(f"{len(self.moved)} of {_count(self.n_ops, 'op')} on other devices")
        return out


def _count(n: int, singular: str, plural: str | None = None) -> str:
    """``1 stage``, ``2 stages`` (the plural given or ``singular + "s"``)."""
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "–" if value is None else str(value)


DIFF_SETTINGS = (("micro-batches", "micro_batches"), ("schedule", "schedule"), ("recompute", "recompute"),
                 ("objective", "objective"), ("pass", "pass_"))
DIFF_TIMES = (("iteration", "iteration_s"), ("time per sample", "time_per_sample_s"),
              ("bottleneck stage", "bottleneck_stage_s"), ("latency", "latency_s"))


def diff_plans(a: Plan, b: Plan) -> PlanDiff:
    """Stage by stage: which boundaries moved (stage k's last op), replicas and devices, the
    simulated time per stage before and after (each plan's ``metrics.stage_times_s``), and the
    plan-wide settings; the ops on other devices are kept for the full list."""
    times_a = list((a.metrics or {}).get("stage_times_s") or [])
    times_b = list((b.metrics or {}).get("stage_times_s") or [])
    stages = []
    for k in range(max(len(a.stages), len(b.stages))):
        sa = a.stages[k] if k < len(a.stages) else None
        sb = b.stages[k] if k < len(b.stages) else None
        stages.append(StageDiff(
            k, len(sa.ops) if sa else None, len(sb.ops) if sb else None,
            sa.ops[0] if sa and sa.ops else None, sb.ops[0] if sb and sb.ops else None,
            sa.ops[-1] if sa and sa.ops else None, sb.ops[-1] if sb and sb.ops else None,
            tuple(sa.devices) if sa else (), tuple(sb.devices) if sb else (),
            float(times_a[k]) if sa and k < len(times_a) else None,
            float(times_b[k]) if sb and k < len(times_b) else None))
    latency = "latency" in (a.objective, b.objective)  # the pass matters only to latency plans
    settings = tuple(SettingDiff(label, getattr(a, attr), getattr(b, attr)) for label, attr in DIFF_SETTINGS
                     if attr != "pass_" or latency)
    ma, mb = a.metrics or {}, b.metrics or {}
    times = tuple(SettingDiff(label, ma.get(key), mb.get(key)) for label, key in DIFF_TIMES
                  if ma.get(key) is not None or mb.get(key) is not None)
    n_ops = len({op for st in a.stages for op in st.ops} | {op for st in b.stages for op in st.ops})
    return PlanDiff(tuple(stages), settings, times, tuple(plan_diff(a, b)), n_ops)
