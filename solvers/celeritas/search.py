"""Fusion granularity and placement order adapted to the graph (a deviation from Celeritas,
docs/celeritas.md, "Deviations from the paper").

The paper fixes ``R = 200`` and ``M`` (Eq. 6), tuned for graphs of thousands of ops whose
communication dominates.  On a branchy graph with cheap messages those clusters become a chain
and the devices run the branches one after the other.  Here each candidate is the paper's
pipeline (optimal fusion over the CPD-TOPO order, coarse graph, Adjusting Placement) with one
exploration range from ``R, R // 2, ..., 1`` and one coarse placement order, ranked by planned
makespan (fewest best-effort nodes first).  The list scheduler's timing of a coarse graph is
only an estimate of the op-level replay (a cluster waits for all its inputs, messages queue in
another order), so the solver scores the best few with the simulator and keeps the best of
those.  The time limit is checked between candidates; the first one always runs.  Ranges are
tried from the largest down; one whose clustering has at most 2 % more clusters than the last
one placed is skipped (the same, or nearly the same, clustering: on a 36k-op graph R = 200 and
R = 12 differ by 11 clusters of 16,924).

Large graphs (:class:`NodeBudget`): a placement costs time in proportion to the nodes of its
coarse graph (tens of microseconds each) and a simulation in proportion to the ops, so the
search gets a budget of placed nodes.  When ``|V| x ranges x placement orders`` fits the budget
the search is the one above.  Otherwise it starts at the end of the range that the graph's CCR
(Eq. 1) points to — no fusion (R = 1) and the b-level order (HEFT's rank) first when computation
dominates (CCR < 1), the largest R and CPD-TOPO first when communication does, the paper's
setting — walks towards the other end, and stops before the first candidate whose coarse graph
would overrun the budget (the first candidate always runs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from solvers.arrays import IntArray
from solvers.base import Budget
from solvers.celeritas.fusion import Fusion
from solvers.listsched import ListSchedule, TaskGraph


@dataclass(frozen=True)
class Candidate:
    """One run of the pipeline: its fusion, coarse graph, placement and placement order."""

    fusion: Fusion
    coarse: TaskGraph
    sched: ListSchedule
    corder: IntArray
    placement_order: str
    exploration_range: int
    chains: bool
    move_threshold: float

    def key(self) -> tuple[int, float]:
        return self.sched.best_effort, self.sched.makespan_s()


def exploration_ranges(r_max: int, adaptive: bool) -> list[int]:
    """``[r_max]``, or with ``adaptive`` ``r_max, r_max // 2, ..., 1``."""
    if not adaptive:
        return [r_max]
    out = [r_max]
    while out[-1] > 1:
        out.append(out[-1] // 2)
    return out


SAME_CLUSTERS = 0.02  # a range adding fewer clusters than this fraction is not placed again


@dataclass
class NodeBudget:
    """The coarse nodes the search may still place (module doc); ``placed``: how many it has."""

    remaining: int
    placed: int = 0
    exhausted: bool = False  # a candidate was refused: the search stops there

    def allows(self, nodes: int) -> bool:
        """Whether a coarse graph of ``nodes`` may be placed: within what is left, or nothing
        placed yet (the first candidate always runs)."""
        return self.placed == 0 or nodes <= self.remaining

    def spend(self, nodes: int) -> None:
        self.placed += nodes
        self.remaining -= nodes

FuseFn = Callable[[int, float, bool], tuple[Fusion, TaskGraph]]  # (R, M, chains)
PlaceFn = Callable[[TaskGraph, Fusion, str, float], tuple[ListSchedule, IntArray]]  # (.., order, threshold)


def search(fuse_at: FuseFn, place: PlaceFn, ranges: Sequence[int], cap_bytes: float,
           placement_orders: Sequence[str], chains: bool, move_threshold: float, budget: Budget,
           attempts: list[dict[str, Any]], nodes: NodeBudget | None = None) -> list[Candidate]:
    """The candidates over ``ranges`` x ``placement_orders`` (module doc), best first, those
    with the same placement of the same clusters once; every run is appended to ``attempts``.
    ``ranges`` run in the order given (decreasing or increasing); with ``nodes`` the search
    stops before the first placement that the node budget does not allow."""
    found: list[Candidate] = []
    last_clusters = 0
    increasing = len(ranges) > 1 and ranges[0] < ranges[-1]
    for r_range in ranges:
        t1 = time.perf_counter()
        fusion, coarse = fuse_at(r_range, cap_bytes, chains)
        if found and (fusion.n_clusters * (1.0 + SAME_CLUSTERS) >= last_clusters if increasing
                      else fusion.n_clusters <= last_clusters * (1.0 + SAME_CLUSTERS)):
            continue  # (nearly) the clustering just placed
        last_clusters = fusion.n_clusters
        t2 = time.perf_counter()
        for kind in placement_orders:
            if found and budget.expired():
                return ranked(found)
            if nodes is not None:
                if not nodes.allows(fusion.n_clusters):
                    nodes.exhausted = True
                    return ranked(found)
                nodes.spend(fusion.n_clusters)
            t3 = time.perf_counter()
            sched, corder = place(coarse, fusion, kind, move_threshold)
            cand = Candidate(fusion, coarse, sched, corder, kind, r_range, chains, move_threshold)
            attempts.append({"exploration_range": r_range, "cluster_memory_cap_bytes": cap_bytes,
                             "clusters": fusion.n_clusters, "placement_order": kind,
                             "fusion": "chains" if chains else "contiguous", "move_threshold": move_threshold,
                             "planned_makespan_s": sched.makespan_s(), "best_effort_nodes": sched.best_effort,
                             "fusion_s": t2 - t1, "placement_s": time.perf_counter() - t3})
            found.append(cand)
    return ranked(found)


def ranked(found: Sequence[Candidate]) -> list[Candidate]:
    """``found`` by :meth:`Candidate.key`, the same placement of the same clusters once."""
    out: list[Candidate] = []
    placements: set[tuple[bytes, tuple[int, ...]]] = set()
    for cand in sorted(found, key=lambda c: c.key()):
        placement = (cand.fusion.starts.tobytes(), tuple(cand.sched.device))
        if placement not in placements:
            placements.add(placement)
            out.append(cand)
    return out
