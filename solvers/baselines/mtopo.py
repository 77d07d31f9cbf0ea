"""``m-topo``: Baechi's memory-constrained topological placement (Jeon et al., SoCC'20, §4.1).

Ops in M-TOPO order (BFS-like Kahn, Celeritas §4.2.2) fill device 0 up to a balanced memory
share, then device 1, and so on: the share is ``1.05 x (total additive memory / devices +
largest working memory)``, never more than the device holds.  An op that fits no later device
goes to any device that still has room; if none, best effort (the device with the most free
memory) and the plan is reported infeasible.  Times for the run order come from the shared
list scheduler (append, no insertion).
"""

from __future__ import annotations

from typing import ClassVar

from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.listsched import (
    complete_fast,
    expired_every,
    finish_schedule,
    start_op_schedule,
)
from solvers.listsched.orders import m_topo_order
from solvers.model.plan import Plan
from solvers.model.problem import Problem

SHARE_SLACK = 1.05


class MTopoOptions(SolverOptions):
    """m-TOPO has no options."""


class MTopoSolver:
    name: ClassVar[str] = "m-topo"
    summary: ClassVar[str] = "Baechi m-TOPO: topological order, devices filled in turn up to a balanced memory share"
    objectives: ClassVar[tuple[str, ...]] = ("latency",)
    options_type: ClassVar[type[SolverOptions]] = MTopoOptions
    version: ClassVar[str] = "1"

    def solve(self, problem: Problem, options: MTopoOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        start = start_op_schedule(problem)
        if isinstance(start, Plan):
            return start
        sched, pins = start
        tasks, caps = sched.tasks, sched.mem.caps
        order = m_topo_order(tasks.succ, tasks.pred).tolist()
        n_dev = sched.n_devices
        share = SHARE_SLACK * (float(tasks.mem_add_bytes.sum()) / n_dev + float(tasks.mem_work_bytes.max()))
        limits = [min(float(c), share) for c in caps]
        limits[-1] = float(caps[-1])
        current, timed_out = 0, False
        for step, v in enumerate(order):
            if expired_every(budget, step):
                complete_fast(sched, order[step:], pins)
                timed_out = True
                break
            if v in pins:
                sched.commit_forced(v, pins[v], False)
                continue
            add, work = float(tasks.mem_add_bytes[v]), float(tasks.mem_work_bytes[v])
            while current < n_dev - 1 and sched.mem.need_bytes(current, add, work) > limits[current]:
                current += 1
            if sched.fits(v, current):
                sched.commit(v, current, False)
                continue
            fitting = [d for d in range(n_dev) if sched.fits(v, d)]
            d = fitting[0] if fitting else sched.mem.most_free()
            sched.commit(v, d, False, best_effort=not fitting)
        progress(ProgressEvent(0.9, sched.makespan_s()))
        return finish_schedule(problem, sched, timed_out=timed_out, stats={"memory_share_bytes": share})
