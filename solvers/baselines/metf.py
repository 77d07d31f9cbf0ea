"""``m-etf``: Baechi's memory-constrained Earliest Time First (Jeon et al., SoCC'20, §4.2;
ETF: Hwang et al. 1989).

At every step, among the ops whose producers are all placed and every device with room for
the op, pick the (op, device) pair with the earliest start time ``max(data ready on the
device, device free)`` (no insertion, as ETF); ties go to the op listed first, then the lower
device.  Data-ready times include the message queues of the shared channel model as they
stand when the op becomes ready.  When no ready op fits anywhere: best effort (the op with
the lowest topological rank on the device with the most free memory), reported infeasible.

Under a time limit m-ETF stops early enough to place the ops it has not reached by the fast rule
(:func:`~solvers.listsched.schedule.complete_fast`) and to build and simulate the plan within the
limit: it keeps :func:`~solvers.listsched.end_reserve_s` for that end (three times the op-level
schedule's measured set-up, at least 0.2 s; ``stats.end_reserve_s``).

:func:`etf_schedule` is shared with ``m-sct``, which forces a favourite child onto its
favourite parent's device.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from solvers.arrays import BoolArray, FloatArray, IntArray
from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.listsched import (
    ListSchedule,
    budget_before_end,
    complete_fast,
    end_reserve_s,
    expired_every,
    finish_schedule,
    start_op_schedule,
)
from solvers.model.plan import Plan
from solvers.model.problem import Problem


def etf_schedule(sched: ListSchedule, pins: Mapping[int, int], budget: Budget,
                 favourite_child: Sequence[int] | None = None) -> bool:
    """Run (m-)ETF to completion on ``sched``; return True when the budget ran out first
    (the rest is then placed by :func:`complete_fast`).  ``favourite_child[p]`` (or -1):
    the op that must follow ``p`` on ``p``'s device when it fits there (m-SCT)."""
    tasks = sched.tasks
    n, n_dev = tasks.n, sched.n_devices
    indeg = [len(p) for p in tasks.pred]
    fav_parent = [-1] * n
    if favourite_child is not None:
        for p, c in enumerate(favourite_child):
            if c >= 0:
                fav_parent[c] = p
    # slot arrays: the ready ops live in slots 0 .. m-1 (swap-removal keeps them dense)
    arr = np.zeros((n, n_dev))  # arr[slot, d] = data-ready time of the slot's op on device d
    s_op = np.zeros(n, dtype=np.int64)  # s_op[slot] = the op
    s_add = np.zeros(n)  # additive / working bytes of the op
    s_work = np.zeros(n)
    s_forced = np.full(n, -1, dtype=np.int64)  # device the op must go to (pin, favourite parent) or -1
    s_pinned = np.zeros(n, dtype=bool)  # True: a pin (memory ignored), False: a favourite (only if it fits)
    caps = sched.mem.fit_limits_bytes()
    m = 0

    def push(v: int) -> None:
        nonlocal m
        arr[m] = [sched.ready_s(v, d) for d in range(n_dev)]
        s_op[m], s_add[m], s_work[m] = v, tasks.mem_add_bytes[v], tasks.mem_work_bytes[v]
        s_pinned[m] = v in pins
        s_forced[m] = pins[v] if v in pins else (sched.device[fav_parent[v]] if fav_parent[v] >= 0 else -1)
        m += 1

    for v in sorted((v for v in range(n) if indeg[v] == 0), key=lambda v: int(tasks.rank[v])):
        push(v)
    step = 0
    while m:
        if expired_every(budget, step):
            rest = sorted((v for v in range(n) if sched.device[v] < 0), key=lambda v: int(tasks.rank[v]))
            complete_fast(sched, rest, pins)
            return True
        step += 1
        slot, d = _pick(sched, arr[:m], s_add[:m], s_work[:m], s_forced[:m], s_pinned[:m], caps)
        if d < 0:  # nothing fits anywhere: best effort on the ready op of lowest rank
            slot = int(np.argmin(tasks.rank[s_op[:m]]))
            v = int(s_op[slot])
            sched.commit(v, pins.get(v, sched.mem.most_free()), False, best_effort=True)
        else:
            v = int(s_op[slot])
            sched.commit_forced(v, d, False)
        m -= 1
        for a in (arr, s_op, s_add, s_work, s_forced, s_pinned):
            a[slot] = a[m]
        for s in tasks.succ[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                push(s)
    return False


def _pick(sched: ListSchedule, arr: FloatArray, add: FloatArray, work: FloatArray, forced: IntArray,
          pinned: BoolArray, caps: FloatArray) -> tuple[int, int]:
    """The (slot, device) of the earliest start among fitting pairs (a forced op only on its
    device); ``(-1, -1)`` when no pair fits."""
    free = np.asarray(sched.free_s)
    est = np.maximum(arr, free[None, :])
    madd = np.asarray(sched.mem.add_bytes)
    mwork = np.asarray(sched.mem.work_bytes)
    fits = madd[None, :] + add[:, None] + np.maximum(mwork[None, :], work[:, None]) <= caps[None, :]
    est = np.where(fits, est, np.inf)
    idx = np.flatnonzero(forced >= 0)
    if len(idx):
        dev = forced[idx]
        ok = pinned[idx] | fits[idx, dev]
        idx, dev = idx[ok], dev[ok]
        keep = np.maximum(arr[idx, dev], free[dev])
        est[idx] = np.inf
        est[idx, dev] = keep
    flat = int(np.argmin(est))
    slot, d = divmod(flat, est.shape[1])
    return (slot, d) if np.isfinite(est[slot, d]) else (-1, -1)


class METFOptions(SolverOptions):
    """m-ETF has no options."""


class METFSolver:
    name: ClassVar[str] = "m-etf"
    summary: ClassVar[str] = "Baechi m-ETF: earliest (op, device) start first, memory-constrained"
    objectives: ClassVar[tuple[str, ...]] = ("latency",)
    options_type: ClassVar[type[SolverOptions]] = METFOptions
    version: ClassVar[str] = "1"

    def solve(self, problem: Problem, options: METFOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        set_up = time.monotonic()
        start = start_op_schedule(problem)
        if isinstance(start, Plan):
            return start
        sched, pins = start
        reserve_s = end_reserve_s(time.monotonic() - set_up)
        timed_out = etf_schedule(sched, pins, budget_before_end(budget, reserve_s))
        progress(ProgressEvent(0.9, sched.makespan_s()))
        return finish_schedule(problem, sched, timed_out=timed_out, stats={"end_reserve_s": reserve_s})
