"""Warm start: a memory-aware list schedule and single-device plans, timed exactly.

Candidates: the plans of the heuristics handed in (:class:`Heuristic`: list schedulers of other
families, named by the composition above the families, :mod:`solvers.composed.moirai`), on the
uncoarsened graph with their own per-device order (on units, each unit goes to the device holding
most of its ops' work and each device runs its units by decreasing upward rank); our own list
schedule, and every single-device plan. The list schedule is HEFT-like: tasks are taken by
decreasing upward rank (mean time on the devices plus the mean transfer time of the heaviest path to
a sink), and each unit's forward task goes to the allowed device, with room left, that finishes it
earliest (transfers estimated without channel contention); a backward task runs on its forward's
device. Every candidate is timed by :func:`~solvers.moirai.schedule.replay` (in a training pass the
list schedule orders the forward tasks and each device runs its backward tasks after them,
reversed); the best one is the MILP's incumbent, the source of its hint and of the big-M horizon
(docs/moirai.md).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from solvers.base import Budget, Solver, no_progress, parse_options
from solvers.model.errors import PlacerError
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.moirai.instance import Instance, OutOfTime
from solvers.moirai.schedule import TimedSchedule, full_order, memory_fits, replay


class Heuristic(NamedTuple):
    """A warm-start candidate: another family's solver, run with its default options on the problem."""

    name: str
    solver: type[Solver]

    def plan(self, problem: Problem, budget: Budget) -> Plan:
        """The solver's plan for ``problem`` within ``budget`` (its default options, no progress)."""
        return self.solver().solve(problem, parse_options(self.solver.options_type, {}, self.name), budget,
                                   no_progress)


def upward_rank(inst: Instance) -> list[float]:
    """Mean task time plus the heaviest mean-time path to a sink (HEFT's rank_u)."""
    k = inst.n_devices
    mean_dur = inst.dur_s.mean(axis=1)
    off = [(a, b) for a in range(k) for b in range(k) if a != b]
    topology = inst.problem.topology
    # each channel's postal time (solvers.cost.comm.transfer_s) at once, the pairs in the same order
    latency_s = np.array([topology.latency_s[a, b] for a, b in off], dtype=np.float64)
    bandwidth_Bps = np.array([topology.bandwidth_Bps[a, b] for a, b in off], dtype=np.float64)
    mean_comm: dict[float, float] = {}
    rank = [0.0] * inst.n_tasks
    for t in reversed(inst.topo):
        best = 0.0
        for s, size in inst.succ[t]:
            comm = mean_comm.get(size)
            if comm is None:
                comm = float(np.mean(latency_s + size / bandwidth_Bps)) if off and size > 0 else 0.0
                mean_comm[size] = comm
            best = max(best, comm + rank[s])
        rank[t] = float(mean_dur[t]) + best
    return rank


LIST_CHECK_EVERY = 256  # tasks between two looks at the clock in the list schedule


def list_schedule(inst: Instance, deadline: float | None = None) -> TimedSchedule | None:
    """The HEFT-like list schedule (module doc), or ``None`` when some unit fits nowhere.
    ``deadline`` (``time.monotonic()``): raise :class:`~solvers.moirai.instance.OutOfTime` once
    it has passed, looked at every ``LIST_CHECK_EVERY`` tasks and before the final replay."""
    rank = upward_rank(inst)
    fwd = inst.n_units  # forward tasks are 0 .. n_units - 1
    indeg = [len(p) for p in inst.pred]
    ready = [(-rank[t], t) for t in range(fwd) if indeg[t] == 0]
    heapq.heapify(ready)
    device = [-1] * inst.n_units
    used = np.zeros(inst.n_devices)
    work = np.zeros(inst.n_devices)
    free = np.zeros(inst.n_devices)
    end = [0.0] * inst.n_tasks
    order: dict[int, list[int]] = {}
    placed = 0
    while ready:
        if deadline is not None and placed % LIST_CHECK_EVERY == 0 and time.monotonic() > deadline:
            raise OutOfTime(f"the list schedule ran out of time after {placed} of {fwd} tasks")
        placed += 1
        _, t = heapq.heappop(ready)
        u = inst.task_unit[t]
        if device[u] < 0:
            best: tuple[float, int] | None = None
            for k in range(inst.n_devices):
                need = used[k] + inst.static_bytes[u] + max(work[k], inst.work_bytes[u])
                if not inst.allowed[u, k] or need > inst.cap_bytes[k]:
                    continue
                finish = _start_on(inst, device, end, free, t, k) + float(inst.dur_s[t, k])
                if best is None or finish < best[0]:
                    best = (finish, k)
            if best is None:
                return None
            device[u] = best[1]
            used[best[1]] += inst.static_bytes[u]
            work[best[1]] = max(work[best[1]], inst.work_bytes[u])
        k = device[u]
        end[t] = _start_on(inst, device, end, free, t, k) + float(inst.dur_s[t, k])
        free[k] = end[t]
        order.setdefault(k, []).append(t)
        for s, _ in inst.succ[t]:
            indeg[s] -= 1
            if indeg[s] == 0 and s < fwd:
                heapq.heappush(ready, (-rank[s], s))
    if deadline is not None and time.monotonic() > deadline:
        raise OutOfTime(f"the list schedule ran out of time before its replay ({fwd} tasks placed)")
    return replay(inst, device, full_order(inst, order))


