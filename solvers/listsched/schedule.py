"""A partial list schedule: device timelines, channel queues, exact memory per device."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

import numpy as np

from solvers.arrays import FloatArray
from solvers.base import Budget
from solvers.listsched.tasks import LatencyCosts, TaskGraph

_MEM_SLACK = 1e-9  # relative slack so float summation order never flips a fit at the boundary


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
            if not self.costs.channel_queues:  # postal planning, per edge (tasks.postal_planning)
                t = max(t, self.finish_s[p] + self.costs.comm_s(dp, d, size))
                continue
            hit = self._arrival.get((p, d))
            if hit is not None:
                t = max(t, hit)
            elif self.costs.comm_s(dp, d, size) <= 0.0:  # a pure dependency: never waits for the channel
                t = max(t, self.finish_s[p])
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
