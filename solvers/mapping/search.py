"""Alg. 1 + Alg. 2 with the combined objective (:mod:`solvers.mapping.objective`).

Same outer loop as :func:`~solvers.mapping.binary.map_stages` (binary search on the
target with batched targets, §V-B), same inner DFS structure as
:func:`~solvers.mapping.dfs.search`; what changes is the quantity checked:

* the interval starts at the assignment bound (:func:`~solvers.mapping.bounds.assignment_bound_s`)
  and the best of CS, p2p-first, their zigzag rings, a few random mappings and the mappings
  built from the conflict bound's leaves (:func:`~solvers.mapping.packing.packing_starts`) under
  the combined objective, improved by a large-neighbourhood search (:func:`multi_start_improve`);
* Alg. 2 places replicas lane by lane; placing ``(s, i)`` on ``d`` fixes lane ``i``'s transfers
  to its placed neighbours and the ring hops to its placed ring neighbours, and bounds the
  transfers to unplaced neighbours by ``d``'s cheapest channel and the ring by the widest ring
  through ``d``; the partial objective (every unknown term at its floor) is a lower bound of
  every completion (the recurrences are monotone), so a candidate above the target is pruned
  exactly, and candidates with ``g(s, d)`` above the target are never tried;
* symmetry: twin devices (one per class), and the lanes' rotation (stage 0's replica 0 takes
  the smallest device of its ring) — and reflection when every channel is symmetric.  Lane
  permutations other than these change the rings' order, so they are not broken.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from solvers.arrays import BoolArray, FloatArray, IntArray
from solvers.mapping.binary import BisectOptions, Bracket, MappingResult, SearchCounters, bisect_targets
from solvers.mapping.bounds import DeviceBounds, assignment_bound_s, device_bounds
from solvers.mapping.dfs import SearchResult
from solvers.mapping.heuristics import consecutive_mapping, p2p_mapping, random_mapping, zigzag_rings
from solvers.mapping.hosts import HostRelaxation, host_index, start_host_relaxation
from solvers.mapping.objective import (
    PipelineCosts,
    PipelineModel,
    combined_objective_s,
    edge_costs,
    iteration_bound_s,
    ring_s,
)
from solvers.mapping.packing import packing_starts
from solvers.mapping.symmetry import twin_classes
from solvers.model.topology import Topology

RANDOM_STARTS = 4
HOST_SHARE = 0.25  # of the mapping's time for the host relaxation (solvers.mapping.hosts)
HOST_SEARCH_SHARE = 0.1  # then at most this share for the search inside its layout


@dataclass(frozen=True)
class CombinedSpec:
    """Everything one inner search needs (picklable).

    ``order[x]`` = (stage, lane) placed at depth ``x``; ``edges_of[s]`` = (edge, stage is the
    sender) of the stage edges touching ``s``; ``g[s, d]`` = the replica bound of the assignment
    relaxation; ``order_after[x]`` = depths whose device the device of depth ``x`` must exceed;
    ``hosts[d]`` = the index of device ``d``'s host.
    """

    model: PipelineModel
    costs: PipelineCosts
    bounds: DeviceBounds
    g: FloatArray
    order: list[tuple[int, int]]
    edges_of: list[list[tuple[int, bool]]]
    twin_class: IntArray
    order_after: list[list[int]]
    n_devices: int
    hosts: IntArray


def make_combined_spec(model: PipelineModel, topo: Topology, costs: PipelineCosts, g: FloatArray,
                       bounds: DeviceBounds | None = None) -> CombinedSpec:
    """The DFS's view of the problem; ``bounds``: :func:`device_bounds` when the caller has them."""
    s_, r = model.n_stages, model.replicas
    order = [(s, i) for i in range(r) for s in range(s_)]
    depth = {node: x for x, node in enumerate(order)}
    edges_of: list[list[tuple[int, bool]]] = [[] for _ in range(s_)]
    for j, (a, c) in enumerate(zip(model.src.tolist(), model.dst.tolist(), strict=True)):
        edges_of[a].append((j, True))
        edges_of[c].append((j, False))
    symmetric = bool(np.array_equal(topo.bandwidth_Bps, topo.bandwidth_Bps.T)
                     and np.array_equal(topo.latency_s, topo.latency_s.T))
    order_after: list[list[int]] = [[] for _ in order]
    if r > 1:
        for i in range(1, r):
            order_after[depth[(0, i)]] = [depth[(0, 0)]]
        if symmetric and r >= 3:
            order_after[depth[(0, r - 1)]].append(depth[(0, 1)])
    bounds = device_bounds(model, costs, topo) if bounds is None else bounds
    return CombinedSpec(model, costs, bounds, g, order, edges_of, twin_classes(topo),
                        order_after, topo.n_devices, host_index(topo))