def _start_on(inst: Instance, device: list[int], end: list[float], free: np.ndarray, t: int, k: int) -> float:
    start = float(free[k])
    sizes = {p: b for p in inst.pred[t] for s, b in inst.succ[p] if s == t}
    for p in inst.pred[t]:
        src = device[inst.task_unit[p]]
        start = max(start, end[p] + inst.comm_s(sizes[p], src, k))
    return start


def single_device(inst: Instance, k: int) -> TimedSchedule | None:
    """Everything on device ``k`` in topological order, if it fits."""
    device = [k] * inst.n_units
    if not memory_fits(inst, device):
        return None
    return replay(inst, device, full_order(inst, {k: [t for t in inst.topo if t < inst.n_units]}))


def by_rank(inst: Instance, device_of_unit: Sequence[int]) -> TimedSchedule | None:
    """A placement run in decreasing upward rank on every device (ties: topological), if it fits."""
    if not memory_fits(inst, device_of_unit):
        return None
    rank = upward_rank(inst)
    pos = {t: i for i, t in enumerate(inst.topo)}
    order: dict[int, list[int]] = {}
    for t in sorted(range(inst.n_units), key=lambda t: (-rank[t], pos[t])):
        order.setdefault(device_of_unit[t], []).append(t)
    return replay(inst, device_of_unit, full_order(inst, order))


def from_plan(inst: Instance, plan: Plan) -> TimedSchedule | None:
    """A heuristic's plan on the units: each unit where most of its reference work ran."""
    g, topo = inst.problem.graph, inst.problem.topology
    where: dict[int, int] = {}
    for stage in plan.stages:
        for op in stage.ops:
            where[g.index[op]] = topo.index[stage.devices[0]]
    if len(where) != g.n_ops:
        return None
    device = []
    for ops in inst.grouping.groups:
        work = np.zeros(inst.n_devices)
        for v in ops:
            work[where[v]] += g.fwd_s[v] + 1e-12
        device.append(int(np.argmax(work)))
    return by_rank(inst, device)


def schedule_from_plan(inst: Instance, plan: Plan) -> TimedSchedule | None:
    """A plan on the uncoarsened instance with its own per-device ``order`` (units = ops), timed
    exactly; falls back to :func:`from_plan` when the plan has no usable order."""
    g, topo = inst.problem.graph, inst.problem.topology
    if inst.n_units != g.n_ops or not plan.order or any(len(s.devices) != 1 for s in plan.stages):
        return from_plan(inst, plan)
    unit = inst.grouping.unit_of(g.n_ops)
    device = [-1] * g.n_ops
    for stage in plan.stages:
        for op in stage.ops:
            device[unit[g.index[op]]] = topo.index[stage.devices[0]]
    order = {topo.index[dev]: [unit[g.index[op]] for op in ops] for dev, ops in plan.order.items() if ops}
    if min(device) < 0 or not memory_fits(inst, device) or sum(map(len, order.values())) != g.n_ops:
        return from_plan(inst, plan)
    try:
        return replay(inst, device, full_order(inst, order))
    except PlacerError:  # an order that deadlocks: keep the placement, rank order
        return from_plan(inst, plan)


def heuristic_plans(heuristics: Sequence[Heuristic], inst: Instance, budget: Budget) -> list[TimedSchedule]:
    """Run ``heuristics`` and map their plans onto the units."""
    out = []
    for heuristic in heuristics:
        if budget.expired():
            continue
        try:
            plan = heuristic.plan(inst.problem, budget.sub(0.5))
        except PlacerError:
            continue
        if plan.status != "infeasible" and plan.stages:
            sched = schedule_from_plan(inst, plan)
            if sched is not None:
                out.append(sched)
    return out


def warm_start(inst: Instance, heuristics: Sequence[Heuristic] = (), budget: Budget | None = None) -> TimedSchedule | None:
    """The best of the heuristics' plans, the list schedule and the single-device plans (``None``
    if none fits)."""
    candidates = heuristic_plans(heuristics, inst, budget or Budget(None)) if heuristics else []
    candidates += [c for c in [list_schedule(inst)] + [single_device(inst, k) for k in range(inst.n_devices)]
                   if c is not None]
    return min(candidates, key=lambda c: c.makespan_s) if candidates else None
