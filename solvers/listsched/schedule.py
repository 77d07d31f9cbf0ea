"""A partial list schedule: device timelines, channel queues, exact memory per device."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from solvers.arrays import FloatArray
from solvers.base import Budget
from solvers.listsched.tasks import LatencyCosts, TaskGraph
from solvers.listsched.timeline import Timeline

_MEM_SLACK = 1e-9  # relative slack so float summation order never flips a fit at the boundary
_INF = float("inf")
# a data-ready time, with the arrivals its new messages book (producer, time) and the channels
# into the device after them (None, None: no message to send)
Ready = tuple[float, list[tuple[int, float]] | None, list[float] | None]


class MemoryTracker:
    """Exact latency-plan memory per device: ``sum(additive) + max(working)``."""

    def __init__(self, caps_bytes: FloatArray) -> None:
        self.caps = [float(c) for c in caps_bytes]
        self.limits = [c * (1.0 - _MEM_SLACK) for c in self.caps]  # what fits compares the need with
        self.add_bytes = [0.0] * len(self.caps)
        self.work_bytes = [0.0] * len(self.caps)

    def need_bytes(self, d: int, add: float, work: float) -> float:
        return self.add_bytes[d] + add + max(self.work_bytes[d], work)

    def fits(self, d: int, add: float, work: float) -> bool:
        return self.need_bytes(d, add, work) <= self.limits[d]

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
        # each device's idle gaps, first start and last end (the insertion search's, solvers.listsched.timeline)
        self._lines = [Timeline() for _ in range(n_dev)]
        # _chan_free[d][e]: when the channel from device e to device d is free (by receiver: a
        # task's messages to d read and book one list)
        self._chan_free = [[0.0] * n_dev for _ in range(n_dev)]
        # _arrival[d][p]: arrival on device d of producer p's message (None: not sent)
        self._arrival: list[list[float | None]] = [[None] * n for _ in range(n_dev)]
        self.mem = MemoryTracker(caps_bytes)
        self.best_effort = 0  # tasks placed although no device had room
        # the cost matrices and task figures as lists (scalar reads from lists are the fast ones)
        self._latency_s: list[list[float]] = costs.latency_s.tolist()
        self._inv_bandwidth_sPB: list[list[float]] = costs.inv_bandwidth_sPB.tolist()
        self._dur_s: list[list[float]] = tasks.dur_s.tolist()
        self._add_bytes: list[float] = tasks.mem_add_bytes.tolist()
        self._work_bytes: list[float] = tasks.mem_work_bytes.tolist()
        # est_all's data-ready time per device of task _ready_v: (time, arrivals, channel ends),
        # and its earliest starts (what a commit of _ready_v that follows starts at)
        self._ready_v = -1
        self._ready_of_v: dict[int, Ready] = {}
        self._est_of_v: list[float] = []
        # est_all's fit test in one step while every device has room for any task: roomy[d] says
        # that device d would hold the task with the largest additive and the largest working bytes
        # at once (_room_s), so every task fits there (float sums are monotone: the fit test's own
        # sum of smaller terms is no larger)
        self._devices = list(range(n_dev))
        self._keep_first = [[d, *(e for e in range(n_dev) if e != d)] for d in range(n_dev)]  # est_all's keep
        self._add_max = max(0.0, max(self._add_bytes, default=0.0))
        self._work_max = max(0.0, max(self._work_bytes, default=0.0))
        self._roomy = [self._room(d) for d in range(n_dev)]
        self._n_roomy = sum(self._roomy)

    def _room(self, d: int) -> bool:
        """Whether every task fits on ``d`` as :meth:`MemoryTracker.fits` tests it (see ``__init__``)."""
        mem = self.mem
        return (mem.add_bytes[d] + self._add_max) + (mem.work_bytes[d] + self._work_max) <= mem.limits[d]

    def _messages(self, v: int) -> list[tuple[float, int, int, float]]:
        """``v``'s incoming messages as (producer finish, producer, producer device, bytes),
        sorted: the order in which they take their channels (one producer: nothing to sort)."""
        pred, finish, device = self.tasks.pred[v], self.finish_s, self.device
        if len(pred) == 1:
            p = pred[0]
            return [(finish[p], p, device[p], self.tasks.pred_bytes[v][0])]
        return sorted(zip(map(finish.__getitem__, pred), pred, map(device.__getitem__, pred), self.tasks.pred_bytes[v]))

    def _ready_on(self, devices: Sequence[int], msgs: Sequence[tuple[float, int, int, float]],
                  out: dict[int, Ready]) -> None:
        """Data-ready time on each of ``devices`` of a task with messages ``msgs``, with the
        arrivals of its new messages (by producer) and the channels into ``d`` as they are after
        them (into ``out[d]``, not written to the schedule; both None when nothing is sent).

        A producer on ``d`` only orders; a message already sent to ``d`` (the producer's output
        went there for another consumer) arrives when it did; an empty message is a pure
        dependency that never waits for its channel; the others take their channel in the
        order of their producers' finish.  Postal planning (``tasks.postal_planning``): every
        message costs its own transfer, no queue."""
        lat, inv, f = self._latency_s, self._inv_bandwidth_sPB, self.costs.msg_factor
        if not self.costs.channel_queues:  # postal
            for d in devices:
                t = 0.0  # max(...) chains written as comparisons (the same values, faster)
                for fin, _, dp, size in msgs:
                    if dp != d:
                        fin += f * (lat[dp][d] + size * inv[dp][d]) if size > 0.0 else 0.0  # LatencyCosts.comm_s
                    if fin > t:
                        t = fin
                out[d] = (t, None, None)
            return
        for d in devices:
            t = 0.0
            arrived = self._arrival[d]
            chan: list[float] | None = None  # the channels into d, copied when v books one
            booked: list[tuple[int, float]] = []
            for fin, p, dp, size in msgs:
                if dp == d:
                    if fin > t:
                        t = fin
                    continue
                hit = arrived[p]
                if hit is not None:
                    if hit > t:
                        t = hit
                    continue
                comm = f * (lat[dp][d] + size * inv[dp][d]) if size > 0.0 else 0.0  # LatencyCosts.comm_s
                if comm <= 0.0:
                    if fin > t:
                        t = fin
                    continue
                if chan is None:
                    chan = self._chan_free[d][:]
                a = chan[dp]
                if fin > a:
                    a = fin
                a += comm
                chan[dp] = a
                booked.append((p, a))
                if a > t:
                    t = a
            out[d] = (t, booked, chan) if chan is not None else (t, None, None)

    def _ready_s(self, v: int, d: int, book: bool) -> float:
        """Data-ready time of ``v`` on ``d``; ``book`` reserves the channels for new messages
        (from what :meth:`est_all` computed for ``v`` when nothing was placed since)."""
        cached = self._ready_of_v.get(d) if v == self._ready_v else None
        if cached is None:
            one: dict[int, Ready] = {}
            self._ready_on((d,), self._messages(v), one)
            cached = one[d]
        t, booked, chan = cached
        if book and booked is not None and chan is not None:
            arrived = self._arrival[d]
            for p, a in booked:
                arrived[p] = a
            self._chan_free[d] = chan
        return t

    def ready_s(self, v: int, d: int) -> float:
        return self._ready_s(v, d, False)

    def slot_s(self, d: int, ready: float, dur: float, insertion: bool) -> float:
        """Earliest start >= ``ready`` on ``d``: the first idle gap that holds ``dur``, or after
        the last task (insertion-based: Celeritas Eq. 7, HEFT's EST,
        :meth:`Timeline.slot_s <solvers.listsched.timeline.Timeline.slot_s>`); without
        insertion, after the last task."""
        if not insertion:
            return max(ready, self.free_s[d])
        return self._lines[d].slot_s(ready, dur)

    def est_s(self, v: int, d: int, insertion: bool) -> float:
        """Earliest start time of ``v`` on ``d`` (Celeritas Eq. 7; HEFT's EST)."""
        return self.slot_s(d, self._ready_s(v, d, False), self._dur_s[v][d], insertion)

    def est_all(self, v: int, keep: int = -1) -> list[float]:
        """``est_s(v, d, True)`` for every device ``d`` where ``v`` fits, ``inf`` elsewhere,
        with the producers' messages sorted once for all devices; a :meth:`commit` of ``v``
        that follows reuses the data-ready time computed here.

        With ``keep >= 0`` only the least EST and the EST on ``keep`` are wanted (Adjusting
        Placement, Algorithm 2): ``keep`` is timed first, and a device where ``v`` cannot start
        before the least EST found so far gets a lower bound of its EST above that least
        instead of the search of its gaps: its data-ready time, or the start of the first idle
        gap after it (:meth:`Timeline.bound_s <solvers.listsched.timeline.Timeline.bound_s>`).
        The least EST, the devices
        that have it and the EST on ``keep`` are the same as without ``keep``."""
        msgs = self._messages(v)
        n_dev = self.n_devices
        self._ready_v, ready = v, self._ready_of_v
        ready.clear()
        dur_v = self._dur_s[v]
        if self._n_roomy == n_dev:
            fitting = self._devices
        else:  # not MemoryTracker.fits, inlined
            add, work = self._add_bytes[v], self._work_bytes[v]
            mem = self.mem
            mem_add, mem_work, limits = mem.add_bytes, mem.work_bytes, mem.limits
            fitting = [d for d in range(n_dev) if not mem_add[d] + add + max(mem_work[d], work) > limits[d]]
        self._ready_on(fitting, msgs, ready)
        out = [_INF] * n_dev
        known = [_INF] * n_dev  # what commit may reuse: exact ESTs only
        lines = self._lines
        least = _INF
        bound = keep >= 0
        if bound and keep in ready:
            fitting = self._keep_first[keep] if fitting is self._devices else [keep, *(d for d in fitting if d != keep)]
        for d in fitting:
            dur, t = dur_v[d], ready[d][0]
            if bound and t > least and d != keep:
                out[d] = t
                continue
            line = lines[d]
            # Timeline.slot_s without the call where it answers at once, and a lower bound (the
            # start of the first gap that may hold v) that may spare the search
            if t >= line.last_end:
                est = t
            elif dur <= 0.0:
                est = line.slot_s(t, dur)
            else:
                i = line.gap_from(t, dur)
                if i < 0:
                    est = t
                elif bound and d != keep and line.bound_s(i) > least:
                    out[d] = line.bound_s(i)
                    continue
                else:
                    est = line.first_gap(i, dur)
            known[d] = out[d] = est
            if est < least:
                least = est
        self._est_of_v = known
        return out

    def dur_lists_s(self) -> list[list[float]]:
        """``tasks.dur_s`` as lists (task -> device -> seconds)."""
        return self._dur_s

    def fits(self, v: int, d: int) -> bool:
        return self.mem.fits(d, self._add_bytes[v], self._work_bytes[v])

    def commit(self, v: int, d: int, insertion: bool, best_effort: bool = False) -> float:
        """Place ``v`` on ``d`` at its earliest start; book its messages; return the start (the
        one :meth:`est_all` found for ``v`` on ``d`` when nothing was placed since)."""
        dur = self._dur_s[v][d]
        ready = self._ready_s(v, d, True)
        known = self._est_of_v[d] if v == self._ready_v and insertion else _INF
        start = known if known < _INF else self.slot_s(d, ready, dur, insertion)
        end = start + dur
        self.device[v] = d
        self.start_s[v] = start
        self.finish_s[v] = end
        self._ready_v = -1  # the channels changed: est_all's figures are stale
        self._insert(d, start, end)
        self._account(d, self._add_bytes[v], self._work_bytes[v])
        if best_effort:
            self.best_effort += 1
        return start

    def _insert(self, d: int, start: float, end: float) -> None:
        """Add a task from ``start`` to ``end`` to device ``d``'s timeline."""
        self._lines[d].insert(start, end)
        if end > self.free_s[d]:
            self.free_s[d] = end

    def _account(self, d: int, add: float, work: float) -> None:
        """Add a task's additive and working bytes to device ``d``'s memory."""
        self.mem.place(d, add, work)
        if self._roomy[d] and not self._room(d):
            self._roomy[d] = False
            self._n_roomy -= 1

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
