"""Outer level of the device mapping, Alg. 1: binary search on the target stage time.

The interval starts at ``[t_l0, t_r0]``: the lower bound of Eq. 10 / 11 and the best of the
consecutive, p2p-first and a few random mappings.  Each round tries ``parallel_targets`` targets
that divide the interval evenly (§V-B enhancement); a target found lowers ``t_r`` to the found
mapping's value, a target proven infeasible (search exhausted) raises ``t_l``, a target whose
search hit its time slice proves nothing.  The loop ends when ``t_r - t_l <= eps * t_r``
(optimal within ``eps``, Proposition 2), at the deadline, or when a round proves nothing and a
last round with one target and all the remaining time proves nothing either; the best mapping
found is returned with the proven lower bound.  Sequential targets each get their share of the
half of the remaining time that a round may use.

``workers > 1`` runs a round's targets in a pool of forked processes (the DFS is pure Python,
so threads would share one core); on a 2-core machine 2 workers is the useful maximum.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple, TypeVar

import numpy as np

from solvers.arrays import IntArray
from solvers.mapping.bounds import lower_bound
from solvers.mapping.dfs import SearchResult, make_spec, placement_array, search
from solvers.mapping.heuristics import consecutive_mapping, p2p_mapping, random_mapping
from solvers.mapping.stage_graph import Mode, StageGraph, mapping_objective_s
from solvers.model.topology import Topology

RANDOM_STARTS = 4


@dataclass
class MappingResult:
    """Best mapping (``place[s, i]``), its instantiated objective, the proven bound and counters."""

    place: IntArray
    objective_s: float
    lower_bound_s: float
    status: str
    mode: str
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def gap(self) -> float:
        return (self.objective_s - self.lower_bound_s) / self.objective_s if self.objective_s > 0 else 0.0


def initial_upper_bound(sg: StageGraph, topo: Topology, mode: Mode, seed: int,
                        guard_s: float = float("inf")) -> tuple[IntArray, float, str]:
    """``t_r0``: the best of CS, p2p-first and ``RANDOM_STARTS`` random mappings (within the guard)."""
    s, r, d = sg.n_stages, sg.replicas, topo.n_devices
    cands = [("consecutive", consecutive_mapping(s, r)), ("p2p", p2p_mapping(s, r))]
    cands += [(f"random{k}", random_mapping(s, r, d, seed + k)) for k in range(RANDOM_STARTS)]
    other: Mode = "ar" if mode == "m" else "m"
    if np.isfinite(guard_s):
        cands = [(name, p) for name, p in cands if mapping_objective_s(sg, topo, p, other) <= guard_s]
    scored = [(mapping_objective_s(sg, topo, p, mode), k, name, p) for k, (name, p) in enumerate(cands)]
    value, _, name, place = min(scored, key=lambda t: (t[0], t[1]))
    return place, value, name


def guard_cap_s(sg: StageGraph, topo: Topology, mode: Mode) -> float:
    """The guard of an instantiation: the other instantiation's value of the better of CS and p2p-first."""
    other: Mode = "ar" if mode == "m" else "m"
    if (other == "ar" and sg.replicas <= 1) or (other == "m" and len(sg.src) == 0):
        return float("inf")
    heuristics = (consecutive_mapping(sg.n_stages, sg.replicas), p2p_mapping(sg.n_stages, sg.replicas))
    return min(mapping_objective_s(sg, topo, p, other) for p in heuristics) * (1 + 1e-12)


SpecT = TypeVar("SpecT")
"""What an inner search reads (:class:`~solvers.mapping.dfs.SearchSpec`, or the combined objective's spec)."""
SearchFn = Callable[[SpecT, float, float, int], SearchResult]
"""An inner search ``(spec, target, deadline, node_limit) -> SearchResult``: a module-level
function, so that a process pool can pickle it."""


@dataclass
class SearchCounters:
    """Alg. 1's counters: rounds, inner searches, the nodes they expanded and the searches that hit
    their time slice (``timeouts``)."""

    rounds: int = 0
    searches: int = 0
    search_nodes: int = 0
    timeouts: int = 0

    def as_stats(self) -> dict[str, int]:
        """The counters under their ``plan.stats`` keys."""
        return asdict(self)


class Bracket(NamedTuple):
    """Alg. 1's interval ``[t_l, t_r]``: the best mapping found, its objective ``t_r`` and the
    proven lower bound ``t_l``."""

    place: IntArray
    t_r: float
    t_l: float


