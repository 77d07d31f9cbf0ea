"""Placement of the coarse graph (Celeritas §5.2): Order-Place and Adjusting Placement
(Algorithm 2), and the mapping of a coarse schedule back to the original ops.

Both walk the coarse nodes in CPD-TOPO order and time them with the shared list scheduler
(insertion-based EST per device, channel queues, exact memory).  Best effort (every device
out of memory): the node goes to the device with the most free memory — the text of §5.2
("the device with the lowest memory usage"); the count is reported so the caller can flag it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.listsched import LatencyCosts, ListSchedule, TaskGraph

_INF = float("inf")
_SHORT_SCAN = 8  # gaps scanned in Python; longer scans run in numpy


class GapSchedule(ListSchedule):
    """:class:`ListSchedule` with the same answers and a faster insertion search.

    The insertion-based EST (Eq. 7) scans a device's idle gaps from the data-ready time for the
    first one that holds the node; on wide graphs placed by b-level most scans pass dozens of
    gaps (up to thousands) and find none.  Per device this keeps ``gap[j] = start[j] - end[j -
    1]``, an upper bound of what the parent's scan tests at ``j`` (it starts after the latest end
    before ``j``), and finds the candidates ``gap[j] >= dur`` with a C-level scan of that list;
    the parent's test is then applied at the candidate, so every start time is the same.
    """

    def __init__(self, tasks: TaskGraph, costs: LatencyCosts, caps_bytes: FloatArray) -> None:
        super().__init__(tasks, costs, caps_bytes)
        self._gap: list[list[float]] = [[] for _ in range(self.n_devices)]
        self._gap_np: list[FloatArray] = [np.empty(0) for _ in range(self.n_devices)]
        self._latency_s: list[list[float]] = costs.latency_s.tolist()
        self._inv_bandwidth_sPB: list[list[float]] = costs.inv_bandwidth_sPB.tolist()
        self._dur_s: list[list[float]] = tasks.dur_s.tolist()
        self._add_bytes: list[float] = tasks.mem_add_bytes.tolist()
        self._work_bytes: list[float] = tasks.mem_work_bytes.tolist()
        self._fit_limit_bytes: list[float] = self.mem.fit_limits_bytes().tolist()
        # est_all's data-ready time per device for node _ready_v: (time, arrivals, channel ends)
        self._ready_v = -1
        self._ready_of_v: dict[int, tuple[float, list[tuple[int, float]], dict[int, float]]] = {}

    def est_all(self, v: int) -> list[float]:
        """``est_s(v, d, True)`` for every device ``d`` where ``v`` fits, ``inf`` elsewhere: the
        parent's data-ready time (Eq. 7) computed for all devices in one pass over the
        producers (sorted once; the parent sorts the same messages per device)."""
        finish, device, arrival, chan_free = self.finish_s, self.device, self._arrival, self._chan_free
        lat, inv, f = self._latency_s, self._inv_bandwidth_sPB, self.costs.msg_factor
        postal = not self.costs.channel_queues
        msgs = sorted(zip([finish[p] for p in self.tasks.pred[v]], self.tasks.pred[v],
                          [device[p] for p in self.tasks.pred[v]], self.tasks.pred_bytes[v], strict=True))
        add, work, mem = self._add_bytes[v], self._work_bytes[v], self.mem
        out: list[float] = []
        self._ready_v, ready = v, self._ready_of_v
        ready.clear()
        for d, dur in enumerate(self._dur_s[v]):
            if mem.add_bytes[d] + add + max(mem.work_bytes[d], work) > self._fit_limit_bytes[d]:
                out.append(_INF)
                continue
            t = 0.0  # the parent's max(...) chains, written as comparisons (the same values)
            local: dict[int, float] = {}
            booked: list[tuple[int, float]] = []
            for fin, p, dp, size in msgs:
                if dp == d:
                    if fin > t:
                        t = fin
                    continue
                comm = f * (lat[dp][d] + size * inv[dp][d]) if size > 0.0 else 0.0
                if postal:  # the parent's postal planning: per edge, no queue
                    if fin + comm > t:
                        t = fin + comm
                    continue
                hit = arrival.get((p, d))
                if hit is not None:
                    if hit > t:
                        t = hit
                    continue
                if comm <= 0.0:  # an empty message: a pure dependency, as in the parent
                    if fin > t:
                        t = fin
                    continue
                a = local.get(dp, chan_free[dp][d])
                if fin > a:
                    a = fin
                a += comm
                local[dp] = a
                booked.append((p, a))
                if a > t:
                    t = a
            ready[d] = (t, booked, local)
            ends = self._ends[d]
            k = bisect.bisect_right(ends, t)
            if k == len(ends) or self._starts[d][k] - t >= dur:
                out.append(t)  # slot_s's first answer, without the call
            else:
                out.append(self.slot_s(d, t, dur, True))
        return out

    def dur_lists_s(self) -> list[list[float]]:
        """``tasks.dur_s`` as lists (node -> device -> seconds)."""
        return self._dur_s

    def _ready_s(self, v: int, d: int, book: bool) -> float:
        """The parent's, from what :meth:`est_all` computed for ``v`` when nothing was placed since."""
        if v != self._ready_v or d not in self._ready_of_v:
            return super()._ready_s(v, d, book)
        t, booked, local = self._ready_of_v[d]
        if book:
            for p, a in booked:
                self._arrival[(p, d)] = a
            for dp, a in local.items():
                self._chan_free[dp][d] = a
        return t

    def slot_s(self, d: int, ready: float, dur: float, insertion: bool) -> float:
        if not insertion:
            return max(ready, self.free_s[d])
        starts, ends = self._starts[d], self._ends[d]
        k = bisect.bisect_right(ends, ready)
        n = len(ends)
        if k == n or starts[k] - ready >= dur:
            return ready
        gap, gap_np = self._gap[d], self._gap_np[d]
        j = k + 1
        while j < n:
            if n - j <= _SHORT_SCAN:
                j = next((i for i in range(j, n) if gap[i] >= dur), n)
            else:
                hits = gap_np[j:n] >= dur
                first = int(hits.argmax())
                j = j + first if hits[first] else n
            if j == n:
                break
            t = max(ready, max(ends[k:j]))
            if starts[j] - t >= dur:
                return t
            j += 1
        return max(ready, max(ends[k:]))  # what the parent's scan returns when no gap holds the node

    def commit(self, v: int, d: int, insertion: bool, best_effort: bool = False) -> float:
        start = super().commit(v, d, insertion, best_effort)
        self._ready_v = -1  # the channels changed: est_all's figures are stale
        starts, ends, gap = self._starts[d], self._ends[d], self._gap[d]
        k = bisect.bisect_right(starts, start) - 1  # the parent inserts after equal starts
        n = len(starts)
        gap.insert(k, starts[k] - ends[k - 1] if k > 0 else -_INF)
        if k + 1 < n:
            gap[k + 1] = starts[k + 1] - ends[k]
        gap_np = self._gap_np[d]
        if n > len(gap_np):
            gap_np = self._gap_np[d] = np.concatenate([gap_np, np.empty(max(64, len(gap_np)))])
        gap_np[k + 1:n] = gap_np[k:n - 1]
        gap_np[k:min(k + 2, n)] = gap[k:k + 2]
        return start


