"""What a plan's page shows, computed from the stored plan and the simulator (docs/simulator.md):
the timeline, compute and communication per stage, memory per device, the mapping, the diff
of two plans, and the timeline as a Chrome trace (Trace Event Format)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy.orm import Session

from service.db.models import Graph, Job, PlanRow, TopologyRow
from service.documents import decompress, load_problem
from solvers.model.canonical import digest
from solvers.model.plan import Plan, plan_from_document
from solvers.model.problem import Problem
from solvers.simulator import TimelineEntry, simulate

V = TypeVar("V")
TRACE_PID_DEVICES = 1
TRACE_PID_CHANNELS = 2


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
        key = digest([job.graph_id, job.topology_id, job.objective, job.settings])
        problem = PROBLEMS.get(key)
        graph = session.get(Graph, job.graph_id) if problem is None else None
        topology = session.get(TopologyRow, job.topology_id) if problem is None else None
        if graph is not None and topology is not None:
            problem = load_problem(graph.body, topology.body, job.objective, job.settings)
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
    stage_of = {d: k for k, st in enumerate(ctx.plan.stages) for d in st.devices}
    if ctx.problem is None:
        return [DeviceMemory(d, "", stage_of.get(d), float(v), 0.0) for d, v in peak.items()]
    free = 1.0 - ctx.problem.settings.memory_headroom
    return [DeviceMemory(dev.id, dev.node, stage_of.get(dev.id), float(peak.get(dev.id, 0.0)),
                         dev.memory_bytes * free)
            for dev in ctx.problem.topology.devices if dev.id in stage_of or dev.id in peak]


def chrome_trace(ctx: PlanContext, entries: list[TimelineEntry]) -> dict[str, Any]:
    """The timeline in the Trace Event Format (complete events ``ph: "X"``, microseconds) that
    chrome://tracing and Perfetto open: devices are threads of process 1, channels of process 2."""
    tids: dict[str, int] = {}
    events: list[dict[str, Any]] = []
    for e in entries:
        tid = tids.setdefault(e.resource, len(tids) + 1)
        channel = "->" in e.resource
        events.append({"name": e.task, "cat": "transfer" if channel else category(e.task), "ph": "X",
                       "ts": e.start_s * 1e6, "dur": max(0.0, e.end_s - e.start_s) * 1e6,
                       "pid": TRACE_PID_CHANNELS if channel else TRACE_PID_DEVICES, "tid": tid})
    meta: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": TRACE_PID_DEVICES, "tid": 0, "args": {"name": "devices"}},
        {"name": "process_name", "ph": "M", "pid": TRACE_PID_CHANNELS, "tid": 0, "args": {"name": "channels"}},
    ]
    for resource, tid in tids.items():
        pid = TRACE_PID_CHANNELS if "->" in resource else TRACE_PID_DEVICES
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": resource}})
    return {"traceEvents": meta + events, "displayTimeUnit": "ms",
            "otherData": {"plan_id": ctx.row.id, "solver": ctx.plan.solver, "source": "placer simulator"}}


def category(task: str) -> str:
    """forward, backward, recompute, allreduce or op (op-level tasks are named by their op)."""
    if task == "allreduce":
        return "allreduce"
    if len(task) > 1 and task[1:].split(" ")[0].isdigit():
        return {"F": "forward", "B": "backward", "R": "recompute"}.get(task[0], "op")
    return "op"


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
