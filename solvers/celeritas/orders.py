"""Topological orders of Celeritas (§4.2.2, §5.1.3): DFS-TOPO and CPD-TOPO.

M-TOPO, the levels (Eq. 2-3) and the topological check are shared with the other list
schedulers and live in :mod:`solvers.listsched.orders`.  Ties are broken by node index, so
the orders are deterministic.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.listsched.orders import checked_order, levels


def dfs_topo_order(succ: Sequence[Sequence[int]], pred: Sequence[Sequence[int]]) -> IntArray:
    """DFS-TOPO (§4.2.2): like M-TOPO, but the children of the node just output that reach
    indegree 0 go to the *head* of the queue (first child first), so a path is followed
    depth-first and neighbours stay adjacent in the order.  This is :func:`cpath_first_order` with
    every ``cpath`` equal: sources by index, the lowest-index child first."""
    return cpath_first_order(succ, pred, np.zeros(len(pred)))


def cpath_first_order(succ: Sequence[Sequence[int]], pred: Sequence[Sequence[int]], cpath_s: FloatArray) -> IntArray:
    """CPD-TOPO (Algorithm 1, lines 6–21) for ``cpath = tlevel + blevel``.

    The queue starts with the sources by decreasing ``cpath``; the head is output and its
    outgoing edges deleted; its children, taken by increasing ``cpath``, are pushed to the
    head when their indegree reaches 0 — so the child with the largest ``cpath`` (the one on
    the critical path) is output next.
    """
    n = len(pred)
    rank = np.empty(n, dtype=np.int64)  # position by (cpath, -index): the children's sort key, as one int
    rank[np.lexsort((-np.arange(n), np.asarray(cpath_s, dtype=np.float64)))] = np.arange(n)
    by_rank = rank.tolist().__getitem__
    indeg = [len(p) for p in pred]
    # decreasing cpath, among equal cpath the lower index first
    queue = deque(sorted((v for v, k in enumerate(indeg) if k == 0), key=by_rank, reverse=True))
    out: list[int] = []
    while queue:
        v = queue.popleft()
        out.append(v)
        children = succ[v]
        if len(children) > 1:
            # increasing cpath; among equal cpath the lower index is pushed last, i.e. ends first
            children = sorted(children, key=by_rank)
        for s in children:
            indeg[s] -= 1
            if indeg[s] == 0:
                queue.appendleft(s)
    return checked_order(out, len(pred))


def cpd_topo_order(succ: Sequence[Sequence[int]], succ_bytes: Sequence[Sequence[float]],
             pred: Sequence[Sequence[int]], pred_bytes: Sequence[Sequence[float]], weight_s: FloatArray,
             comm_fixed_s: float, comm_per_byte_s: float, topo_order: IntArray | None = None) -> IntArray:
    """CPD-TOPO: :func:`cpath_first_order` with its levels computed from weights and edge costs (Algorithm 1, line 7)."""
    return cpd_topo_order_blevel(succ, succ_bytes, pred, pred_bytes, weight_s, comm_fixed_s, comm_per_byte_s,
                                 topo_order)[0]


def cpd_topo_order_blevel(succ: Sequence[Sequence[int]], succ_bytes: Sequence[Sequence[float]],
                          pred: Sequence[Sequence[int]], pred_bytes: Sequence[Sequence[float]], weight_s: FloatArray,
                          comm_fixed_s: float, comm_per_byte_s: float,
                          topo_order: IntArray | None = None) -> tuple[IntArray, FloatArray]:
    """:func:`cpd_topo_order` and the b-level (Eq. 3) it computed on the way."""
    tlevel, blevel = levels(succ, succ_bytes, pred, pred_bytes, weight_s, comm_fixed_s, comm_per_byte_s,
                            topo_order)
    return cpath_first_order(succ, pred, tlevel + blevel), blevel
