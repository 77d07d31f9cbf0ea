"""Optimal operation fusion (Celeritas §5.1.3, Algorithm 1): breakpoint DP over the CPD-TOPO
order, Eq. 4–6, and the coarse graph it induces.

Only nodes adjacent in a topological order are merged, so every cluster is a contiguous run
of the order and the coarse graph is acyclic (Lemma 2).  The DP picks the breakpoints that
minimise the total communication cut between clusters (Kernighan's sequential partitioning),
with at most ``R`` nodes per cluster (the exploration range, ``i >= j - R`` in Eq. 6) and at
most ``M`` bytes per cluster (the memory cap of Eq. 6).

What ``M`` measures here: the sum over the cluster's ops of ``additive + working`` bytes of
the latency memory model (``solvers.cost.memory.device_memory_bytes`` of one op), an upper
bound on the memory the cluster needs on a device.  The solver sets ``M`` to a fraction
(default 0.25, the paper's choice) of the smallest device's usable memory.  An op larger than
``M`` becomes a cluster on its own; pinned ops are always clusters on their own.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from solvers.arrays import BoolArray, FloatArray, IntArray
from solvers.cost.traffic import group_traffic_bytes
from solvers.listsched import LatencyCosts, TaskGraph
from solvers.model.graph import OpGraph

_BLOCK = 2048  # rows of the cost band built at a time (memory O(_BLOCK * R))


def _limits(n: int, r_max: int, mem_seq: FloatArray, memory_cap_bytes: float,
            forced_start_seq: BoolArray | None) -> IntArray:
    """``limit[j]`` = largest cluster size ``r`` allowed for a cluster ending before position ``j``
    (a cluster ``[j - r, j)`` may not contain a forced start after its first position)."""
    j = np.arange(n + 1)
    limit = np.minimum(j, r_max)
    if np.isfinite(memory_cap_bytes):
        prefix = np.concatenate([[0.0], np.cumsum(mem_seq)])
        first = np.searchsorted(prefix, prefix - memory_cap_bytes, side="left")
        limit = np.minimum(limit, np.maximum(1, j - first))
    if forced_start_seq is not None and forced_start_seq.any():
        forced = np.flatnonzero(forced_start_seq)
        k = np.searchsorted(forced, j, side="left") - 1  # last forced start < j (or none)
        limit = np.where(k >= 0, np.minimum(limit, j - forced[np.maximum(k, 0)]), limit)
    limit[0] = 0
    return limit.astype(np.int64)


def forced_starts(n: int, singleton_seq: BoolArray | None, break_before_seq: BoolArray | None) -> BoolArray | None:
    """Positions where a cluster must start: every singleton and the position after it, and
    every ``break_before`` position."""
    if singleton_seq is None and break_before_seq is None:
        return None
    out = np.zeros(n + 1, dtype=bool)
    if singleton_seq is not None:
        out[:n] |= singleton_seq
        out[1:] |= singleton_seq
    if break_before_seq is not None:
        out[:n] |= break_before_seq
    return out[:n]


def chain_breaks(graph: OpGraph, seq: IntArray) -> BoolArray:
    """``break_before[k]``: ``seq[k]`` does not consume the output of ``seq[k - 1]``.  Clusters
    cut there are paths of the graph (linear clusters): fusing them never serialises two ops
    that could run at the same time."""
    n = graph.n_ops
    pos = np.empty(n, dtype=np.int64)
    pos[seq] = np.arange(n)
    follows = np.zeros(n, dtype=bool)
    ps, pd = pos[graph.edge_src], pos[graph.edge_dst]
    follows[pd[pd == ps + 1]] = True
    return ~follows


def optimal_breakpoints(src_pos: IntArray, dst_pos: IntArray, edge_cost_s: FloatArray, mem_seq: FloatArray,
                        exploration_range: int, memory_cap_bytes: float = float("inf"),
                        singleton_seq: BoolArray | None = None,
                        break_before_seq: BoolArray | None = None) -> tuple[IntArray, float]:
    """OPTIMAL_BP of Algorithm 1 on a sequence of ``n = len(mem_seq)`` nodes.

    ``src_pos < dst_pos`` are the sequence positions of each edge's ends; ``singleton_seq``:
    nodes that form a cluster alone; ``break_before_seq``: positions where a cluster must
    start (:func:`chain_breaks`).  Returns the
    cluster start positions (the breakpoints, ascending, starting with 0) and ``S(v_n)``,
    the total inter-cluster communication of the optimum.
    """
    n = len(mem_seq)
    r_max = max(1, min(int(exploration_range), n))
    c = np.asarray(edge_cost_s, dtype=np.float64)
    out_s = np.bincount(src_pos, weights=c, minlength=n)
    prefix_out = np.concatenate([[0.0], np.cumsum(out_s)])  # P[j] = sum of out(k), k < j
    if r_max == 1:  # clusters of one node: every edge is cut, summed as the DP below sums it
        return np.arange(n, dtype=np.int64), float(np.cumsum(np.diff(prefix_out))[-1]) if n else 0.0
    span = dst_pos + 1 - src_pos  # the edge is inside [i, j) iff i <= src and j >= src + span
    keep = span <= r_max
    e_src, e_span, e_c = src_pos[keep], span[keep], c[keep]
    by_src = np.argsort(e_src, kind="stable")
    e_src, e_span, e_c = e_src[by_src], e_span[by_src], e_c[by_src]
    limit = _limits(n, r_max, np.asarray(mem_seq, dtype=np.float64), memory_cap_bytes,
                    forced_starts(n, singleton_seq, break_before_seq))
    best = np.zeros(n + 1)  # best[j] = S(v_j): least cut of the first j nodes cut before position j
    back = np.zeros(n + 1, dtype=np.int64)  # back[j] = P(v_j): start of the last cluster [back[j], j)
    r_idx = np.arange(r_max + 1)
    lim = limit.tolist()
    for j0 in range(1, n + 1, _BLOCK):
        j1 = min(n + 1, j0 + _BLOCK)
        base = max(0, j0 - r_max)
        rows = j1 - 1 - base  # source positions base .. j1 - 2 can be inside these clusters
        lo, hi = np.searchsorted(e_src, [base, base + rows])
        # band[i' - base, r] = comm of edges from i' whose span <= r (cumsum over r, Eq. 5 terms)
        band = np.bincount((e_src[lo:hi] - base) * (r_max + 1) + e_span[lo:hi], weights=e_c[lo:hi],
                           minlength=rows * (r_max + 1)).reshape(rows, r_max + 1)
        np.cumsum(band, axis=1, out=band)
        jj = np.arange(j0, j1)[:, None]
        src_row = jj - r_idx[None, :]
        valid = (src_row >= 0) & (r_idx[None, :] >= 1)
        sheared = np.where(valid, band[np.clip(src_row - base, 0, rows - 1), r_idx[None, :]], 0.0)
        # internal[j, r] = comm inside the cluster [j - r, j); cost (Eq. 4) = out-comm - internal
        internal = np.cumsum(sheared, axis=1)
        cost = prefix_out[jj] - prefix_out[np.maximum(src_row, 0)] - internal
        for j in range(j0, j1):
            rh = lim[j]
            # Eq. 6: cand[t] = S(j - r) + cost(j - r, j) for r = rh - t; the first minimum
            # is the largest r, so ties go to the larger cluster
            cand = best[j - rh:j] + cost[j - j0, rh:0:-1]
            t = int(cand.argmin())
            best[j] = cand[t]
            back[j] = j - rh + t
    starts: list[int] = []
    j = n
    while j > 0:
        j = int(back[j])
        starts.append(j)
    return np.asarray(starts[::-1], dtype=np.int64), float(best[n])


@dataclass(frozen=True)
class Fusion:
    """Clusters of a fused graph. ``seq``: the order fused; ``starts``: cluster start
    positions in ``seq``; ``cluster_of[v]``: cluster of op ``v``; ``cut_s``: S(v_n)."""

    seq: IntArray
    starts: IntArray
    cluster_of: IntArray
    cut_s: float

    @property
    def n_clusters(self) -> int:
        return len(self.starts)

    def members(self, cluster: int) -> IntArray:
        """Ops of ``cluster`` in fusion order."""
        end = self.starts[cluster + 1] if cluster + 1 < len(self.starts) else len(self.seq)
        return self.seq[self.starts[cluster]:end]


def fuse(graph: OpGraph, seq: IntArray, edge_cost_s: FloatArray, mem_bytes: FloatArray, exploration_range: int,
         memory_cap_bytes: float, singleton: BoolArray | None = None, chains: bool = False) -> Fusion:
    """Algorithm 1, lines 1–5: breakpoints over ``seq`` (a topological order), then clusters.
    ``chains``: clusters are paths of the graph (:func:`chain_breaks`); the paper allows any
    run of the order."""
    n = graph.n_ops
    pos = np.empty(n, dtype=np.int64)
    pos[seq] = np.arange(n)
    starts, cut = optimal_breakpoints(pos[graph.edge_src], pos[graph.edge_dst], edge_cost_s, mem_bytes[seq],
                                      exploration_range, memory_cap_bytes,
                                      None if singleton is None else singleton[seq],
                                      chain_breaks(graph, seq) if chains else None)
    sizes = np.diff(np.append(starts, n))
    cluster_of = np.empty(n, dtype=np.int64)
    cluster_of[seq] = np.repeat(np.arange(len(starts)), sizes)
    return Fusion(seq, starts, cluster_of, cut)


def coarse_task_graph(graph: OpGraph, tasks: TaskGraph, fusion: Fusion) -> TaskGraph:
    """The coarse graph (§5.2): a cluster's time is the sum of its ops' times, its memory the
    sum of additive bytes with the largest working bytes; one edge per cluster pair carrying
    one message per (producer op, consumer cluster) with the largest edge bytes."""
    if fusion.n_clusters == graph.n_ops:
        return _relabelled(graph, tasks, fusion)
    return _grouped(graph, tasks, fusion)


def _grouped(graph: OpGraph, tasks: TaskGraph, fusion: Fusion) -> TaskGraph:
    """:func:`coarse_task_graph` of any clustering."""
    seq, starts = fusion.seq, fusion.starts
    dur = np.add.reduceat(tasks.dur_s[seq], starts, axis=0)
    add = np.add.reduceat(tasks.mem_add_bytes[seq], starts)
    work = np.maximum.reduceat(tasks.mem_work_bytes[seq], starts)
    k = fusion.n_clusters
    pred: list[list[int]] = [[] for _ in range(k)]
    pred_b: list[list[float]] = [[] for _ in range(k)]
    succ: list[list[int]] = [[] for _ in range(k)]
    succ_b: list[list[float]] = [[] for _ in range(k)]
    for (a, b), size in sorted(group_traffic_bytes(graph, fusion.cluster_of).items()):
        pred[b].append(a)
        pred_b[b].append(size)
        succ[a].append(b)
        succ_b[a].append(size)
    return TaskGraph(pred, pred_b, succ, succ_b, np.ascontiguousarray(dur), add, work,
                     np.arange(k, dtype=np.int64))


def _relabelled(graph: OpGraph, tasks: TaskGraph, fusion: Fusion) -> TaskGraph:
    """:func:`coarse_task_graph` when every cluster is one op: the op graph with cluster ids
    (the graph has no parallel edges, so each edge is one message of its own bytes); the
    producers and consumers of a cluster listed by cluster id, as there."""
    a, b = fusion.cluster_of[graph.edge_src], fusion.cluster_of[graph.edge_dst]
    size = np.asarray(graph.edge_bytes, dtype=np.float64)
    n = graph.n_ops

    def lists(key: IntArray, other: IntArray) -> tuple[list[list[int]], list[list[float]]]:
        order = np.lexsort((other, key))
        offsets = np.searchsorted(key[order], np.arange(n + 1)).tolist()
        ends, sizes = other[order].tolist(), size[order].tolist()
        cuts = list(itertools.pairwise(offsets))
        return [ends[a:b] for a, b in cuts], [sizes[a:b] for a, b in cuts]

    pred, pred_b = lists(b, a)
    succ, succ_b = lists(a, b)
    seq = fusion.seq
    return TaskGraph(pred, pred_b, succ, succ_b, np.ascontiguousarray(tasks.dur_s[seq]), tasks.mem_add_bytes[seq],
                     tasks.mem_work_bytes[seq], np.arange(n, dtype=np.int64))


def ccr(tasks: TaskGraph, costs: LatencyCosts) -> float | None:
    """Communication-to-computation ratio, Eq. 1, with device-averaged times and costs
    (``None`` when there is no computation: the ratio is undefined)."""
    sizes = np.fromiter(itertools.chain.from_iterable(tasks.succ_bytes), dtype=np.float64)
    comm = float(costs.mean_comm_s(sizes).sum())
    work = float(tasks.dur_s.mean(axis=1).sum())
    return comm / work if work > 0 else None
