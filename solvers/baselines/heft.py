"""``heft``: Heterogeneous Earliest Finish Time (Topcuoglu, Hariri & Wu, TPDS 2002).

Priorities: upward rank ``rank_u(v) = w(v) + max_{s in succ(v)} (c(v, s) + rank_u(s))`` with
device-averaged op times ``w`` and message times ``c`` (§4.1, Eq. 7–8 of the HEFT paper);
ops in decreasing rank (ties: topological position, so the list stays topological).  Each op
goes to the device with the earliest finish time, insertion-based (§4.2); devices without room
for the op are skipped (our memory extension); when none has room, best effort (most free
memory) and the plan is reported infeasible.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from solvers.arrays import FloatArray
from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.listsched import (
    LatencyCosts,
    TaskGraph,
    complete_fast,
    expired_every,
    finish_schedule,
    start_op_schedule,
)
from solvers.listsched.orders import b_level
from solvers.model.plan import Plan
from solvers.model.problem import Problem


def upward_rank(tasks: TaskGraph, costs: LatencyCosts) -> FloatArray:
    """``rank_u`` of every task (HEFT Eq. 8): the b-level (Celeritas Eq. 3) under device-averaged
    op times and message times."""
    f = costs.msg_factor
    return b_level(tasks.succ, tasks.succ_bytes, tasks.dur_s.mean(axis=1), f * costs.mean_latency_s,
                   f * costs.mean_inv_bandwidth_sPB, np.argsort(tasks.rank, kind="stable"))


class HEFTOptions(SolverOptions):
    """``insertion``: fill idle gaps (the paper's policy) or append at the end of a device."""

    insertion: bool = True


class HEFTSolver:
    name: ClassVar[str] = "heft"
    summary: ClassVar[str] = "HEFT: upward-rank list scheduling, insertion-based earliest finish time"
    objectives: ClassVar[tuple[str, ...]] = ("latency",)
    options_type: ClassVar[type[SolverOptions]] = HEFTOptions
    version: ClassVar[str] = "1"

    def solve(self, problem: Problem, options: HEFTOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        start = start_op_schedule(problem)
        if isinstance(start, Plan):
            return start
        sched, pins = start
        tasks, costs = sched.tasks, sched.costs
        rank = upward_rank(tasks, costs)
        order = sorted(range(tasks.n), key=lambda v: (-rank[v], int(tasks.rank[v])))
        ins, timed_out = options.insertion, False
        for step, v in enumerate(order):
            if expired_every(budget, step):
                complete_fast(sched, sorted(order[step:], key=lambda u: int(tasks.rank[u])), pins)
                timed_out = True
                break
            if v in pins:
                sched.commit_forced(v, pins[v], ins)
                continue
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
        progress(ProgressEvent(0.9, sched.makespan_s()))
        return finish_schedule(problem, sched, timed_out=timed_out, stats={"insertion": ins})
