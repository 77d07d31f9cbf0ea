"""Block-level partitioning, compaction step (RaNNC §III-B, last paragraph).

The groups of ``G_{L*}`` are kept in a topological order (their ids); merging two neighbours
of that list keeps the quotient acyclic.  In ascending order of computation time each group
``v`` picks the neighbour (left or right) with the smaller computation time and merges with it
if the union fits the device memory; passes repeat until ``k`` groups remain or a whole pass
merges nothing (then ``k`` is not reachable under the memory rule).
"""

from __future__ import annotations

import numpy as np

from solvers.arrays import IntArray
from solvers.rannc.coarsen import level_aggregates
from solvers.rannc.groups import AtomicGraph


def compact(ag: AtomicGraph, group_of: IntArray, k: int) -> IntArray:
    """Merge list neighbours of the topologically sorted groups down to ``k``; returns atomic -> block."""
    n = int(group_of.max()) + 1
    comp, param, act, work = (arr.tolist() for arr in level_aggregates(ag, group_of, n))
    left = [i - 1 for i in range(n)]  # left[x] = list neighbour before x (-1: none)
    right = [i + 1 if i + 1 < n else -1 for i in range(n)]  # right[x] = neighbour after x
    rep = list(range(n))  # rep[x] = group that absorbed x (x itself while alive)
    alive = n
    merged_any = True
    while alive > k and merged_any:
        merged_any = False
        for v in sorted((x for x in range(n) if rep[x] == x), key=lambda x: (comp[x], x)):
            if alive <= k:
                break
            if rep[v] != v:
                continue
            options = [x for x in (left[v], right[v]) if x >= 0]
            if not options:
                break
            w = min(options, key=lambda x: (comp[x], x))
            if not ag.fits(param[v] + param[w], act[v] + act[w], max(work[v], work[w])):
                continue
            a, b = (w, v) if w == left[v] else (v, w)  # a is before b in the list; keep a
            comp[a] += comp[b]
            param[a] += param[b]
            act[a] += act[b]
            work[a] = max(work[a], work[b])
            rep[b] = a
            right[a] = right[b]
            if right[b] >= 0:
                left[right[b]] = a
            alive -= 1
            merged_any = True
    root = list(range(n))
    for x in range(n):
        r = x
        while rep[r] != r:
            r = rep[r]
        root[x] = r
    survivors = sorted(set(root))
    new_id = {r: i for i, r in enumerate(survivors)}
    mapping = np.asarray([new_id[root[x]] for x in range(n)], dtype=np.int64)
    return mapping[group_of]
