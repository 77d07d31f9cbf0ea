"""The critical path with the transfers that memory forces onto it: a lower bound for large instances.

Heads and tails (:mod:`~solvers.moirai.bounds`) drop communication and memory.  When the model does
not fit on one device, a plan must split the longest path, and each split is a transfer the path
waits for.  The bound below keeps, from MOIRAI's model (§III-D, Eq. 4), the precedences (4a) and
durations (4b) along one path, the memory constraint (Eq. 5) and the transfer times (Eq. 7), and
drops the rest (other paths, the non-overlap of Eq. 6, congestion); it holds for every plan that
puts each op on one device, which is every latency plan validation admits
(:func:`~solvers.model.plan.check_one_device_per_op`; docs/moirai.md, "Status and bound").

**Claim.**  Let ``t_1 .. t_m`` be a path of the task DAG, ``b_i`` the bytes of edge
``t_i -> t_{i+1}``, ``c(b) = min over devices k != k' of (latency[k, k'] + b / bandwidth[k, k'])``
(0 for ``b = 0``), ``d_t`` the task's least time on an allowed device.  Call a run of consecutive
path positions ``i .. j`` *placeable* when some device ``k`` allowed for all their units holds them:
``sum(static_bytes of the distinct units) + max(work_bytes) <= cap_bytes[k]``.  Then every schedule
lasts at least ``sum_i d_{t_i} + f``, where ``f`` is the least ``sum c(b_i)`` over the sets of cut
positions that split the path into placeable runs.

**Proof.**  In a plan, split the path where consecutive tasks run on different devices.  Each piece
runs on one device, which holds (at least) its distinct units and is allowed for them, so the piece
is placeable: the plan's cuts are one of the sets ``f`` minimises over.  At a cut ``i`` task
``t_{i+1}`` waits for a message from ``t_i``'s device carrying at least ``b_i`` bytes (a forward task
sends the largest edge to each consumer device, a backward one each gradient edge; the instance
module), which takes at least ``c(b_i)`` on its channel, contention only delaying it; without a cut
it still starts after ``t_i`` ends.  So ``t_m`` ends at or after ``sum d + sum_cuts c(b_i) >= sum d
+ f``.  Taking more units into a run only adds memory and removes allowed devices, so the runs
placeable to the left of a position form an interval (two pointers), and ``f`` is a shortest path
over positions (a sliding-window minimum): linear in the path.

**Counting nodes.**  ``f`` charges every cut at the quickest channel; when the path needs more
devices than one node has, some cut crosses nodes.  :func:`least_crossings_s` bounds the same
transfers by counting devices and nodes (proof there); the larger of the two is used.

The path is the longest one by least durations (the transformer's chain of layers); the bound is
also at least the work bound (least work over the devices), and shaved by the relative ``SHAVE`` of
:mod:`~solvers.moirai.bounds`.
"""

from __future__ import annotations

from collections import deque
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from solvers.arrays import FloatArray
from solvers.moirai.bounds import SHAVE, least_durations_s
from solvers.moirai.instance import Instance

# relative: a run is placeable up to this much over a device's capacity, so that the rounding of the
# run's running byte sum never refuses what the plan's memory check accepts (it only weakens the bound)
MEMORY_TOLERANCE = 1e-9


def longest_path(inst: Instance, least_s: FloatArray) -> list[int]:
    """The tasks of a longest path of the task DAG with durations ``least_s``, in order."""
    dur, pred = least_s.tolist(), inst.pred
    finish = [0.0] * len(dur)
    via = [-1] * len(dur)  # via[t]: the predecessor ending last (-1: none)
    for t in inst.topo:
        start, before = 0.0, -1
        for a in pred[t]:
            if before < 0 or finish[a] > start:
                start, before = finish[a], a
        finish[t], via[t] = start + dur[t], before
    if not dur:
        return []
    t = max(range(len(dur)), key=finish.__getitem__)
    path = []
    while t >= 0:
        path.append(t)
        t = via[t]
    return path[::-1]


def least_transfer_s(inst: Instance, size_bytes: FloatArray,
                     channels: npt.NDArray[np.bool_] | None = None) -> FloatArray:
    """Per message size: its least transfer time on any channel between two distinct devices, or
    on those ``channels`` marks (``[src, dst]``); 0 for 0 bytes, or without such a channel.  The
    channels dominated in latency and bandwidth are dropped."""
    lat, bw = inst.problem.topology.latency_s, inst.problem.topology.bandwidth_Bps
    off = ~np.eye(inst.n_devices, dtype=bool)
    if channels is not None:
        off &= channels
    best = np.zeros(len(size_bytes))
    if not off.any():
        return best
    pairs = sorted(zip(np.asarray(lat)[off].tolist(), np.asarray(bw)[off].tolist(), strict=True),
                   key=lambda c: (c[0], -c[1]))
    best[:] = np.inf
    widest = 0.0
    for latency_s, bandwidth_Bps in pairs:  # by latency: only a wider channel can be quicker
        if bandwidth_Bps > widest:
            widest = bandwidth_Bps
            best = np.minimum(best, latency_s + size_bytes / bandwidth_Bps)
    return np.where(size_bytes > 0, best, 0.0)


