"""Block-level partitioning, coarsening step (RaNNC §III-B, after Karypis & Kumar [24], Huynh [25]).

Level ``L`` holds a partition ``G_L`` of the atomic subcomponents.  In ascending order of
computation time each group ``v`` not yet merged at this level picks, among the adjacent
groups ``w`` also not yet merged at this level, the one whose union ``v ∪ w`` is convex, fits
the device memory and has the smallest computation time; the union goes to ``G_{L+1}``.
Coarsening stops when ``|G_L| = k`` (also in the middle of a level) or a level merges nothing.

Group ids of every level are numbered in a topological order of that level's quotient graph
(the uncoarsening and compaction steps rely on it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.base import Budget
from solvers.rannc.groups import AtomicGraph, topological_groups


@dataclass
class _LiveLevel:
    """Mutable quotient graph of one level while its merges happen.

    ``succ[x][y]`` = bytes from group x to group y; ``order`` = a topological order of the live
    groups (``-1`` marks a hole left by a merge); ``pos[x]`` = index of x in ``order``.
    """

    comp_s: FloatArray
    param_bytes: FloatArray
    act_bytes: FloatArray
    work_bytes: FloatArray
    succ: list[dict[int, float]]
    pred: list[dict[int, float]]
    order: list[int]
    pos: list[int]


def level_aggregates(ag: AtomicGraph, group_of: IntArray, n: int) -> tuple[FloatArray, ...]:
    """(computation time, parameter bytes, activation bytes, working bytes) per group."""
    comp_s = np.bincount(group_of, weights=ag.comp_s, minlength=n).astype(np.float64)
    param_bytes = np.bincount(group_of, weights=ag.param_bytes, minlength=n).astype(np.float64)
    act_bytes = np.bincount(group_of, weights=ag.act_bytes, minlength=n).astype(np.float64)
    work_bytes = np.zeros(n)
    np.maximum.at(work_bytes, group_of, ag.work_bytes)
    return comp_s, param_bytes, act_bytes, work_bytes


def _live(ag: AtomicGraph, group_of: IntArray, n: int) -> _LiveLevel:
    comp_s, param_bytes, act_bytes, work_bytes = level_aggregates(ag, group_of, n)
    succ: list[dict[int, float]] = [{} for _ in range(n)]
    pred: list[dict[int, float]] = [{} for _ in range(n)]
    for a, b, size in zip(group_of[ag.edge_src].tolist(), group_of[ag.edge_dst].tolist(), ag.edge_bytes.tolist(),
                          strict=True):
        if a != b:
            succ[a][b] = succ[a].get(b, 0.0) + size
            pred[b][a] = pred[b].get(a, 0.0) + size
    order = list(range(n))  # ids are already topologically ordered
    return _LiveLevel(comp_s, param_bytes, act_bytes, work_bytes, succ, pred, order, list(range(n)))


def _window_descendants(lv: _LiveLevel, first: int, second: int) -> set[int] | None:
    """Descendants of ``first`` placed between it and ``second``; ``None`` if one reaches ``second``.

    ``first -> second`` is an edge; the union is convex iff no other path joins them.
    """
    limit = lv.pos[second]
    stack = [z for z in lv.succ[first] if z != second]
    seen: set[int] = set()
    while stack:
        z = stack.pop()
        if z == second:
            return None
        if z in seen or lv.pos[z] > limit:
            continue
        seen.add(z)
        stack.extend(lv.succ[z])
    return seen


def _merge(lv: _LiveLevel, first: int, second: int, desc: set[int]) -> None:
    """Contract the edge ``first -> second`` into ``first`` and repair the topological order."""
    for arr in (lv.comp_s, lv.param_bytes, lv.act_bytes):
        arr[first] += arr[second]
    lv.work_bytes[first] = max(lv.work_bytes[first], lv.work_bytes[second])
    for z, size in lv.succ[second].items():
        lv.pred[z].pop(second, None)
        lv.succ[first][z] = lv.succ[first].get(z, 0.0) + size
        lv.pred[z][first] = lv.pred[z].get(first, 0.0) + size
    for z, size in lv.pred[second].items():
        lv.succ[z].pop(second, None)
        if z != first:
            lv.pred[first][z] = lv.pred[first].get(z, 0.0) + size
            lv.succ[z][first] = lv.succ[z].get(first, 0.0) + size
    lv.succ[first].pop(second, None)
    lv.succ[second], lv.pred[second] = {}, {}
    p1, p2 = lv.pos[first], lv.pos[second]
    window = [z for z in lv.order[p1 + 1:p2] if z >= 0]
    arranged = [z for z in window if z not in desc] + [first] + [z for z in window if z in desc]
    arranged += [-1] * (p2 - p1 + 1 - len(arranged))
    lv.order[p1:p2 + 1] = arranged
    for i in range(p1, p2 + 1):
        if lv.order[i] >= 0:
            lv.pos[lv.order[i]] = i


def _try_merge(ag: AtomicGraph, lv: _LiveLevel, v: int, done: list[bool]) -> tuple[int, int] | None:
    """Merge ``v`` with its best adjacent partner (§III-B rules); (kept id, removed id) or ``None``."""
    cands = [(lv.comp_s[w], w, True) for w in lv.succ[v] if not done[w]]
    cands += [(lv.comp_s[w], w, False) for w in lv.pred[v] if not done[w]]
    cands.sort()
    for _, w, forward in cands:
        if not ag.fits(lv.param_bytes[v] + lv.param_bytes[w], lv.act_bytes[v] + lv.act_bytes[w], max(lv.work_bytes[v], lv.work_bytes[w])):
            continue
        first, second = (v, w) if forward else (w, v)
        desc = _window_descendants(lv, first, second)
        if desc is None:
            continue
        _merge(lv, first, second, desc)
        return first, second
    return None


def coarsen_level(ag: AtomicGraph, group_of: IntArray, n: int, k: int) -> tuple[IntArray, int]:
    """One coarsening iteration: ``G_L`` (``group_of``, ``n`` groups) -> ``G_{L+1}``."""
    lv = _live(ag, group_of, n)
    done = [False] * n
    rep = list(range(n))  # rep[x] = the live group that x was merged into (x itself if none)
    alive = n
    for v in sorted(range(n), key=lambda x: (lv.comp_s[x], x)):
        if alive <= k:
            break
        if done[v]:
            continue
        merged = _try_merge(ag, lv, v, done)
        if merged is None:
            continue
        keep, gone = merged
        rep[gone] = keep
        done[keep] = done[gone] = True
        alive -= 1
    new_id = [-1] * n
    for i, z in enumerate(x for x in lv.order if x >= 0):
        new_id[z] = i
    mapping = np.asarray([new_id[rep[x]] for x in range(n)], dtype=np.int64)
    return mapping[group_of], alive


def coarsen(ag: AtomicGraph, k: int, budget: Budget | None = None) -> list[IntArray]:
    """All levels ``G_0 .. G_{L*}`` as arrays atomic -> group id (ids in topological order)."""
    n = ag.n
    group_of = np.arange(n, dtype=np.int64)
    order = topological_groups(n, group_of, ag, np.arange(n, dtype=np.float64))
    if order != list(range(n)):
        relabel = np.empty(n, dtype=np.int64)
        relabel[np.asarray(order, dtype=np.int64)] = np.arange(n)
        group_of = relabel
    levels = [group_of]
    while n > k and not (budget is not None and budget.expired()):
        group_of, m = coarsen_level(ag, levels[-1], n, k)
        if m == n:
            break
        levels.append(group_of)
        n = m
    return levels
