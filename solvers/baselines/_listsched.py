"""Shared list-scheduling machinery for latency plans (m-TOPO, m-ETF, m-SCT, HEFT, Celeritas).

The schedulers work on a :class:`TaskGraph` (the op graph itself, or Celeritas' coarse graph)
and time it with the shared cost model (DESIGN §4) under the op-level simulator's rules:

* a task's duration on device ``d`` is its forward time there (``ComputeModel``); in a
  training pass (``problem.training``) forward + backward, and every message counts twice
  (activation forward, gradient back).  This "combined pass" is the one approximation the
  schedulers make: the simulator runs all forwards, then the backwards in reverse order, and
  for a placement the two halves mirror each other;
* a producer's output needed on another device is one message per (producer, device), sent
  when the producer ends, postal time ``latency + bytes / bandwidth`` on the widest-path
  channel, one message at a time per directed channel (FIFO in booking order);
* devices run one task at a time; ``insertion=True`` lets a task fill an idle gap (HEFT,
  Celeritas' Adjusting Placement), otherwise it is appended (ETF-style device-ready times);
* memory is the latency-plan model of ``solvers.cost.memory.device_memory_bytes``, tracked
  exactly: parameters (x (1 + optimizer) in training) + activations summed, plus the largest
  single-op working memory.

The claimed objective of every plan is the simulator's, computed at the end
(:func:`finish_latency_plan`); the internal timing only guides the decisions.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from solvers.base import Budget
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import capacity_bytes, param_bytes_factor
from solvers.model.errors import InvalidProblem
from solvers.model.plan import Plan, Stage, Status
from solvers.model.problem import Problem

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_MEM_SLACK = 1e-9  # relative slack so float summation order never flips a fit at the boundary


@dataclass(frozen=True)
class TaskGraph:
    """A DAG of tasks to place (read-only; the lists may be the graph's own).
    ``pred[v]`` / ``pred_bytes[v]``: producers of ``v`` and the
    message size each sends to ``v``; ``dur_s[v, d]``: time of ``v`` on device ``d``;
    ``mem_add_bytes[v]``: additive memory, ``mem_work_bytes[v]``: working memory (max-combined);
    ``rank[v]``: position in a topological order (tie-breaks)."""

    pred: list[list[int]]
    pred_bytes: list[list[float]]
    succ: list[list[int]]
    succ_bytes: list[list[float]]
    dur_s: FloatArray
    mem_add_bytes: FloatArray
    mem_work_bytes: FloatArray
    rank: IntArray

    @property
    def n(self) -> int:
        return len(self.pred)


@dataclass(frozen=True)
class LatencyCosts:
    """Channel figures of one latency problem. ``msg_factor`` is 2 in a training pass."""

    latency_s: FloatArray
    inv_bandwidth_sPB: FloatArray  # [a, b] = seconds per byte on channel a -> b (0 on the diagonal)
    msg_factor: float
    mean_latency_s: float
    mean_inv_bandwidth_sPB: float

    def comm_s(self, a: int, b: int, size_bytes: float) -> float:
        """Postal time of a message a -> b (both passes in training); empty messages are free."""
        if a == b or size_bytes <= 0.0:
            return 0.0
        return self.msg_factor * float(self.latency_s[a, b] + size_bytes * self.inv_bandwidth_sPB[a, b])

    def mean_comm_s(self, size_bytes: FloatArray) -> FloatArray:
        """Average postal time over all ordered device pairs (HEFT's c-bar, Celeritas' c)."""
        t = self.msg_factor * (self.mean_latency_s + size_bytes * self.mean_inv_bandwidth_sPB)
        return np.where(size_bytes > 0.0, t, 0.0)


def latency_costs(problem: Problem) -> LatencyCosts:
    topo = problem.topology
    n = topo.n_devices
    lat = np.array(topo.latency_s, dtype=np.float64)
    with np.errstate(divide="ignore"):
        inv = 1.0 / np.array(topo.bandwidth_Bps, dtype=np.float64)
    np.fill_diagonal(inv, 0.0)
    off = ~np.eye(n, dtype=bool)
    mean_lat = float(lat[off].mean()) if n > 1 else 0.0
    mean_inv = float(inv[off].mean()) if n > 1 else 0.0
    return LatencyCosts(lat, inv, 2.0 if problem.training else 1.0, mean_lat, mean_inv)


def check_latency_pins(problem: Problem) -> dict[int, int]:
    """Op position -> device position for device pins; stage-index pins are refused."""
    out: dict[int, int] = {}
    for op, target in problem.settings.pinned.items():
        if isinstance(target, int):
            raise InvalidProblem(f"settings.pinned.{op}: a latency plan pins ops to device ids, not stage "
                                 f"index {target}", field=f"settings.pinned.{op}", ref=op)
        out[problem.graph.index[op]] = problem.topology.index[target]
    return out


def op_task_graph(problem: Problem) -> TaskGraph:
    """The op graph as a task graph (message bytes per edge; memory per op)."""
    g, topo = problem.graph, problem.topology
    compute = ComputeModel(g, topo)
    cols = [compute.fwd_s(d) + compute.bwd_s(d) if problem.training else compute.fwd_s(d)
            for d in range(topo.n_devices)]
    dur = np.ascontiguousarray(np.stack(cols, axis=1), dtype=np.float64)
    sizes = g.edge_bytes.tolist()
    pred_b = [[sizes[e] for e in ins] for ins in g.in_edges]  # aligned with g.pred (edge order)
    succ_b = [[sizes[e] for e in outs] for outs in g.out_edges]  # aligned with g.succ
    add, work = op_memory_bytes(problem)
    return TaskGraph(g.pred, pred_b, g.succ, succ_b, dur, add, work, np.asarray(g.topo_position, dtype=np.int64))


def op_memory_bytes(problem: Problem) -> tuple[FloatArray, FloatArray]:
    """Per op: additive bytes (params x factor + activations) and working bytes (Eq. 14 peak)."""
    g = problem.graph
    add = g.param_bytes * param_bytes_factor(problem) + g.act_bytes
    work = np.maximum(g.mem_fwd_bytes, g.mem_bwd_bytes)
    return np.asarray(add, dtype=np.float64), np.asarray(work, dtype=np.float64)


def device_caps_bytes(problem: Problem) -> FloatArray:
    """Usable bytes per device (headroom applied; any stage cap applies to every device)."""
    caps = np.array([capacity_bytes(problem, d) for d in range(problem.topology.n_devices)])
    stage_caps = problem.settings.stage_memory_caps_bytes
    if stage_caps:
        caps = np.minimum(caps, min(float(c) for c in stage_caps.values()))
    return caps


class MemoryTracker:
    """Exact latency-plan memory per device: ``sum(additive) + max(working)``."""

    def __init__(self, caps_bytes: FloatArray) -> None:
        self.caps = [float(c) for c in caps_bytes]
        self.add_bytes = [0.0] * len(self.caps)
        self.work_bytes = [0.0] * len(self.caps)

    def need_bytes(self, d: int, add: float, work: float) -> float:
        return self.add_bytes[d] + add + max(self.work_bytes[d], work)

    def fits(self, d: int, add: float, work: float) -> bool:
        return self.need_bytes(d, add, work) <= self.caps[d] * (1.0 - _MEM_SLACK)

    def fit_limits_bytes(self) -> FloatArray:
        """Per device: the bound :meth:`fits` compares the need with (for vectorised fit tests)."""
        return np.asarray(self.caps) * (1.0 - _MEM_SLACK)

    def place(self, d: int, add: float, work: float) -> None:
        self.add_bytes[d] += add
        self.work_bytes[d] = max(self.work_bytes[d], work)

    def used_bytes(self, d: int) -> float:
        return self.add_bytes[d] + self.work_bytes[d]

    def most_free(self) -> int:
        """The device with the most free memory (best-effort target; ties: lowest index)."""
        free = [c - self.used_bytes(d) for d, c in enumerate(self.caps)]
        return int(np.argmax(free))


class ListSchedule:
    """Partial schedule: placed tasks, device timelines, channel queues, sent messages."""

    def __init__(self, tasks: TaskGraph, costs: LatencyCosts, caps_bytes: FloatArray) -> None:
        self.tasks = tasks
        self.costs = costs
        n, n_dev = tasks.n, tasks.dur_s.shape[1]
        self.n_devices = n_dev
        self.device = [-1] * n
        self.start_s = [0.0] * n
        self.finish_s = [0.0] * n
        self.free_s = [0.0] * n_dev  # end of the last task on each device
        self._starts: list[list[float]] = [[] for _ in range(n_dev)]
        self._ends: list[list[float]] = [[] for _ in range(n_dev)]
        self._chan_free = [[0.0] * n_dev for _ in range(n_dev)]
        self._arrival: dict[tuple[int, int], float] = {}  # (producer, device) -> message arrival
        self.mem = MemoryTracker(caps_bytes)
        self.best_effort = 0  # tasks placed although no device had room

    def _ready_s(self, v: int, d: int, book: bool) -> float:
        """Data-ready time of ``v`` on ``d``; ``book`` reserves the channels for new messages."""
        t = 0.0
        pending: list[tuple[float, int, int, float]] = []
        for p, size in zip(self.tasks.pred[v], self.tasks.pred_bytes[v], strict=True):
            dp = self.device[p]
            if dp == d:
                t = max(t, self.finish_s[p])
                continue
            hit = self._arrival.get((p, d))
            if hit is not None:
                t = max(t, hit)
            else:
                pending.append((self.finish_s[p], p, dp, size))
        if pending:
            pending.sort()
            local: dict[int, float] = {}
            for fin, p, dp, size in pending:
                a = max(fin, local.get(dp, self._chan_free[dp][d])) + self.costs.comm_s(dp, d, size)
                local[dp] = a
                if book:
                    self._arrival[(p, d)] = a
                t = max(t, a)
            if book:
                for dp, a in local.items():
                    self._chan_free[dp][d] = a
        return t

    def ready_s(self, v: int, d: int) -> float:
        return self._ready_s(v, d, False)

    def slot_s(self, d: int, ready: float, dur: float, insertion: bool) -> float:
        """Earliest start >= ``ready`` on ``d``: first idle gap that fits, or after the last task."""
        if not insertion:
            return max(ready, self.free_s[d])
        starts, ends = self._starts[d], self._ends[d]
        k = bisect.bisect_right(ends, ready)
        t = ready
        while k < len(starts):
            if starts[k] - t >= dur:
                return t
            t = max(t, ends[k])
            k += 1
        return t

    def est_s(self, v: int, d: int, insertion: bool) -> float:
        """Earliest start time of ``v`` on ``d`` (Celeritas Eq. 7; HEFT's EST)."""
        return self.slot_s(d, self._ready_s(v, d, False), float(self.tasks.dur_s[v, d]), insertion)

    def fits(self, v: int, d: int) -> bool:
        return self.mem.fits(d, float(self.tasks.mem_add_bytes[v]), float(self.tasks.mem_work_bytes[v]))

    def commit(self, v: int, d: int, insertion: bool, best_effort: bool = False) -> float:
        """Place ``v`` on ``d`` at its earliest start; book its messages; return the start."""
        dur = float(self.tasks.dur_s[v, d])
        start = self.slot_s(d, self._ready_s(v, d, True), dur, insertion)
        end = start + dur
        self.device[v] = d
        self.start_s[v] = start
        self.finish_s[v] = end
        k = bisect.bisect_right(self._starts[d], start)
        self._starts[d].insert(k, start)
        self._ends[d].insert(k, end)
        self.free_s[d] = max(self.free_s[d], end)
        self.mem.place(d, float(self.tasks.mem_add_bytes[v]), float(self.tasks.mem_work_bytes[v]))
        if best_effort:
            self.best_effort += 1
        return start

    def commit_forced(self, v: int, d: int, insertion: bool) -> float:
        """:meth:`commit` of ``v`` on ``d`` whether or not it fits (a pin, a last resort):
        counted best effort when it does not."""
        return self.commit(v, d, insertion, best_effort=not self.fits(v, d))

    def makespan_s(self) -> float:
        return max(self.free_s, default=0.0)


def complete_fast(sched: ListSchedule, remaining: Sequence[int], pins: Mapping[int, int]) -> None:
    """Place ``remaining`` tasks (topological order) cheaply after a time-out: each on the
    device of its last-finishing producer if it fits, else the fitting device with the
    earliest start, else best effort on the device with the most free memory."""
    for v in remaining:
        if sched.device[v] >= 0:
            continue
        if v in pins:
            sched.commit_forced(v, pins[v], False)
            continue
        preds = sched.tasks.pred[v]
        d = sched.device[max(preds, key=lambda p: sched.finish_s[p])] if preds else 0
        if not sched.fits(v, d):
            fitting = [e for e in range(sched.n_devices) if sched.fits(v, e)]
            d = min(fitting, key=lambda e: sched.free_s[e]) if fitting else sched.mem.most_free()
        sched.commit_forced(v, d, False)


def expired_every(budget: Budget, step: int, every: int = 64) -> bool:
    """Check the budget only every ``every`` steps (the clock is not free)."""
    return step % every == 0 and budget.expired()


def infeasible_plan(problem: Problem, reason: str, stats: Mapping[str, Any] | None = None) -> Plan:
    return Plan(stages=(), status="infeasible", schedule=problem.settings.schedule,
                notes=(reason,), stats=dict(stats or {}))


def obviously_infeasible(problem: Problem) -> str | None:
    """A reason when no placement can fit: one op larger than every device, or too little
    memory in total; ``None`` otherwise."""
    add, work = op_memory_bytes(problem)
    caps = device_caps_bytes(problem)
    single = add + work
    worst = int(np.argmax(single))
    if single[worst] > caps.max():
        return (f"op {problem.graph.nodes[worst].id!r} needs {single[worst] / 2**30:.3f} GiB, more than any "
                f"device holds ({caps.max() / 2**30:.3f} GiB)")
    if add.sum() > caps.sum():
        return (f"the graph needs at least {add.sum() / 2**30:.3f} GiB, the devices hold "
                f"{caps.sum() / 2**30:.3f} GiB together")
    return None


TIMED_OUT_NOTE = "time limit reached: the remaining ops were placed by the fast rule"


def finish_schedule(problem: Problem, sched: ListSchedule, *, timed_out: bool, stats: Mapping[str, Any],
                    notes: Sequence[str] = ()) -> Plan:
    """:func:`finish_latency_plan` of an op-level schedule, with its best-effort count and
    whether the time limit cut it short (then :func:`complete_fast` placed the rest)."""
    return finish_latency_plan(problem, sched.device, sched.start_s, status="feasible",
                               stats={**stats, "best_effort_ops": sched.best_effort, "timed_out": timed_out},
                               notes=[*notes, TIMED_OUT_NOTE] if timed_out else notes)


def finish_latency_plan(problem: Problem, device_of: Sequence[int], start_s: Sequence[float], *,
                        status: Status, stats: Mapping[str, Any], notes: Sequence[str] = ()) -> Plan:
    """Turn a placement + start times into a latency plan, or an infeasible one when the
    placement exceeds some device's memory (best effort failed); the claim is simulated."""
    from solvers.cost.memory import device_memory_bytes
    from solvers.simulate import simulate

    g, topo = problem.graph, problem.topology
    dev = np.asarray(device_of, dtype=np.int64)
    caps = device_caps_bytes(problem)
    over = []
    for d in range(topo.n_devices):
        ops = np.flatnonzero(dev == d)
        if len(ops) and device_memory_bytes(problem, ops) > caps[d]:
            over.append(topo.devices[d].id)
    if over:
        return infeasible_plan(problem, f"best-effort placement exceeds the memory of {', '.join(over)}",
                               {**stats, "over_capacity_devices": over})
    start = np.asarray(start_s, dtype=np.float64)
    pos = g.topo_position
    stages: list[Stage] = []
    order: dict[str, tuple[str, ...]] = {}
    for d in range(topo.n_devices):
        ops = np.flatnonzero(dev == d)
        if not len(ops):
            continue
        ops = ops[np.lexsort((pos[ops], start[ops]))]
        ids = tuple(g.nodes[int(v)].id for v in ops)
        stages.append(Stage(ids, (topo.devices[d].id,)))
        order[topo.devices[d].id] = ids
    plan = Plan(stages=tuple(stages), micro_batches=1, schedule=problem.settings.schedule, status=status,
                order=order, stats=dict(stats), notes=tuple(notes))
    objective_s = float(simulate(problem, plan).metrics["objective_s"])
    return plan.with_(claimed_objective_s=objective_s,
                      stats={**plan.stats, "devices_used": len(stages)})