def order_place(tasks: TaskGraph, order: Sequence[int], costs: LatencyCosts, caps_bytes: FloatArray,
                pins: Mapping[int, int] | None = None) -> ListSchedule:
    """Order-Place (§5.2, §6.2.2): nodes in ``order`` fill device 0 until the next one does not
    fit, then device 1, and so on (never going back); best effort when none is left."""
    sched = GapSchedule(tasks, costs, caps_bytes)
    pins = pins or {}
    current = 0
    for v in order:
        if v in pins:
            sched.commit_forced(v, pins[v], True)
            continue
        while current < sched.n_devices and not sched.fits(v, current):
            current += 1
        if current < sched.n_devices:
            sched.commit(v, current, True)
        else:
            sched.commit(v, sched.mem.most_free(), True, best_effort=True)
    return sched


def back_cost_s(tasks: TaskGraph, costs: LatencyCosts, v: int) -> float:
    """Eq. 8: the largest cost of sending ``v``'s output to one of its successors."""
    sizes = tasks.succ_bytes[v]
    if not sizes:
        return 0.0
    return float(costs.mean_comm_s(np.asarray(sizes, dtype=np.float64)).max())


def back_costs_s(tasks: TaskGraph, costs: LatencyCosts) -> FloatArray:
    """:func:`back_cost_s` of every node at once (the cost grows with the size, so it is the
    cost of the largest message)."""
    largest = np.array([max(sizes, default=0.0) for sizes in tasks.succ_bytes], dtype=np.float64)
    return costs.mean_comm_s(largest)