@dataclass(slots=True)
class _Candidates:
    """The feasible devices of one depth in trial order, and what placing the ``k``-th sets.

    ``edges[j]`` = the edge's ``(Cf, Cb)`` lower bounds, ``bw`` / ``lat`` / ``lb`` = the stage
    ring's bottleneck bandwidth, largest hop latency and floor: each a scalar or one entry per
    candidate.
    """

    devices: IntArray
    edges: dict[int, tuple[float | FloatArray, float | FloatArray]]
    bw: float | FloatArray
    lat: float | FloatArray
    lb: float | FloatArray


@dataclass(slots=True)
class _Undo:
    """What a depth's placed candidate replaced: ``edges[j]`` = ``(Cf, Cb)`` before, ``ring`` =
    the stage ring's ``(bw, lat, lb, value)`` before."""

    edges: dict[int, tuple[float, float]]
    ring: tuple[float, float, float, Any]


@dataclass(slots=True)
class _Frame:
    """One depth of the DFS: ``pos`` in the free order, its candidates, the next one to try and
    the undo record of the one placed (``None`` when none is)."""

    pos: int
    candidates: _Candidates
    next: int = 0
    undo: _Undo | None = None


def search_combined(spec: CombinedSpec, target_s: float, deadline: float, node_limit: int,
                    fixed: IntArray | None = None, allowed_at: BoolArray | None = None) -> SearchResult:
    """Alg. 2 for the combined objective: a mapping whose objective is <= ``target_s``.

    ``fixed`` (``S x R``, -1 = free): replicas kept where they are; only the others are placed,
    in ``spec.order``'s order (symmetry breaking by order is then off: it assumes a full search).
    ``allowed_at`` (``S x R x n``): the devices each replica may take (default: all).
    Returns the outcome, the ``S x R`` placement (found only) and the nodes expanded.
    """
    model, costs, bounds = spec.model, spec.costs, spec.bounds
    s_, r, n = model.n_stages, model.replicas, spec.n_devices
    src, dst = model.src.tolist(), model.dst.tolist()
    place = np.full((s_, r), -1, dtype=np.int64) if fixed is None else fixed.copy()
    used = np.zeros(n, dtype=bool)
    used[place[place >= 0]] = True
    cf = [f for f, _ in bounds.edge_floor]
    cb = [b for _, b in bounds.edge_floor]
    for j, (a, c) in enumerate(zip(src, dst, strict=True)):
        both = (place[a] >= 0) & (place[c] >= 0)
        if both.any():
            cf[j] = max(cf[j], float(costs.fwd[j][place[a][both], place[c][both]].max()))
            cb[j] = max(cb[j], float(costs.fwd[j][place[c][both], place[a][both]].max()))
    ar_bw = [np.inf] * s_
    ar_lat = [0.0] * s_
    ar_lb = list(bounds.ar_floor)
    if r > 1:
        for s in range(s_):
            ring, nxt = place[s], np.roll(place[s], -1)
            hop = (ring >= 0) & (nxt >= 0)
            if hop.any():
                ar_bw[s] = float(costs.bandwidth_Bps[ring[hop], nxt[hop]].min())
                ar_lat[s] = float(costs.latency_s[ring[hop], nxt[hop]].max())
            if (ring >= 0).any():
                ar_lb[s] = max(ar_lb[s], float(bounds.ar_at[s][ring[ring >= 0]].max()))
    params = model.param_bytes.tolist()
    devices = np.arange(n)
    allowed = spec.g <= target_s * (1 + 1e-12)
    free_order = [x for x, (s, i) in enumerate(spec.order) if place[s, i] < 0]
    order_after = spec.order_after if fixed is None else [[] for _ in spec.order]
    nodes = 0
    if not free_order:
        value = combined_objective_s(model, costs, place)
        return SearchResult("found", place, 0) if value <= target_s * (1 + 1e-12) else SearchResult("exhausted", None, 0)

    def ring_value(s: int, bw: Any, lat: Any, lb: Any) -> Any:
        return np.maximum(lb, ring_s(r, params[s], bw, lat)) if r > 1 else 0.0

    ar_val = [ring_value(t, ar_bw[t], ar_lat[t], ar_lb[t]) for t in range(s_)]  # kept as replicas are placed

    def evaluate(x: int) -> _Candidates:
        """Feasible candidates of depth ``x`` in trial order, with the state each one sets."""
        s, i = spec.order[x]
        ok = ~used & allowed[s]
        if allowed_at is not None:
            ok &= allowed_at[s, i]
        for y in order_after[x]:
            ys, yi = spec.order[y]
            ok &= devices > place[ys, yi]
        cand = np.flatnonzero(ok)
        if len(cand) == 0:
            return _Candidates(cand, {}, 0.0, 0.0, 0.0)
        cf_v: list[Any] = list(cf)
        cb_v: list[Any] = list(cb)
        local = np.zeros(len(cand))
        new_edges: dict[int, tuple[Any, Any]] = {}
        for j, sender in spec.edges_of[s]:
            other = dst[j] if sender else src[j]
            y = int(place[other, i])
            m = costs.fwd[j]
            if y >= 0:
                fwd_t = m[cand, y] if sender else m[y, cand]
                grad_t = m[y, cand] if sender else m[cand, y]
                local += fwd_t + grad_t
            else:
                fwd_t = bounds.out_best[j][cand] if sender else bounds.in_best[j][cand]
                grad_t = bounds.in_best[j][cand] if sender else bounds.out_best[j][cand]
            cf_v[j] = np.maximum(cf[j], fwd_t)
            cb_v[j] = np.maximum(cb[j], grad_t)
            new_edges[j] = (cf_v[j], cb_v[j])
        ar_v: list[Any] = list(ar_val)
        bw_v: Any = ar_bw[s]
        lat_v: Any = ar_lat[s]
        if r > 1:
            p, q = int(place[s, (i - 1) % r]), int(place[s, (i + 1) % r])
            if p >= 0:
                bw_v = np.minimum(bw_v, costs.bandwidth_Bps[p, cand])
                lat_v = np.maximum(lat_v, costs.latency_s[p, cand])
            if q >= 0:
                bw_v = np.minimum(bw_v, costs.bandwidth_Bps[cand, q])
                lat_v = np.maximum(lat_v, costs.latency_s[cand, q])
            if (p >= 0 or q >= 0) and params[s] > 0:
                local += params[s] / np.minimum(bw_v, 1e300)
        lb_v = np.maximum(ar_lb[s], bounds.ar_at[s][cand])
        with np.errstate(divide="ignore"):
            ar_v[s] = ring_value(s, bw_v, lat_v, lb_v)
        value = np.asarray(iteration_bound_s(model, cf_v, cb_v, ar_v), dtype=np.float64) * np.ones(len(cand))
        idx = np.flatnonzero(value <= target_s * (1 + 1e-12))
        idx = idx[np.lexsort((local[idx], value[idx]))]
        _, first = np.unique(spec.twin_class[cand[idx]], return_index=True)
        idx = idx[np.sort(first)]

        def pick(v: Any) -> Any:
            return v[idx] if isinstance(v, np.ndarray) and v.shape == (len(cand),) else v

        return _Candidates(cand[idx], {j: (pick(a), pick(b)) for j, (a, b) in new_edges.items()},
                           pick(bw_v), pick(lat_v), pick(lb_v))

    def scalar(v: Any, k: int) -> float:
        return float(v[k]) if isinstance(v, np.ndarray) and v.ndim else float(v)

    stack = [_Frame(0, evaluate(free_order[0]))]
    while stack:
        top = stack[-1]
        pos, cands, k = top.pos, top.candidates, top.next
        s, i = spec.order[free_order[pos]]
        if top.undo is not None:  # undo this depth's previous candidate
            used[place[s, i]] = False
            place[s, i] = -1
            for j, (a, b) in top.undo.edges.items():
                cf[j], cb[j] = a, b
            ar_bw[s], ar_lat[s], ar_lb[s], ar_val[s] = top.undo.ring
            top.undo = None
        if k >= len(cands.devices):
            stack.pop()
            continue
        d = int(cands.devices[k])
        top.next = k + 1
        nodes += 1
        if nodes % 128 == 0 and (time.monotonic() > deadline or nodes > node_limit):
            return SearchResult("timeout", None, nodes)
        top.undo = _Undo({j: (cf[j], cb[j]) for j in cands.edges}, (ar_bw[s], ar_lat[s], ar_lb[s], ar_val[s]))
        place[s, i] = d
        used[d] = True
        for j, (cf_j, cb_j) in cands.edges.items():
            cf[j], cb[j] = scalar(cf_j, k), scalar(cb_j, k)
        ar_bw[s], ar_lat[s], ar_lb[s] = scalar(cands.bw, k), scalar(cands.lat, k), scalar(cands.lb, k)
        ar_val[s] = ring_value(s, ar_bw[s], ar_lat[s], ar_lb[s])
        if pos == len(free_order) - 1:
            return SearchResult("found", place.copy(), nodes)
        stack.append(_Frame(pos + 1, evaluate(free_order[pos + 1])))
    return SearchResult("exhausted", None, nodes)


