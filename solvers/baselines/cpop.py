"""``cpop``: Critical-Path-on-a-Processor (Topcuoglu, Hariri & Wu, TPDS 2002, §4.2).

Priority of an op: ``rank_u + rank_d`` (upward and downward rank with device-averaged op and
message times, Eq. 8–9).  The critical path is the chain from the entry op with the largest
priority, following at each step a successor of equal priority; its ops all go to the device
that runs them fastest in total (the critical-path processor, when it has room).  Ready ops are
taken by decreasing priority; an op off the critical path goes to the device with the earliest
finish time, insertion-based; devices without room are skipped (our memory extension, as in
``heft``).
"""

from __future__ import annotations

import heapq
from typing import ClassVar

import numpy as np

from solvers.arrays import FloatArray
from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.baselines.heft import upward_rank
from solvers.listsched import (
    LatencyCosts,
    ListSchedule,
    TaskGraph,
    complete_fast,
    expired_every,
    finish_schedule,
    levels,
    start_op_schedule,
)
from solvers.model.plan import Plan
from solvers.model.problem import Problem

TIE_REL = 1e-9  # priorities this close (relative) are equal


def critical_path(tasks: TaskGraph, priority: np.ndarray) -> list[int]:
    """The entry op of largest priority, then at each step a successor of the same priority."""
    sources = [v for v in range(tasks.n) if not tasks.pred[v]]
    v = max(sources, key=lambda s: (priority[s], -int(tasks.rank[s])))
    top = float(priority[v])
    path = [v]
    while tasks.succ[v]:
        same = [s for s in tasks.succ[v] if abs(float(priority[s]) - top) <= TIE_REL * max(1.0, abs(top))]
        if not same:
            break
        v = min(same, key=lambda s: int(tasks.rank[s]))
        path.append(v)
    return path


def cpop_priority(tasks: TaskGraph, costs: LatencyCosts) -> FloatArray:
    """``rank_u + rank_d`` of every op (§4.2, Eq. 8 and 9): upward rank (including the op's own
    device-averaged time) plus downward rank (the longest path from an entry op to the op,
    excluding its own time), both with device-averaged op and message times."""
    f = costs.msg_factor
    rank_d, _ = levels(tasks.succ, tasks.succ_bytes, tasks.pred, tasks.pred_bytes, tasks.dur_s.mean(axis=1),
                       f * costs.mean_latency_s, f * costs.mean_inv_bandwidth_sPB,
                       np.argsort(tasks.rank, kind="stable"))
    return upward_rank(tasks, costs) + rank_d


def critical_path_device(tasks: TaskGraph, on_path: set[int]) -> int:
    """The critical-path processor (§4.2): the device on which the critical
    path's ops take the least time in total (ties: the lower device)."""
    return int(np.argmin(tasks.dur_s[sorted(on_path)].sum(axis=0)))


def cpop_schedule(sched: ListSchedule, pins: dict[int, int], priority: FloatArray, on_path: set[int],
                  cp_device: int, insertion: bool, budget: Budget) -> bool:
    """The list phase of §4.2: ready ops by decreasing priority (ties: topological position); a
    critical-path op on ``cp_device`` (when it has room), any other on the device of earliest
    finish time.  Returns True when the budget ran out (the rest placed by ``complete_fast``)."""
    tasks = sched.tasks
    indeg = [len(p) for p in tasks.pred]
    ready = [(-float(priority[v]), int(tasks.rank[v]), v) for v in range(tasks.n) if indeg[v] == 0]
    heapq.heapify(ready)
    done: list[int] = []
    step = 0
    while ready:
        _, _, v = heapq.heappop(ready)
        if expired_every(budget, step):
            rest = sorted(set(range(tasks.n)) - set(done), key=lambda u: int(tasks.rank[u]))
            complete_fast(sched, rest, pins)
            return True
        step += 1
        CPOPSolver.place(sched, tasks, v, pins, cp_device if v in on_path else None, insertion)
        done.append(v)
        for s in tasks.succ[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, (-float(priority[s]), int(tasks.rank[s]), s))
    return False


class CPOPOptions(SolverOptions):
    """``insertion``: fill idle gaps (the paper's policy) or append at the end of a device."""

    insertion: bool = True


class CPOPSolver:
    name: ClassVar[str] = "cpop"
    summary: ClassVar[str] = "CPOP: critical path on one device, the rest by earliest finish time (priority rank_u + rank_d)"
    objectives: ClassVar[tuple[str, ...]] = ("latency",)
    options_type: ClassVar[type[SolverOptions]] = CPOPOptions
    version: ClassVar[str] = "1"

    def solve(self, problem: Problem, options: CPOPOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        start = start_op_schedule(problem)
        if isinstance(start, Plan):
            return start
        sched, pins = start
        tasks = sched.tasks
        priority = cpop_priority(tasks, sched.costs)
        on_path = set(critical_path(tasks, priority))
        cp_device = critical_path_device(tasks, on_path)
        timed_out = cpop_schedule(sched, pins, priority, on_path, cp_device, options.insertion, budget)
        progress(ProgressEvent(0.9, sched.makespan_s()))
        return finish_schedule(problem, sched, timed_out=timed_out,
                               stats={"insertion": options.insertion, "critical_path_ops": len(on_path),
                                      "cp_device": cp_device})

    @staticmethod
    def place(sched: ListSchedule, tasks: TaskGraph, v: int, pins: dict[int, int], cp_device: int | None,
               ins: bool) -> None:
        if v in pins:
            sched.commit_forced(v, pins[v], ins)
            return
        if cp_device is not None and sched.fits(v, cp_device):
            sched.commit(v, cp_device, ins)
            return
        best, best_d = float("inf"), -1
        for d in range(sched.n_devices):
            if sched.fits(v, d):
                finish = sched.est_s(v, d, ins) + float(tasks.dur_s[v, d])
                if finish < best:
                    best, best_d = finish, d
        if best_d < 0:
            sched.commit(v, sched.mem.most_free(), ins, best_effort=True)
        else:
            sched.commit(v, best_d, ins)
