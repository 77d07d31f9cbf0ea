"""Topological orders and levels shared by the list schedulers (Baechi's M-TOPO; HEFT's rank).

Every function works on adjacency lists (``succ[v]``, ``pred[v]``), so the same code orders
the op graph and Celeritas' coarse graph.  Each order is the node sequence (an ``IntArray``
of node indices); ties are broken by node index, so the orders are deterministic.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.model.errors import SolverFailure


def m_topo_order(succ: Sequence[Sequence[int]], pred: Sequence[Sequence[int]]) -> IntArray:
    """M-TOPO (Baechi; Celeritas §4.2.2): BFS-like Kahn order — a FIFO queue of 0-indegree
    nodes; a node whose last input was removed joins the tail."""
    indeg = [len(p) for p in pred]
    queue = deque(v for v, k in enumerate(indeg) if k == 0)
    out: list[int] = []
    while queue:
        v = queue.popleft()
        out.append(v)
        for s in succ[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                queue.append(s)
    return checked_order(out, len(pred))


def levels(succ: Sequence[Sequence[int]], succ_bytes: Sequence[Sequence[float]],
           pred: Sequence[Sequence[int]], pred_bytes: Sequence[Sequence[float]], weight_s: FloatArray,
           comm_fixed_s: float, comm_per_byte_s: float,
           topo_order: IntArray | None = None) -> tuple[FloatArray, FloatArray]:
    """``tlevel`` (Eq. 2: longest path from a source to ``v``, excluding ``w_v``) and
    ``blevel`` (Eq. 3: longest path from ``v`` to a sink, including ``w_v``).

    Node weights ``weight_s``; an edge of ``b > 0`` bytes costs ``c = comm_fixed_s +
    b * comm_per_byte_s`` (an empty edge costs 0); ``*_bytes`` are aligned with ``succ`` /
    ``pred``; ``topo_order``: any topological order (computed when not given).
    """
    order = m_topo_order(succ, pred) if topo_order is None else topo_order
    w = weight_s.tolist()
    tlevel = [0.0] * len(pred)
    a, k = comm_fixed_s, comm_per_byte_s
    for v in order.tolist():
        best = 0.0
        for p, b in zip(pred[v], pred_bytes[v], strict=True):
            t = tlevel[p] + w[p] + (a + b * k if b > 0.0 else 0.0)
            if t > best:
                best = t
        tlevel[v] = best
    return np.asarray(tlevel), b_level(succ, succ_bytes, weight_s, comm_fixed_s, comm_per_byte_s, order)


def b_level(succ: Sequence[Sequence[int]], succ_bytes: Sequence[Sequence[float]], weight_s: FloatArray,
            comm_fixed_s: float, comm_per_byte_s: float, topo_order: IntArray) -> FloatArray:
    """``blevel`` alone (Eq. 3; HEFT's upward rank ``rank_u``, Eq. 8), edge costs as in :func:`levels`."""
    w = weight_s.tolist()
    blevel = [0.0] * len(succ)
    a, k = comm_fixed_s, comm_per_byte_s
    for v in reversed(topo_order.tolist()):
        best = 0.0
        for s, b in zip(succ[v], succ_bytes[v], strict=True):
            t = blevel[s] + (a + b * k if b > 0.0 else 0.0)
            if t > best:
                best = t
        blevel[v] = best + w[v]
    return np.asarray(blevel)


def is_topological(order: Sequence[int] | IntArray, succ: Sequence[Sequence[int]]) -> bool:
    """True when ``order`` lists every node once and every edge goes forward."""
    n = len(succ)
    pos = np.full(n, -1, dtype=np.int64)
    seq = np.asarray(order, dtype=np.int64)
    if len(seq) != n or len(np.unique(seq)) != n:
        return False
    pos[seq] = np.arange(n)
    return all(pos[v] < pos[s] for v in range(n) for s in succ[v])


def checked_order(out: list[int], n: int) -> IntArray:
    """``out`` as an ``IntArray``; a short order can only come from a cycle."""
    if len(out) != n:  # only possible with a cycle, which graph validation and Celeritas' Lemma 2 exclude
        raise SolverFailure(f"the task graph has a cycle (ordered {len(out)} of {n} nodes)")
    return np.asarray(out, dtype=np.int64)