@dataclass(frozen=True)
class BisectOptions:
    """How Alg. 1's outer loop runs: until ``deadline`` (``time.monotonic``) or a relative gap of
    ``eps_rel``, ``parallel_targets`` targets a round on ``workers`` processes, each inner search
    stopping after ``node_limit`` nodes."""

    deadline: float
    eps_rel: float = 1e-3
    parallel_targets: int = 2
    workers: int = 1
    node_limit: int = 2_000_000


def bisect_targets(search_fn: SearchFn[SpecT], spec: SpecT, value_of: Callable[[IntArray], tuple[IntArray, float]],
                   start: Bracket, options: BisectOptions, counters: SearchCounters) -> Bracket:
    """Alg. 1's outer loop on ``[t_l, t_r]`` (module doc), for any inner search: ``value_of``
    turns what a search found into a mapping and its objective.  Returns the best mapping, its
    value and the proven lower bound; counts rounds, searches, nodes and timeouts in ``counters``."""
    place, t_r, t_l = start
    deadline, eps_rel, node_limit = options.deadline, options.eps_rel, options.node_limit
    parallel_targets, workers = options.parallel_targets, options.workers
    pool = None
    if workers > 1:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))
    stalled = False  # the last round proved nothing: one more round, one target, all the time left
    try:
        while t_r - t_l > eps_rel * t_r:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            k = 1 if stalled else max(1, parallel_targets)
            share = 1.0 if stalled else 0.5
            targets = [t_l + (t_r - t_l) * (j + 1) / (k + 1) for j in range(k)]
            results = _run_round(search_fn, spec, targets, share, deadline, node_limit, pool)
            counters.rounds += 1
            progress = False
            for t, (outcome, found, nodes) in zip(targets, results, strict=False):
                counters.searches += 1
                counters.search_nodes += nodes
                if outcome == "found" and found is not None:
                    cand, value = value_of(found)
                    if value < t_r:
                        place, t_r = cand, value
                    progress = True
                elif outcome == "exhausted":
                    t_l = max(t_l, t)
                    progress = True
                else:
                    counters.timeouts += 1
            if not progress and stalled:
                break
            stalled = not progress
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return Bracket(place, t_r, t_l)


def _run_round(search_fn: SearchFn[SpecT], spec: SpecT, targets: list[float], share: float, deadline: float,
               node_limit: int, pool: ProcessPoolExecutor | None) -> list[SearchResult]:
    """One round of inner searches: in the pool together, or one after another (ascending targets,
    each with its share of what is left; stop at the first found, larger targets are found too)."""
    remaining = deadline - time.monotonic()
    if pool is not None:
        until = min(deadline, time.monotonic() + max(0.02, remaining * share))
        futures = [pool.submit(search_fn, spec, t, until, node_limit) for t in targets]
        return [f.result() for f in futures]
    results: list[SearchResult] = []
    for j, t in enumerate(targets):
        left = deadline - time.monotonic()
        until = min(deadline, time.monotonic() + max(0.02, left * share / (len(targets) - j)))
        results.append(search_fn(spec, t, until, node_limit))
        if results[-1].outcome == "found":
            break
    return results


def map_stages(sg: StageGraph, topo: Topology, mode: Mode, options: BisectOptions, *, seed: int = 0,
               guard: bool = False) -> MappingResult:
    """Alg. 1 with batched targets; see the module doc.

    ``guard``: solve Problem (5) for ``mode`` subject to every replica's time under the other
    instantiation staying within the better of CS and p2p-first (:func:`guard_cap_s`).
    """
    cap = guard_cap_s(sg, topo, mode) if guard else float("inf")
    place, t_r, start_name = initial_upper_bound(sg, topo, mode, seed, cap)
    t_l = min(lower_bound(sg, topo, mode), t_r)
    spec = make_spec(sg, topo, mode, *((float("inf"), cap) if mode == "m" else (cap, float("inf"))))
    def value_of(by_depth: IntArray) -> tuple[IntArray, float]:
        cand = placement_array(spec, by_depth, sg.n_stages)
        return cand, mapping_objective_s(sg, topo, cand, mode)

    counters = SearchCounters()
    initial = Bracket(place, t_r, t_l)
    place, t_r, t_l = bisect_targets(search, spec, value_of, initial, options, counters)
    status = "optimal" if t_r - t_l <= options.eps_rel * t_r else "feasible"
    stats: dict[str, Any] = {"initial_lower_bound_s": initial.t_l, "initial_upper_bound_s": initial.t_r,
                             "upper_bound_from": start_name, **counters.as_stats(), "instantiation": mode,
                             "guard_s": cap if np.isfinite(cap) else None, "lower_bound_s": t_l}
    return MappingResult(place, t_r, t_l, status, mode, stats)