@dataclass(frozen=True)
class StopRule:
    """When the large-neighbourhood search stops: at ``deadline`` (``time.monotonic``), within
    ``eps_rel`` of the proven ``floor_s``, after ``patience`` tries in a row without improvement
    (``None``: ``4 S R``, at least 20), or when ``stop()`` says so."""

    deadline: float
    floor_s: float
    eps_rel: float = 1e-3
    patience: int | None = None
    stop: Callable[[], bool] | None = None


def improve(spec: CombinedSpec, place: IntArray, value: float, until: StopRule, seed: int, stats: dict[str, Any],
            allowed_at: BoolArray | None = None) -> tuple[IntArray, float]:
    """Large-neighbourhood search for Alg. 1's upper bound (not in the paper): free two lanes, two
    stages' rings, a ring and two lanes, a few random replicas, the lanes at a costly hop (the
    narrowest hop of a ring drawn in proportion to its all-reduce time, or the slowest lane of an
    edge drawn in proportion to its transfer times, with two random lanes), or (two hosts or more)
    up to 24 replicas on two hosts, one of them holding a device of a costly hop or lane, of the
    incumbent and re-place them with Alg. 2 (target just below the incumbent, a small node
    budget), keep any improvement; each kind of move is drawn in proportion to (its improvements
    + 1) / (its seconds + 1).  Stops as ``until`` says (:class:`StopRule`); ``allowed_at``
    (``S x R x n``) restricts the devices each replica may take.  Every mapping it returns is
    complete and valid."""
    model, costs = spec.model, spec.costs
    rng = np.random.default_rng(seed)
    s_, r = model.n_stages, model.replicas
    tries = improved = idle = 0
    deadline, floor_s, eps_rel, stop = until.deadline, until.floor_s, until.eps_rel, until.stop
    patience = max(20, 4 * s_ * r) if until.patience is None else until.patience
    kinds = 7 if len(np.unique(spec.hosts)) > 1 else 6
    spent = np.zeros(kinds)  # seconds and improvements per kind of move: kinds are drawn by their yield
    gained = np.zeros(kinds)
    while (time.monotonic() < deadline and value - floor_s > eps_rel * value and idle < patience
           and not (stop is not None and stop())):
        tries += 1
        idle += 1
        fixed = place.copy()
        rate = (gained + 1) / (spent + 1)
        kind = tries - 1 if tries <= kinds else int(rng.choice(kinds, p=rate / rate.sum()))
        if kind == 6:  # replicas on two hosts, one at a costly hop or lane: which host holds what
            at = place[:, sorted(_costly_lanes(spec, place, bool(rng.integers(2)), rng))]
            first = spec.hosts[int(rng.choice(at.reshape(-1)))] if at.size else int(rng.integers(spec.hosts.max() + 1))
            second = int(rng.choice(spec.hosts[place.reshape(-1)]))
            on = np.flatnonzero(np.isin(spec.hosts[place.reshape(-1)], [first, second]))
            fixed.reshape(-1)[rng.choice(on, size=min(len(on), 24), replace=False)] = -1
        elif kind >= 4:  # the lanes at a costly ring hop or lane transfer, and two random lanes
            costly = _costly_lanes(spec, place, kind == 4, rng)
            fixed[:, sorted(costly | set(rng.choice(r, size=min(2, r), replace=False).tolist()))] = -1
        elif kind == 0 or r == 1:  # two lanes (their stage-to-stage transfers)
            lanes = rng.choice(r, size=min(2, r), replace=False)
            fixed[:, lanes] = -1
        elif kind == 1 and s_ > 1:  # two stages' rings: which devices each ring gets
            fixed[rng.choice(s_, size=2, replace=False), :] = -1
        elif kind == 2:  # one stage's ring and two lanes
            fixed[int(rng.integers(s_)), :] = -1
            fixed[:, rng.choice(r, size=min(2, r), replace=False)] = -1
        else:  # random replicas
            flat = rng.choice(s_ * r, size=min(s_ * r, max(4, min(24, s_ * r // 4))), replace=False)
            fixed.reshape(-1)[flat] = -1
        target = value * (1 - 1e-6)
        began = time.monotonic()
        outcome, found, _ = search_combined(spec, target, min(deadline, began + 2.0), 4000, fixed, allowed_at)
        spent[kind] += time.monotonic() - began
        if outcome == "found" and found is not None:
            new_value = combined_objective_s(model, costs, found)
            if new_value < value:
                place, value = found, new_value
                improved += 1
                gained[kind] += 1
                idle = 0
    stats["improve_tries"] = tries
    stats["improve_moves"] = improved
    return place, value


def _costly_lanes(spec: CombinedSpec, place: IntArray, ring: bool, rng: np.random.Generator) -> set[int]:
    """The lanes at the narrowest hop of a ring (``ring``; the ring drawn in proportion to its
    all-reduce time) or at the slowest lane of an edge (drawn in proportion to its transfers)."""
    model, costs = spec.model, spec.costs
    r = model.replicas
    cf, cb, ar = edge_costs(model, costs, place)
    if ring and r > 1 and sum(ar) > 0:
        s = int(rng.choice(model.n_stages, p=np.array(ar) / sum(ar)))
        hop = int(np.argmin(costs.bandwidth_Bps[place[s], np.roll(place[s], -1)]))
        return {hop, (hop + 1) % r}
    weight = np.array(cf) + np.array(cb)
    if model.n_edges == 0 or weight.sum() <= 0:
        return set()
    j = int(rng.choice(model.n_edges, p=weight / weight.sum()))
    a, c = int(model.src[j]), int(model.dst[j])
    both = costs.fwd[j][place[a], place[c]] + costs.fwd[j][place[c], place[a]]
    return {int(np.argmax(both))}


def initial_upper_bound(spec: CombinedSpec, seed: int, deadline: float,
                        starts: Sequence[tuple[str, IntArray]] = ()) -> tuple[IntArray, float, str]:
    """``t_r0``: the best of CS, p2p-first, their zigzag rings, ``RANDOM_STARTS`` random mappings, the given ``starts``
    and two greedy dives of Alg. 2 (no target: each replica on its best device by the partial
    objective), one placing lane by lane, one stage by stage."""
    model, costs, n = spec.model, spec.costs, spec.n_devices
    s, r = model.n_stages, model.replicas
    cands = [("consecutive", consecutive_mapping(s, r)), ("p2p", p2p_mapping(s, r)), *zigzag_starts(model)]
    cands += [(f"random{k}", random_mapping(s, r, n, seed + k)) for k in range(RANDOM_STARTS)]
    cands += list(starts)
    cands += greedy_dives(spec, deadline, "greedy")
    scored = [(combined_objective_s(model, costs, p), k, name, p) for k, (name, p) in enumerate(cands)]
    value, _, name, place = min(scored, key=lambda t: (t[0], t[1]))
    return place, value, name


def greedy_dives(spec: CombinedSpec, deadline: float, prefix: str,
                 allowed_at: BoolArray | None = None) -> list[tuple[str, IntArray]]:
    """Alg. 2 without a target (each replica on its best device by the partial objective), lane
    by lane and stage by stage (``prefix-lanes``, ``prefix-stages``); ``allowed_at``: the devices
    each replica may take (the order's symmetry breaking is then off)."""
    s, r = spec.model.n_stages, spec.model.replicas
    plain: list[list[int]] = [[] for _ in spec.order]
    by_lane = spec if allowed_at is None else replace(spec, order_after=plain)
    by_stage = replace(spec, order=[(t, i) for t in range(s) for i in range(r)], order_after=plain)
    out = []
    for name, greedy_spec in ((f"{prefix}-lanes", by_lane), (f"{prefix}-stages", by_stage)):
        outcome, found, _ = search_combined(greedy_spec, float("inf"), deadline, 50 * s * r, None, allowed_at)
        if outcome == "found" and found is not None:
            out.append((name, found))
    return out


def host_start(spec: CombinedSpec, relax: HostRelaxation, floor_s: float, deadline: float, seed: int,
               stats: dict[str, Any]) -> tuple[str, IntArray] | None:
    """A mapping that follows the host relaxation's layout (:mod:`solvers.mapping.hosts`; or the
    filled layout of :meth:`~solvers.mapping.hosts.HostRelaxationRun.heuristic_layout` where
    HiGHS has none):
    the better of Alg. 2's two greedy dives (each replica on its best device by the partial
    objective, no target; lane by lane, stage by stage), every replica restricted to its host's
    devices, improved by the large-neighbourhood search under the same restriction until
    ``deadline`` (inside hosts whose pairs differ, which devices a layout takes matters as much
    as the layout: random_blk_2 (16,4), 1.24 s after the dive, 1.10 s after 10 s of search)."""
    if relax.host_of is None:
        return None
    allowed_at = relax.host_index[None, None, :] == relax.host_of[:, :, None]
    dives = [(combined_objective_s(spec.model, spec.costs, p), name, p)
             for name, p in greedy_dives(spec, deadline, "host", allowed_at)]
    if not dives:
        return None
    value, name, place = min(dives, key=lambda t: t[0])
    place, _ = improve(spec, place, value, StopRule(deadline, floor_s), seed, stats, allowed_at)
    return name, place


def zigzag_starts(model: PipelineModel) -> list[tuple[str, IntArray]]:
    """CS and p2p-first with zigzag rings (:func:`~solvers.mapping.heuristics.zigzag_rings`)."""
    s, r = model.n_stages, model.replicas
    return [("zigzag-consecutive", zigzag_rings(consecutive_mapping(s, r))),
            ("zigzag-p2p", zigzag_rings(p2p_mapping(s, r)))]


def multi_start_improve(spec: CombinedSpec, starts: Sequence[tuple[str, IntArray]], until: StopRule, seed: int,
                        stats: dict[str, Any],
                        progress: dict[str, tuple[IntArray, float]] | None = None) -> tuple[IntArray, float]:
    """:func:`improve` from each of ``starts`` (distinct by name) for an equal share of half the
    time, then from the best result for the rest: the best start by value can sit in a poorer
    basin than a structured one (zigzag rings) a little above it.  ``until``: :class:`StopRule`.
    ``progress`` (read and updated): each start's best mapping so far, by name; a start found
    there resumes from it, so passes split by a wait (the host relaxation's) add up to one
    longer search per start instead of restarting each one."""
    model, costs = spec.model, spec.costs
    progress = {} if progress is None else progress
    named = list({name: p for name, p in starts}.items())
    share = 0.5 * max(0.0, until.deadline - time.monotonic()) / len(named)
    tries = moves = 0
    results = []
    for k, (name, p) in enumerate(named):
        sub: dict[str, Any] = {}
        p, value = progress.get(name, (p, combined_objective_s(model, costs, p)))
        found, value = improve(spec, p, value,
                               replace(until, deadline=min(until.deadline, time.monotonic() + share)), seed + k, sub)
        progress[name] = (found, value)
        tries, moves = tries + sub["improve_tries"], moves + sub["improve_moves"]
        results.append((value, k, name, found))
    value, _, name, place = min(results, key=lambda t: (t[0], t[1]))
    place, value = improve(spec, place, value, until, seed, stats)
    progress[name] = (place, value)
    stats["improve_tries"] += tries
    stats["improve_moves"] += moves
    stats["improve_from"] = name
    return place, value


def map_stages_combined(model: PipelineModel, topo: Topology, options: BisectOptions, *, seed: int = 0,
                        improve_share: float = 0.5, starts: Sequence[tuple[str, IntArray]] = ()) -> MappingResult:
    """Alg. 1 (binary search on the target, batched targets) with the combined objective;
    ``improve_share``: of the time left for the large-neighbourhood search before the bisection;
    ``starts``: more named mappings for the starting upper bound."""
    deadline, eps_rel = options.deadline, options.eps_rel
    costs = PipelineCosts.of(model, topo)
    started = time.monotonic()
    witnesses: list[tuple[float, float, tuple[tuple[int, int], ...]]] = []
    bounds = device_bounds(model, costs, topo)
    # the host relaxation runs in a child process while the conflict bound and the starts are found
    running = start_host_relaxation(model, costs, topo, bounds, HOST_SHARE * max(0.0, deadline - started))
    bound, g = assignment_bound_s(model, costs, topo, started + 0.1 * max(0.0, deadline - started), witnesses,
                                  bounds)
    spec = make_combined_spec(model, topo, costs, g, bounds)
    packed = packing_starts(model, topo, costs, witnesses)
    place, t_r, start_name = initial_upper_bound(spec, seed, started + 0.1 * max(0.0, deadline - started),
                                                 [*starts, *packed])
    counters = SearchCounters()
    stats: dict[str, Any] = {"initial_upper_bound_s": t_r, "upper_bound_from": start_name, **counters.as_stats(),
                             "instantiation": "combined"}
    hosted: list[tuple[str, IntArray]] = []
    # searched beside the incumbent (multi_start_improve); each start's progress carries over
    # from the pass during the host relaxation's wait into the pass after it
    searched = [(start_name, place), *zigzag_starts(model), *packed[:1]]
    progress: dict[str, tuple[IntArray, float]] = {}
    if running is not None:
        if t_r - bound > eps_rel * t_r:  # while HiGHS works: a first pass of the multi-start search
            sub: dict[str, Any] = {}
            first = StopRule(running.solve.deadline, bound, eps_rel, stop=running.solve.done)
            place, t_r = multi_start_improve(spec, searched, first, seed + 1000, sub, progress)
            stats.update(host_wait_tries=sub["improve_tries"], host_wait_moves=sub["improve_moves"])
            start_name = sub["improve_from"]
        if t_r - bound <= eps_rel * t_r:  # proven already: the relaxation is not needed
            running.solve.cancel()
        # the layout's settling (half of it at most), the dives and the search inside its hosts
        search_s = HOST_SEARCH_SHARE * max(0.0, deadline - started)
        relax = running.result(time.monotonic() + 0.5 * search_s)
        bound = max(bound, relax.bound_s)
        host_stats: dict[str, Any] = {}
        layout, layout_from = relax, None if relax.host_of is None else "relaxation"
        if relax.host_of is None and t_r - bound > eps_rel * t_r:  # no layout from HiGHS: a filled one
            filled = running.heuristic_layout(time.monotonic() + 0.25 * search_s)
            if filled is not None:
                layout, layout_from = replace(relax, host_of=filled[0], value_s=filled[1]), "filled"
        if layout.value_s < t_r:  # its layout may beat the incumbent
            found = host_start(spec, layout, bound, time.monotonic() + search_s, seed, host_stats)
            if found is not None:  # the incumbent if best, a start of the search if close
                value = combined_objective_s(model, costs, found[1])
                hosted = [found] if value <= 1.25 * t_r else []
                if value < t_r:
                    (start_name, place), t_r = found, value
        stats.update(host_bound_s=relax.bound_s, host_status=relax.status, host_layout=layout_from,
                     host_relaxation_s=relax.value_s if np.isfinite(relax.value_s) else None,
                     host_time_s=relax.seconds, host_search_tries=host_stats.get("improve_tries", 0),
                     host_search_moves=host_stats.get("improve_moves", 0))
    t_l = min(bound, t_r)
    stats.update(initial_lower_bound_s=t_l, bound_s_time=time.monotonic() - started)
    if t_r - t_l > eps_rel * t_r and improve_share > 0:
        until = time.monotonic() + improve_share * max(0.0, deadline - time.monotonic())
        place, t_r = multi_start_improve(spec, [(start_name, place), *searched, *hosted], StopRule(until, t_l, eps_rel),
                                         seed, stats, progress)
    place, t_r, t_l = bisect_targets(search_combined, spec, lambda found: (found, combined_objective_s(model, costs, found)),
                                     Bracket(place, t_r, t_l), options, counters)
    status = "optimal" if t_r - t_l <= eps_rel * t_r else "feasible"
    stats.update(counters.as_stats(), lower_bound_s=t_l)
    return MappingResult(place, t_r, t_l, status, "combined", stats)
