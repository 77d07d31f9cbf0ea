"""Ideals (downward-closed op sets) of an op graph, enumerated under a count budget.

Tarnawski et al., "Efficient Algorithms for Device Placement of DNN Graph Operators" (NeurIPS
2020), §4 (throughput maximisation): a set of ops is *contiguous* (convex: no path leaves it and
comes back) exactly when it is ``I \\ I'`` for two ideals ``I' ⊆ I``, so a partition into
stages that follow the dependencies is a chain of ideals ``∅ = I_0 ⊂ I_1 ⊂ ... ⊂ I_S = V``
(stage ``s`` = ``I_s \\ I_{s-1}``).  The DP of :mod:`solvers.exact.dp` runs over these ideals.

Enumeration is breadth first by size: an ideal of size ``k + 1`` is an ideal of size ``k``
plus one op whose predecessors are all in it (its *frontier*).  Each ideal keeps its frontier,
so producing a child costs ``O(frontier + out-degree)``, not ``O(|V|)``; duplicates (the same
set reached by adding its frontier ops in different orders) are merged by a hash set
(:func:`solvers.partition.fronted.down_sets`, shared with Parmesan's fronted subgraphs).  The
number of ideals is ``O(|V|^w)`` for a graph of width ``w`` (its largest antichain): small for
chains of blocks, exponential for wide graphs, hence the budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solvers.arrays import BoolArray, IntArray
from solvers.model.graph import OpGraph
from solvers.partition.fronted import down_sets

WordArray = npt.NDArray[np.uint64]
BoolMatrix = BoolArray


@dataclass(frozen=True)
class Ideals:
    """Every ideal of a graph, sorted by size (then by bit pattern).

    ``words[i]`` = ideal ``i`` as a bit set over op positions, packed little-endian into 64-bit
    words (bit ``v`` of the set = op ``v``); ``size[i]`` = its op count.  Ideal 0 is the empty
    set and the last ideal is the whole graph.
    """

    n_ops: int
    words: WordArray
    size: IntArray

    @property
    def count(self) -> int:
        return len(self.size)

    def members(self, rows: IntArray | slice) -> BoolMatrix:
        """Bool matrix ``[len(rows), n_ops]``: ``[r, v]`` = op ``v`` is in ideal ``rows[r]``."""
        block = np.ascontiguousarray(self.words[rows])
        bits = np.unpackbits(block.view(np.uint8), axis=1, bitorder="little")
        return bits[:, : self.n_ops].astype(bool)


def enumerate_ideals(graph: OpGraph, max_ideals: int, deadline: float = math.inf) -> Ideals | None:
    """All ideals of ``graph``, or ``None`` as soon as there are more than ``max_ideals`` or the
    ``deadline`` (``time.monotonic()``) has passed (the frontier enumeration of
    :func:`solvers.partition.fronted.down_sets`: Parmesan's fronted subgraphs, Definition 2, are
    the same sets)."""
    found = down_sets(graph.n_ops, graph.edge_src, graph.edge_dst, max_ideals, deadline)
    if found is None:
        return None
    sizes = np.array([m.bit_count() for m in found], dtype=np.int64)
    return Ideals(graph.n_ops, _pack(found, graph.n_ops), sizes)


def _pack(ideals: list[int], n_ops: int) -> WordArray:
    """Python-int bit sets -> ``[count, words]`` little-endian uint64 rows."""
    n_words = max(1, (n_ops + 63) // 64)
    raw = b"".join(i.to_bytes(8 * n_words, "little") for i in ideals)
    return np.frombuffer(raw, dtype="<u8").astype(np.uint64).reshape(len(ideals), n_words)


def subsets_among(ideals: Ideals, of: int, candidates: IntArray) -> IntArray:
    """The ``candidates`` (ideal indices) that are subsets of ideal ``of``."""
    if len(candidates) == 0:
        return candidates
    outside = ~ideals.words[of]
    inside = ~(ideals.words[candidates] & outside).any(axis=1)
    return np.asarray(candidates[inside], dtype=np.int64)