def cut_bound_s(inst: Instance) -> float:
    """The bound of the module doc: the longest path plus the least transfers memory forces onto it
    (at least the work bound), shaved by ``SHAVE``."""
    least = least_durations_s(inst)
    path = longest_path(inst, least)
    work_s = float(least.sum()) / inst.n_devices if inst.n_devices else 0.0
    if not path:
        return 0.0
    edge_bytes = np.array([max(b for s, b in inst.succ[a] if s == t) for a, t in pairwise(path)], dtype=np.float64)
    cut_s = least_transfer_s(inst, edge_bytes)
    units = [inst.task_unit[t] for t in path]
    forced_s = max(least_cuts_s(units, cut_s.tolist(), inst), least_crossings_s(units, edge_bytes, cut_s, inst))
    return max(float(least[path].sum()) + forced_s, work_s) * (1 - SHAVE)


def least_crossings_s(units: list[int], edge_bytes: FloatArray, cut_s: FloatArray, inst: Instance) -> float:
    """A second bound on the same transfers, by counting (a relaxation of Eq. 5 over all devices):
    the path's distinct units hold ``S`` static bytes, so its tasks use at least ``m`` devices (the
    fewest whose largest capacities sum to ``S``) on at least ``h`` nodes (the same over the nodes'
    total capacities, ``Device.node``).  Its runs visit every device it uses, so it changes device
    at ``m - 1`` edges at least, and node at ``h - 1`` of them at least, where a message takes at
    least ``c_out(b)``, the least time between two devices of different nodes.  Each such edge costs
    ``c(b) + (c_out(b) - c(b))``, so the transfers total at least the ``m - 1`` smallest ``c(b_i)``
    (``cut_s``) plus the ``h - 1`` smallest ``c_out(b_i) - c(b_i)``."""
    if not len(cut_s):
        return 0.0
    need = float(inst.static_bytes[np.unique(units)].sum()) * (1 - MEMORY_TOLERANCE)
    m = _fewest_holding(inst.cap_bytes, need)
    nodes = [d.node for d in inst.problem.topology.devices]
    names = sorted(set(nodes))
    node_cap = np.zeros(len(names))
    for k, name in enumerate(nodes):
        node_cap[names.index(name)] += inst.cap_bytes[k]
    h = _fewest_holding(node_cap, need)
    cross = np.array([[a != b for b in nodes] for a in nodes], dtype=bool)
    extra_s = least_transfer_s(inst, edge_bytes, cross) - cut_s
    return float(np.sort(cut_s)[:m - 1].sum() + np.sort(np.maximum(extra_s, 0.0))[:h - 1].sum())


def _fewest_holding(capacity_bytes: FloatArray, need_bytes: float) -> int:
    """The fewest of ``capacity_bytes`` (the largest first) that sum to ``need_bytes``, at most all of them."""
    total = np.cumsum(np.sort(capacity_bytes)[::-1])
    return min(len(total), int(np.searchsorted(total, need_bytes)) + 1)


def least_cuts_s(units: list[int], cut_s: list[float], inst: Instance) -> float:
    """``f`` of the module doc: the least total of ``cut_s[i]`` (a cut between path positions ``i``
    and ``i + 1``) over the cuts that leave placeable runs of ``units`` (the path's units in order)."""
    m = len(units)
    static, work = inst.static_bytes.tolist(), inst.work_bytes.tolist()
    pinned = not bool(inst.allowed.all())
    allowed = inst.allowed.astype(np.int64)
    cap = inst.cap_bytes
    # f[j]: least cost of the cuts among positions < j whose runs are placeable, a cut just before j
    # (f[0] = 0); the answer is f[m].  Candidates for f[j]: f[i] + (cut before i), i in [lo, j - 1]
    f = [0.0] * (m + 1)
    held: dict[int, int] = {}  # unit -> its positions in the run lo .. j - 1
    held_bytes = 0.0  # static bytes of the run's distinct units
    allowing = np.zeros(inst.n_devices, dtype=np.int64)  # per device: distinct units of the run allowing it
    heaviest: deque[int] = deque()  # positions of the run, work_bytes decreasing (sliding maximum)
    cheapest: deque[tuple[int, float]] = deque()  # (i, f[i] + cut before i), values increasing
    lo = 0
    for j in range(1, m + 1):
        u = units[j - 1]
        if held.get(u, 0) == 0:
            held_bytes += static[u]
            if pinned:
                allowing += allowed[u]
        held[u] = held.get(u, 0) + 1
        while heaviest and work[units[heaviest[-1]]] <= work[u]:
            heaviest.pop()
        heaviest.append(j - 1)
        value = f[j - 1] + (cut_s[j - 2] if j >= 2 else 0.0)
        while cheapest and cheapest[-1][1] >= value:
            cheapest.pop()
        cheapest.append((j - 1, value))
        while lo < j - 1 and not _placeable(held_bytes + work[units[heaviest[0]]], len(held) if pinned else 0,
                                            allowing, cap):
            v = units[lo]
            held[v] -= 1
            if held[v] == 0:
                del held[v]
                held_bytes -= static[v]
                if pinned:
                    allowing -= allowed[v]
            lo += 1
            if heaviest[0] < lo:
                heaviest.popleft()
        while cheapest[0][0] < lo:
            cheapest.popleft()
        f[j] = cheapest[0][1]
    return f[m]


def _placeable(need_bytes: float, n_units: int, allowing: npt.NDArray[np.int64], cap_bytes: FloatArray) -> bool:
    """Whether a run needing ``need_bytes`` fits a device allowed for all its ``n_units`` distinct
    units (``allowing``: per device, how many of them allow it; ``n_units`` 0: no pins)."""
    if n_units == 0:
        return need_bytes <= float(cap_bytes.max()) * (1 + MEMORY_TOLERANCE)
    fits = (allowing == n_units) & (need_bytes <= cap_bytes * (1 + MEMORY_TOLERANCE))
    return bool(fits.any())
