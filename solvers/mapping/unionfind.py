"""The components of a topology's threshold graphs, by union-find.

For a bandwidth ``beta``, the threshold graph joins the device pairs whose channel is at least
``beta`` wide (either direction).  Its components are unions along the merges of the maximum
spanning forest (Kruskal), so one pass over the merges, widest first, gives the components of
every threshold graph; the bounds of :mod:`solvers.mapping.bounds` and the packing test of
:mod:`solvers.mapping.packing` read them.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import minimum_spanning_tree

from solvers.arrays import FloatArray, IntArray
from solvers.model.topology import Topology


class UnionFind:
    """Disjoint sets with their members (path halving, union by size)."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self.members: dict[int, list[int]] = {x: [x] for x in range(n)}  # root -> its elements

    def root(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def join(self, x: int, y: int) -> int:
        """Merge the sets of ``x`` and ``y``; the size of the merged set."""
        rx, ry = self.root(x), self.root(y)
        if rx != ry:
            if len(self.members[rx]) < len(self.members[ry]):
                rx, ry = ry, rx
            self.parent[ry] = rx
            self.members[rx].extend(self.members.pop(ry))
        return len(self.members[rx])


def spanning_merges(bandwidth_Bps: FloatArray) -> list[tuple[int, int, float]]:
    """Kruskal's merges of the maximum spanning forest on ``max(bw[a, b], bw[b, a])``, widest first:
    the components of every threshold graph {pairs with bandwidth >= beta} are unions along them."""
    bw = np.maximum(bandwidth_Bps, bandwidth_Bps.T).astype(np.float64)
    np.fill_diagonal(bw, 0.0)
    # weights decreasing in bandwidth; an infinite channel weighs least
    with np.errstate(divide="ignore"):
        weight = np.where(np.isinf(bw), 1e-300, np.where(bw > 0, 1.0 / np.where(bw > 0, bw, 1.0), 0.0))
    tree = minimum_spanning_tree(csr_matrix(weight)).tocoo()
    pairs = sorted(zip(tree.row.tolist(), tree.col.tolist(), strict=True), key=lambda p: -bw[p[0], p[1]])
    return [(x, y, float(bw[x, y])) for x, y in pairs]


def component_threshold_Bps(bandwidth_Bps: FloatArray, size: int) -> FloatArray:
    """Per device: the largest ``beta`` such that its component in {pairs with bandwidth >= beta}
    (either direction) holds at least ``size`` devices (``0`` if never)."""
    n = len(bandwidth_Bps)
    out = np.zeros(n)
    if size > n:
        return out
    groups = UnionFind(n)
    done = np.zeros(n, dtype=bool)
    for x, y, beta in spanning_merges(bandwidth_Bps):
        if groups.root(x) != groups.root(y) and groups.join(x, y) >= size:
            fresh = [d for d in groups.members[groups.root(x)] if not done[d]]
            out[fresh] = beta
            done[fresh] = True
    return out


def components_by_beta(topo: Topology) -> list[tuple[float, IntArray]]:
    """``(beta, sizes)`` pairs, ``beta`` descending over the spanning merges' bandwidths: ``sizes`` =
    the component sizes of {pairs with bandwidth > beta} (either direction)."""
    groups = UnionFind(topo.n_devices)
    merges = spanning_merges(topo.bandwidth_Bps)
    out: list[tuple[float, IntArray]] = []
    k = 0
    while k < len(merges):
        beta = merges[k][2]
        out.append((beta, np.array([len(m) for m in groups.members.values()], dtype=np.int64)))
        while k < len(merges) and merges[k][2] == beta:
            groups.join(merges[k][0], merges[k][1])
            k += 1
    return out
