"""Placement of the coarse graph (Celeritas §5.2): Order-Place and Adjusting Placement
(Algorithm 2), and the mapping of a coarse schedule back to the original ops.

Both walk the coarse nodes in CPD-TOPO order and time them with the shared list scheduler
(insertion-based EST per device, channel queues, exact memory).  Best effort (every device
out of memory): the node goes to the device with the most free memory — the text of §5.2
("the device with the lowest memory usage"); the count is reported so the caller can flag it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.celeritas.adjusting import AdjustingSchedule
from solvers.celeritas.fusion import Fusion
from solvers.listsched import LatencyCosts, ListSchedule, TaskGraph

_INF = float("inf")


def order_place(tasks: TaskGraph, order: Sequence[int], costs: LatencyCosts, caps_bytes: FloatArray,
                pins: Mapping[int, int] | None = None) -> ListSchedule:
    """Order-Place (§5.2, §6.2.2): nodes in ``order`` fill device 0 until the next one does not
    fit, then device 1, and so on (never going back); best effort when none is left."""
    sched = ListSchedule(tasks, costs, caps_bytes)
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


def back_costs_s(tasks: TaskGraph, costs: LatencyCosts) -> FloatArray:
    """Eq. 8 for every node: the largest cost of sending its output to one of its successors
    (the mean channel's cost grows with the size: the cost of the largest message)."""
    largest = np.array([max(sizes) if sizes else 0.0 for sizes in tasks.succ_bytes], dtype=np.float64)
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
    sched = AdjustingSchedule(tasks, costs, caps_bytes)
    sched.place_all(order, pins or {}, back_costs_s(tasks, costs).tolist(), move_threshold)
    return sched


def expand_schedule(sched: ListSchedule, order: Sequence[int] | IntArray, fusion: Fusion, op_dur_s: FloatArray,
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
    k = fusion.n_clusters
    placed = np.empty(k, dtype=np.int64)
    placed[np.asarray(order, dtype=np.int64)] = np.arange(k)
    by_start = np.lexsort((placed, np.asarray(sched.start_s[:k], dtype=np.float64)))
    sizes = np.diff(np.append(fusion.starts, len(fusion.seq)))[by_start]
    # the members of the clusters in that order (Fusion.members of each, concatenated)
    first = np.cumsum(sizes) - sizes  # where each cluster's ops begin in the sequence
    ops = fusion.seq[np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(fusion.starts[by_start] - first, sizes)]
    cluster = np.repeat(by_start, sizes)  # the cluster of every op of the sequence
    device_of = np.empty(n_ops, dtype=np.int64)
    start_s = np.empty(n_ops, dtype=np.float64)
    rank = np.empty(n_ops, dtype=np.int64)
    dev = np.asarray(sched.device[:k], dtype=np.int64)[cluster]
    dur = op_dur_s[ops, dev]
    # ops of a cluster back to back from its start: the start plus the time of the ops before
    # it in the cluster (a running sum restarted at every cluster; none for a single op)
    offset = np.zeros(len(ops))
    for at, size in zip(first[sizes > 1].tolist(), sizes[sizes > 1].tolist(), strict=True):
        offset[at + 1:at + size] = np.cumsum(dur[at:at + size - 1])
    device_of[ops] = dev
    start_s[ops] = np.asarray(sched.start_s[:k], dtype=np.float64)[cluster] + offset
    rank[ops] = np.arange(len(ops))
    return device_of, start_s, rank
