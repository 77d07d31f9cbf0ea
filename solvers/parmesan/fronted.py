"""Fronted subgraphs (Parmesan §IV-A, Definition 2): the down-closed vertex sets of a DAG.

The DP of Eq. 2 / Eq. 13 runs over every fronted subgraph, so it handles graphs with many
topological orders.  Their number is between ``|V| + 1`` (a unique order, Theorem 2) and
``2^|V|``, so the enumeration stops at a budget and reports ``None``; the caller then
coarsens further (:mod:`solvers.parmesan.search`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

BoolMatrix = npt.NDArray[np.bool_]


def predecessor_masks(k: int, src: npt.NDArray[np.int64], dst: npt.NDArray[np.int64]) -> list[int]:
    """``masks[c]`` = bitmask of the direct predecessors of node ``c``."""
    masks = [0] * k
    for a, b in zip(src.tolist(), dst.tolist(), strict=True):
        masks[b] |= 1 << a
    return masks


def enumerate_fronted(k: int, src: npt.NDArray[np.int64], dst: npt.NDArray[np.int64],
                      max_sets: int) -> BoolMatrix | None:
    """All down-closed subsets of the DAG on nodes ``0..k-1`` with edges ``src -> dst``.

    Returns a boolean matrix, one row per set (``row[c]``: node ``c`` is in the set), sorted by
    size, the empty set first and the full set last; ``None`` when there are more than
    ``max_sets`` sets.  Level by level: a set of size ``n + 1`` is a set of size ``n`` plus one
    node all of whose predecessors it holds.
    """
    preds = predecessor_masks(k, src, dst)
    level: set[int] = {0}
    found: list[int] = [0]
    for _ in range(k):
        nxt: set[int] = set()
        for mask in level:
            for c in range(k):
                bit = 1 << c
                if not mask & bit and preds[c] & ~mask == 0:
                    nxt.add(mask | bit)
        if len(found) + len(nxt) > max_sets:
            return None
        ordered = sorted(nxt)
        found.extend(ordered)
        level = set(ordered)
    out = np.zeros((len(found), k), dtype=bool)
    for i, mask in enumerate(found):
        for c in range(k):
            if mask >> c & 1:
                out[i, c] = True
    return out