def adjusting_place(tasks: TaskGraph, order: Sequence[int], costs: LatencyCosts, caps_bytes: FloatArray,
                    pins: Mapping[int, int] | None = None, move_threshold: float = 1.0) -> ListSchedule:
    """Adjusting Placement, Algorithm 2.

    For node ``v_i``: EST on every device (Eq. 7; insertion-based; +inf where memory is
    full, lines 7–10); ``d_k`` = device of ``v_{i-1}``; move to the earliest device ``d_1``
    only if ``EST(d_k) - EST(d_1) > move_threshold * back_cost`` (Eq. 8, 9; lines 13–14; the
    paper's factor is 1), else stay on ``d_k`` (line 16); if every device is full, best effort
    (line 18, see module doc).  The first node, with no ``d_k``, goes to the device with the
    earliest EST.
    """
    sched = GapSchedule(tasks, costs, caps_bytes)
    pins = pins or {}
    n_dev = sched.n_devices
    devices = range(n_dev)
    dur = sched.dur_lists_s()
    back = back_costs_s(tasks, costs).tolist()
    prev = -1
    for v in order:
        if v in pins:
            prev = pins[v]
            sched.commit_forced(v, prev, True)
            continue
        est = sched.est_all(v)
        # ties on EST (e.g. every device idle) go to the device that finishes v first
        first = min(est)
        if est.count(first) == 1:
            d1 = est.index(first)
        else:
            dur_v = dur[v]
            d1 = min(devices, key=lambda d: (est[d], est[d] + dur_v[d], d))
        d_k = d1 if prev < 0 else prev
        if est[d_k] - est[d1] > move_threshold * back[v]:  # inf - finite > cost: d_k is full
            choice, effort = d1, False
        elif est[d_k] < _INF:
            choice, effort = d_k, False
        else:
            choice, effort = sched.mem.most_free(), True
        sched.commit(v, choice, True, effort)
        prev = choice
    return sched


def expand_schedule(sched: ListSchedule, order: Sequence[int] | IntArray, members: Sequence[IntArray], op_dur_s: FloatArray,
                    n_ops: int) -> tuple[IntArray, FloatArray, IntArray]:
    """Map a coarse schedule to the ops (Algorithm 2, line 21): every op of a cluster runs on
    the cluster's device, back to back in fusion order from the cluster's start.

    Returns the device and planned start of every op and ``rank``, each op's position in one
    sequence consistent with every dependency: clusters by start, then by their position in the
    placement ``order`` (topological), ops of a cluster in fusion order.  Each device runs its
    ops in this sequence.  The run order must not be re-derived from the op start times: a
    cluster's start is its predecessor's end summed in another order than the op-by-op starts,
    so with zero-time ops a consumer's start can round below its producer's.
    """
    k = len(members)
    placed = np.empty(k, dtype=np.int64)
    placed[np.asarray(order, dtype=np.int64)] = np.arange(k)
    by_start = np.lexsort((placed, np.asarray(sched.start_s[:k], dtype=np.float64)))
    sizes = np.array([len(m) for m in members], dtype=np.int64)[by_start]
    ops = np.concatenate([members[c] for c in by_start.tolist()]) if k else np.empty(0, dtype=np.int64)
    cluster = np.repeat(by_start, sizes)  # the cluster of every op of the sequence
    device_of = np.empty(n_ops, dtype=np.int64)
    start_s = np.empty(n_ops, dtype=np.float64)
    rank = np.empty(n_ops, dtype=np.int64)
    dev = np.asarray(sched.device[:k], dtype=np.int64)[cluster]
    dur = op_dur_s[ops, dev]
    # ops of a cluster back to back from its start: the start plus the time of the ops before
    # it in the cluster (a running sum restarted at every cluster; none for a single op)
    offset = np.zeros(len(ops))
    first = np.cumsum(sizes) - sizes
    for at, size in zip(first[sizes > 1].tolist(), sizes[sizes > 1].tolist(), strict=True):
        offset[at + 1:at + size] = np.cumsum(dur[at:at + size - 1])
    device_of[ops] = dev
    start_s[ops] = np.asarray(sched.start_s[:k], dtype=np.float64)[cluster] + offset
    rank[ops] = np.arange(len(ops))
    return device_of, start_s, rank
