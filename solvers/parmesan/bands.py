"""Band DP: the stage DP again at op level around the boundaries of a partition found on a
clustered graph (not in the paper; ``ParmesanOptions.band_rounds``).

When the fronted subgraphs of the op graph exceed the budget, the DP (Eq. 13) runs on
hyper-operators and its stage boundaries can only fall between them; the refinement's
single-op moves (§IV-C) rarely recover the balance lost.  Multilevel partitioners undo the
coarsening near the cut; here, with the ops in the order (stage, topological position), which
is topological and makes every boundary a prefix, a window of ``h`` ops on each side of each
boundary is split back into single ops and every run of ops between two windows becomes one
hyper-operator.  The DP then runs over the down-closed sets ``L_b + J`` (``L_b`` = the ops
before window ``b``, ``J`` a down-closed set of the window's ops), the empty set and the whole
graph: every chain of them is a partition that follows the edges, the current one among them,
so the DP's optimum (Eq. 3, memory and pins as in :mod:`solvers.parmesan.dp`) is never worse.
Windows shrink until the sets and pairs fit the DP budgets; rounds repeat around the new
boundaries while the objective improves.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from solvers.arrays import IntArray
from solvers.model.problem import Problem
from solvers.parmesan.clustering import build_cluster_graph
from solvers.parmesan.dp import build_transitions, run_dp
from solvers.partition.costs import ReferenceCosts
from solvers.partition.fronted import down_sets, masks_to_rows
from solvers.partition.shapes import StagePartition

MAX_WINDOW = 32  # ops on each side of a boundary in the first try


@dataclass(frozen=True)
class BandBudgets:
    """How far the band DP goes: ``rounds`` band DPs at most, each within the DP's budgets
    ``max_sets`` (down-closed sets) and ``max_pairs`` (pairs of them)."""

    rounds: int
    max_sets: int
    max_pairs: int


def _band_dp(problem: Problem, costs: ReferenceCosts, current: StagePartition, stage_pins: Mapping[int, int],
             half: int, budgets: BandBudgets, allreduce: tuple[float, float]) -> tuple[IntArray, float] | None:
    """One band DP with windows of ``half`` ops each side around the boundaries of ``current``;
    ``None`` past a budget or when no partition of the family fits."""
    stage_of, n_stages, replicas, micro_batches = current
    max_sets, max_pairs = budgets.max_sets, budgets.max_pairs
    g = problem.graph
    order = np.lexsort((g.topo_position, stage_of))  # topological, every stage a contiguous run
    n = g.n_ops
    bounds = np.searchsorted(stage_of[order], np.arange(1, n_stages))  # position of boundary b = 1..S-1
    windows: list[tuple[int, int]] = []
    prev_hi = 0
    for b, p in enumerate(bounds.tolist()):
        nxt = int(bounds[b + 1]) if b + 1 < len(bounds) else n
        lo = max(prev_hi, p - half)
        hi = min(n, p + half, (p + nxt) // 2 if nxt > p else p)
        hi = max(hi, lo)
        windows.append((lo, hi))
        prev_hi = hi
    label = np.empty(n, dtype=np.int64)  # by position in ``order``
    in_window = np.zeros(n, dtype=bool)
    for lo, hi in windows:
        in_window[lo:hi] = True
    run = np.cumsum(np.r_[True, in_window[1:] | in_window[:-1]])  # a new label at each window op and after
    label[:] = run - 1
    labels = np.empty(n, dtype=np.int64)
    labels[order] = label
    cg = build_cluster_graph(problem, costs, labels, stage_pins)
    cluster_at = cg.cluster_of[order]  # cluster of each position
    k = cg.k
    masks: set[int] = {0, (1 << k) - 1}
    per_band = max(2, max_sets // max(1, len(windows)))
    for lo, hi in windows:
        below = 0
        for c in set(cluster_at[:lo].tolist()):
            below |= 1 << c
        inside = sorted(set(cluster_at[lo:hi].tolist()))
        local = {c: i for i, c in enumerate(inside)}
        keep = [(local[a], local[b]) for a, b in zip(cg.src.tolist(), cg.dst.tolist(), strict=True)
                if a in local and b in local]
        src = np.array([a for a, _ in keep], dtype=np.int64)
        dst = np.array([b for _, b in keep], dtype=np.int64)
        found = down_sets(len(inside), src, dst, per_band)
        if found is None:
            return None
        for m in found:
            mask = below
            for i, c in enumerate(inside):
                if m >> i & 1:
                    mask |= 1 << c
            masks.add(mask)
    ordered = sorted(masks, key=lambda m: (m.bit_count(), m))
    sets = masks_to_rows(ordered, k)
    tr = build_transitions(cg, sets, max_pairs)
    if tr is None:
        return None
    result = run_dp(problem, tr, n_stages, replicas, micro_batches, allreduce)
    if result is None:
        return None
    return result.op_stages(cg.cluster_of), result.objective_s


def band_refine(problem: Problem, costs: ReferenceCosts, start: StagePartition, stage_pins: Mapping[int, int],
                budgets: BandBudgets, allreduce: tuple[float, float] = (0.0, 0.0), deadline: float = float("inf"),
                ) -> tuple[IntArray, dict[str, float]] | None:
    """Up to ``budgets.rounds`` band DPs (module docstring) from ``start``, each around the boundaries of the one before,
    while the DP's objective falls and ``time.monotonic()`` is before ``deadline`` (checked before
    each DP); ``None`` when the first one finds nothing (budgets, memory, time).  Returns the last
    improving partition and counters for ``plan.stats``."""
    best: tuple[IntArray, float] | None = None
    done, window = 0, 0
    current = start.stage_of
    for _ in range(budgets.rounds):
        half, found = MAX_WINDOW, None
        while half >= 1 and found is None and time.monotonic() < deadline:
            found = _band_dp(problem, costs, start._replace(stage_of=current), stage_pins, half, budgets, allreduce)
            if found is None:
                half //= 2
        if found is None or (best is not None and not found[1] < best[1] * (1 - 1e-12)):
            break
        done, window = done + 1, half
        best = found
        current = found[0]
    if best is None:
        return None
    return best[0], {"band_rounds": done, "band_window_ops": window, "band_dp_objective_s": best[1]}
