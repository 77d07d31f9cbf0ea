"""Fronted subgraphs (Parmesan §IV-A, Definition 2): the down-closed vertex sets of a DAG.

The DP of Eq. 2 / Eq. 13 runs over every fronted subgraph, so it handles graphs with many
topological orders.  Their number is between ``|V| + 1`` (a unique order, Theorem 2) and
``2^|V|``, so the enumeration stops at a budget and reports ``None``; the caller then
coarsens further (Parmesan's search, :mod:`solvers.parmesan.search`).
"""

from __future__ import annotations

import math
import time

import numpy as np
import numpy.typing as npt

BoolMatrix = npt.NDArray[np.bool_]


def predecessor_masks(k: int, src: npt.NDArray[np.int64], dst: npt.NDArray[np.int64]) -> list[int]:
    """``masks[c]`` = bitmask of the direct predecessors of node ``c``."""
    masks = [0] * k
    for a, b in zip(src.tolist(), dst.tolist(), strict=True):
        masks[b] |= 1 << a
    return masks


def down_sets(k: int, src: npt.NDArray[np.int64], dst: npt.NDArray[np.int64], max_sets: int,
              deadline: float = math.inf) -> list[int] | None:
    """Every down-closed subset of the DAG on nodes ``0..k-1`` as a bitmask, or ``None`` past
    ``max_sets`` or past ``deadline`` (``time.monotonic()``, checked every 4,096 children);
    sorted by size, then by bitmask (the empty set first, the full set last).

    Level by level: a set of size ``n + 1`` is a set of size ``n`` plus one node of its
    *frontier* (nodes outside it whose predecessors it holds).  Each set carries its frontier,
    so a child costs ``O(frontier + out-degree)`` rather than ``O(k)``; a child reached twice
    (its frontier nodes added in another order) is kept once.
    """
    preds = predecessor_masks(k, src, dst)
    succ: list[list[int]] = [[] for _ in range(k)]
    for a, b in zip(src.tolist(), dst.tolist(), strict=True):
        succ[a].append(b)
    level: dict[int, tuple[int, ...]] = {0: tuple(c for c in range(k) if preds[c] == 0)}
    found: list[int] = [0]
    timed = math.isfinite(deadline)
    made = 0
    for _ in range(k):
        nxt: dict[int, tuple[int, ...]] = {}
        for mask, frontier in level.items():
            for c in frontier:
                child = mask | (1 << c)
                if child in nxt:
                    continue
                made += 1
                if timed and made % 4096 == 0 and time.monotonic() > deadline:
                    return None
                if len(found) + len(nxt) > max_sets:
                    return None
                opened = tuple(w for w in succ[c] if preds[w] & ~child == 0)
                nxt[child] = tuple(x for x in frontier if x != c) + opened
        if len(found) + len(nxt) > max_sets:
            return None
        found.extend(sorted(nxt))
        level = nxt
    return found


def masks_to_rows(masks: list[int], k: int) -> BoolMatrix:
    """Bitmasks -> boolean matrix, ``row[c]`` = node ``c`` is in the set."""
    n_bytes = max(1, (k + 7) // 8)
    raw = np.frombuffer(b"".join(m.to_bytes(n_bytes, "little") for m in masks), dtype=np.uint8)
    bits = np.unpackbits(raw.reshape(len(masks), n_bytes), axis=1, bitorder="little")
    return bits[:, :k].astype(bool)


def enumerate_fronted(k: int, src: npt.NDArray[np.int64], dst: npt.NDArray[np.int64],
                      max_sets: int) -> BoolMatrix | None:
    """All down-closed subsets (:func:`down_sets`) as a boolean matrix, one row per set
    (``row[c]``: node ``c`` is in the set); ``None`` when there are more than ``max_sets``."""
    masks = down_sets(k, src, dst, max_sets)
    return None if masks is None else masks_to_rows(masks, k)
