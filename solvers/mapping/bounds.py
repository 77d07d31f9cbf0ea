"""Lower bounds of the mapping objectives: Eq. 10 / Eq. 11 (Alg. 1's initial ``t_l0``) and the
assignment and conflict bounds of the combined objective.

Eq. 10 and Eq. 11 take, for every replica, its compute plus the cheapest communication it could
possibly have on the best device (Proposition 1), computed by sorting:

* Eq. 10 (``c^m``): the ``k`` neighbours of a replica must sit on ``k`` distinct other devices;
  pairing the largest messages with the cheapest channels (rearrangement inequality) and adding
  the ``k`` smallest latencies separately bounds their cost from below;
* Eq. 11 (``c^AR``): a replica has two ring neighbours on distinct devices (one when ``R = 2``),
  so the ring's bottleneck is at most the second-best (best) channel from its device.

For the combined objective (:mod:`solvers.mapping.objective`), :func:`assignment_bound_s` is a
lower bound of the objective over all mappings (hence of the best simulated iteration time of
the partition): replica ``(s, i)`` on device ``d`` forces, for the edges of ``s``, at least
``d``'s cheapest channel, for the other edges at least the ``R``-th smallest cheapest channel
over devices (the ``R`` lanes sit on ``R`` distinct devices), and for the rings the widest
bottleneck a ring of ``R`` devices through ``d`` can have (the component of ``d`` in the
threshold graph must hold ``R`` devices).  ``g(s, d)`` = the objective evaluated with those
bounds; every mapping pays ``max g(s, place[s, i])``, so the bound is the bottleneck assignment
of the ``S R`` replicas to distinct devices minimising that maximum, solved exactly by bisection
over the values with a max-flow.  :func:`conflict_bound_s` adds the conflict between rings and
lanes (a stage's ring and its lanes cannot all use fast channels when the fast components are
too small); the proven bound is the larger of the two.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from solvers.arrays import FloatArray
from solvers.mapping.objective import PipelineCosts, PipelineModel, iteration_bound_s, ring_s
from solvers.mapping.packing import group_sizes, may_pack
from solvers.mapping.stage_graph import Channels, Mode, StageGraph
from solvers.mapping.unionfind import component_threshold_Bps, components_by_beta
from solvers.model.topology import Topology


def _off_diagonal_sorted(matrix: FloatArray, descending: bool = False) -> FloatArray:
    """Each row without its diagonal entry, sorted."""
    n = len(matrix)
    mask = ~np.eye(n, dtype=bool)
    rows = matrix[mask].reshape(n, n - 1)
    rows = np.sort(rows, axis=1)
    return rows[:, ::-1] if descending else rows


def lower_bound_m(sg: StageGraph, topo: Topology) -> float:
    """Eq. 10: ``max_s c_u(s) + min_d`` (cheapest placement of s's neighbours around d)."""
    if topo.n_devices < 2 or len(sg.src) == 0:
        return float(sg.compute_s.max())
    ch = Channels.of(topo)
    inv_sorted = _off_diagonal_sorted(ch.inv_bw_sym)  # [d, j] = j-th cheapest 1/bw from d
    lat_sorted = _off_diagonal_sorted(ch.lat_sym)
    best = 0.0
    for s in range(sg.n_stages):
        msgs = np.sort(np.concatenate([sg.bytes[sg.src == s], sg.bytes[sg.dst == s]]))[::-1]
        k = min(len(msgs), topo.n_devices - 1)
        comm = inv_sorted[:, :k] @ msgs[:k] + lat_sorted[:, :k].sum(axis=1) if k else np.zeros(1)
        best = max(best, float(sg.compute_s[s] + comm.min()))
    return best


def lower_bound_ar(sg: StageGraph, topo: Topology) -> float:
    """Eq. 11: ``max_s c_u(s) + min_d c_AR^min(s, d)``."""
    r = sg.replicas
    if r <= 1 or topo.n_devices < 2:
        return float(sg.compute_s.max())
    bw = topo.bandwidth_Bps.copy()
    np.fill_diagonal(bw, 0.0)
    if r == 2:
        best_bw = np.minimum(bw, bw.T).max(axis=1)  # the only ring neighbour, both directions
    else:
        best_bw = _off_diagonal_sorted(np.maximum(bw, bw.T), descending=True)[:, 1]
    lat = topo.latency_s[~np.eye(topo.n_devices, dtype=bool)]
    lat_floor = 2.0 * (r - 1) * float(lat.min())
    top = float(best_bw.max())
    out = 0.0
    for s in range(sg.n_stages):
        ar = 2.0 * (r - 1) / r * float(sg.param_bytes[s]) / top + lat_floor if sg.param_bytes[s] > 0 else 0.0
        out = max(out, float(sg.compute_s[s]) + ar)
    return out


def lower_bound(sg: StageGraph, topo: Topology, mode: Mode) -> float:
    """The initial lower bound ``t_l0`` of Alg. 1 for an instantiation."""
    return lower_bound_m(sg, topo) if mode == "m" else lower_bound_ar(sg, topo)


@dataclass(frozen=True)
class DeviceBounds:
    """Per device and edge: cheapest outgoing / incoming transfer; per device: widest ring bottleneck.

    ``out_best[j][d]`` = ``min_y`` time of edge ``j``'s lane bytes ``d -> y``, ``in_best[j][d]``
    = ``min_x`` of ``x -> d``; ``edge_floor[j]`` = ``(fwd, grad)`` floors that any mapping pays
    (``R``-th smallest of those over devices); ``ring_bw[d]`` = the largest bottleneck of a ring
    of ``R`` distinct devices through ``d``; ``ring_lat[d]`` its smallest largest-hop latency;
    ``ar_floor[s]`` and ``ar_at[s][d]``: Eq. 9 with those.
    """

    out_best: list[FloatArray]
    in_best: list[FloatArray]
    edge_floor: list[tuple[float, float]]
    ar_floor: list[float]
    ar_at: list[FloatArray]


def device_bounds(model: PipelineModel, costs: PipelineCosts, topo: Topology) -> DeviceBounds:
    """See :class:`DeviceBounds`."""
    n, r = topo.n_devices, model.replicas
    off = ~np.eye(n, dtype=bool)
    out_best, in_best, floors = [], [], []
    for m in costs.fwd:
        big = np.where(off, m, np.inf)
        ob, ib = big.min(axis=1), big.min(axis=0)
        if n < 2:
            ob, ib = np.zeros(n), np.zeros(n)
        out_best.append(ob)
        in_best.append(ib)
        kth = min(r, n) - 1
        fo, fi = float(np.partition(ob, kth)[kth]), float(np.partition(ib, kth)[kth])
        # forward: senders pay out_best, receivers in_best; gradient: the reverse, same pairs
        floors.append((max(fo, fi), max(fo, fi)))
    bw = np.where(off, costs.bandwidth_Bps, 0.0)
    lat = np.where(off, costs.latency_s, np.inf)
    ring_bw = np.minimum(np.minimum(bw.max(axis=1), bw.max(axis=0)), component_threshold_Bps(topo.bandwidth_Bps, r)) if r > 1 \
        else np.full(n, np.inf)
    ring_lat = np.maximum(lat.min(axis=1), lat.min(axis=0)) if n > 1 else np.zeros(n)
    ar_at, ar_floor = [], []
    for s in range(model.n_stages):
        p = float(model.param_bytes[s])
        with np.errstate(divide="ignore"):
            at = np.asarray(ring_s(r, p, ring_bw, ring_lat), dtype=np.float64) * np.ones(n)
        ar_at.append(at)
        kth = min(r, n) - 1
        ar_floor.append(float(np.partition(at, kth)[kth]) if r > 1 else 0.0)
    return DeviceBounds(out_best, in_best, floors, ar_floor, ar_at)


def replica_bounds(model: PipelineModel, bounds: DeviceBounds) -> FloatArray:
    """``g[s, d]``: the objective's lower bound when a replica of stage ``s`` sits on device ``d``."""
    rows = []
    cf0 = [f for f, _ in bounds.edge_floor]
    cb0 = [g for _, g in bounds.edge_floor]
    for s in range(model.n_stages):
        cf: list[Any] = list(cf0)
        cb: list[Any] = list(cb0)
        for j, (a, c) in enumerate(zip(model.src.tolist(), model.dst.tolist(), strict=True)):
            if a == s:  # s sends forward (out of d) and receives gradients (into d)
                cf[j] = np.maximum(cf0[j], bounds.out_best[j])
                cb[j] = np.maximum(cb0[j], bounds.in_best[j])
            elif c == s:
                cf[j] = np.maximum(cf0[j], bounds.in_best[j])
                cb[j] = np.maximum(cb0[j], bounds.out_best[j])
        ar: list[Any] = list(bounds.ar_floor)
        ar[s] = np.maximum(bounds.ar_floor[s], bounds.ar_at[s])
        n = len(bounds.ar_at[s])
        rows.append(np.asarray(iteration_bound_s(model, cf, cb, ar), dtype=np.float64) * np.ones(n))
    return np.array(rows)


def bottleneck_assignment_s(cost: FloatArray, replicas: int) -> float:
    """``min over injective maps of the S R replicas to devices of max cost[s, place]`` (exact).

    Bisection over the distinct values; feasibility = a flow of ``S R`` from the stages
    (capacity ``R`` each) to the devices (capacity 1) over the pairs with cost <= the threshold.
    """
    s_, n = cost.shape
    if s_ * replicas > n:
        return float("inf")
    values = np.unique(cost)
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return float("inf")

    # flow network: source 0 -> stage 1 + s (capacity R) -> device 1 + S + d (1) -> sink
    sink = 1 + s_ + n
    rows = np.concatenate([np.zeros(s_, dtype=np.int64), 1 + s_ + np.arange(n)])
    cols = np.concatenate([1 + np.arange(s_), np.full(n, sink)])
    caps = np.concatenate([np.full(s_, replicas), np.ones(n, dtype=np.int64)])
    pair_s, pair_d = np.divmod(np.arange(s_ * n), n)

    def feasible(t: float) -> bool:
        ok = (cost <= t).reshape(-1)
        if (ok.reshape(s_, n).sum(axis=1) < replicas).any():
            return False
        graph = csr_matrix((np.concatenate([caps, np.ones(int(ok.sum()), dtype=np.int64)]).astype(np.int32),
                            (np.concatenate([rows, 1 + pair_s[ok]]), np.concatenate([cols, 1 + s_ + pair_d[ok]]))),
                           shape=(sink + 1, sink + 1))
        return bool(maximum_flow(graph, 0, sink).flow_value == s_ * replicas)

    lo, hi = 0, len(values) - 1
    if not feasible(float(values[hi])):
        return float("inf")
    while lo < hi:
        mid = (lo + hi) // 2
        if feasible(float(values[mid])):
            hi = mid
        else:
            lo = mid + 1
    return float(values[lo])


def conflict_bound_s(model: PipelineModel, costs: PipelineCosts, topo: Topology, bounds: DeviceBounds,
                     deadline: float = float("inf"), node_limit: int = 4000,
                     witnesses: list[tuple[float, float, tuple[tuple[int, int], ...]]] | None = None) -> float:
    """A bound from the conflict between rings and lanes (not in the paper).

    Elements: the ring of each stage and the lanes of each stage edge.  For a bandwidth ``beta``,
    an element is *fast* when every hop of the ring (every lane, in one direction at least) has
    a channel wider than ``beta``; fast elements join their replicas' devices into one component
    of {pairs wider than ``beta``}, so the groups of replicas joined by a mapping's fast elements
    pack into those components (necessary condition :func:`~solvers.mapping.packing.may_pack`; it holds for every subset
    of a mapping's fast elements too, whose groups are finer).  An element that is not fast
    costs at least its *slow* term: Eq. 9 with bottleneck ``beta``, or both transfers of a lane
    at ``lat + bytes / beta``.  So every mapping pays at least ``min`` over the element sets
    ``F`` that pack of the objective with the elements outside ``F`` at their slow terms and
    every other term at its floor.  That minimum is found by best-first branch and bound:
    elements in decreasing order of their slow value alone, each branched fast (when the fast
    set still packs) or slow, a node's value = the objective with its slow elements slow and the
    undecided ones at their floors (a lower bound of its subtree); a node whose undecided
    elements can all be fast together is a leaf.  The value of the node popped when the search
    stops (a leaf, or ``node_limit`` / ``deadline``) bounds every mapping (best-first order).
    Maximum over the ``beta`` of the spanning merges, the most promising first (largest
    objective with every element slow), after a cheap first pass over every ``beta`` (the first
    prefix of the elements by slow value that does not pack has a slow element); past
    ``deadline`` the ``beta`` not yet tried are skipped (the bound stays valid).  ``witnesses``
    receives ``(value, beta, fast elements)`` of every leaf reached (at a stop: the popped node
    with the undecided elements made fast while they pack): element sets that may pack, from
    which :func:`~solvers.mapping.packing.packing_mapping` builds mappings.
    """
    s_, r = model.n_stages, model.replicas
    n = topo.n_devices
    if s_ * r <= 1 or n < 2:
        return 0.0
    cf0 = [f for f, _ in bounds.edge_floor]
    cb0 = [b for _, b in bounds.edge_floor]
    lat = costs.latency_s[~np.eye(n, dtype=bool)]
    lat_min = float(lat.min()) if lat.size else 0.0
    levels = [(beta, comps) for beta, comps in components_by_beta(topo) if 0 < beta < np.inf]
    if not levels:
        return 0.0
    betas = np.array([beta for beta, _ in levels])
    # slow terms of every element at every beta
    elements: list[tuple[int, int]] = []  # (kind 0 ring / 1 edge, index)
    slow_terms: list[FloatArray] = []
    if r > 1:
        for s in range(s_):
            if model.param_bytes[s] > 0:
                elements.append((0, s))
                slow_terms.append(np.asarray(ring_s(r, float(model.param_bytes[s]), betas, lat_min), dtype=np.float64)
                                  * np.ones(len(betas)))
    for j in range(model.n_edges):
        m = float(model.lane_bytes[j])
        elements.append((1, j))
        slow_terms.append(lat_min + m / betas if m > 0 else np.full(len(betas), lat_min))
    if not elements:  # one replica and no stage edge: nothing can conflict
        return 0.0
    terms = np.array(slow_terms)

    def value(slow: Sequence[int], col: Any) -> Any:
        """The objective with the elements ``slow`` at their slow terms (of column(s) ``col``)."""
        cf: list[Any] = list(cf0)
        cb: list[Any] = list(cb0)
        ar: list[Any] = list(bounds.ar_floor)
        for e in slow:
            kind, idx = elements[e]
            if kind == 0:
                ar[idx] = np.maximum(ar[idx], terms[e, col])
            else:
                cf[idx] = np.maximum(cf[idx], terms[e, col])
                cb[idx] = np.maximum(cb[idx], terms[e, col])
        return iteration_bound_s(model, cf, cb, ar)

    every = slice(None)
    single = np.array([np.asarray(value([e], every), dtype=np.float64) * np.ones(len(betas))
                       for e in range(len(elements))])
    ceiling = np.asarray(value(range(len(elements)), every), dtype=np.float64) * np.ones(len(betas))
    cache: dict[Any, bool] = {}

    def packs(fast: Sequence[int], col: int) -> bool:
        return may_pack(group_sizes(model, [elements[e] for e in fast]), levels[col][1], cache)

    # first pass, every beta (cheap): the first prefix of the elements by slow value that does not
    # pack has a slow element, so the objective is at least the smallest slow value in it
    best = 0.0
    for col in np.argsort(-single.max(axis=0), kind="stable"):
        if single[:, col].max() <= best or time.monotonic() > deadline:
            break
        fast: list[int] = []
        for e in np.argsort(-single[:, col], kind="stable"):
            if single[e, col] <= best:
                break
            fast.append(int(e))
            if not packs(fast, int(col)):
                best = float(single[e, col])
                break
    # second pass, best-first over the sets of slow elements (docstring)
    for col in np.argsort(-ceiling, kind="stable"):
        if ceiling[col] <= best or time.monotonic() > deadline:
            break
        order = [int(e) for e in np.argsort(-single[:, col], kind="stable")]
        # heap entries: (value, tie, depth, fast, slow)
        heap: list[tuple[float, int, int, tuple[int, ...], tuple[int, ...]]] = [(float(value((), col)), 0, 0, (), ())]
        pushed = nodes = 0
        result = best
        while heap:
            v, _, k, fast_set, slow = heapq.heappop(heap)
            nodes += 1
            if nodes > node_limit or time.monotonic() > deadline:
                result = v
                if witnesses is not None:  # a set that may pack: the undecided elements fast while they do
                    for e in order[k:]:
                        if packs((*fast_set, e), int(col)):
                            fast_set = (*fast_set, e)
                    witnesses.append((v, float(betas[col]), tuple(elements[e] for e in fast_set)))
                break
            if packs(fast_set + tuple(order[k:]), int(col)):
                result = v
                if witnesses is not None:
                    witnesses.append((v, float(betas[col]), tuple(elements[e] for e in fast_set + tuple(order[k:]))))
                break
            e = order[k]
            if packs((*fast_set, e), int(col)):
                pushed += 1
                heapq.heappush(heap, (v, pushed, k + 1, (*fast_set, e), slow))
            pushed += 1
            heapq.heappush(heap, (float(value((*slow, e), col)), pushed, k + 1, fast_set, (*slow, e)))
        best = max(best, result)
    return best


def assignment_bound_s(model: PipelineModel, costs: PipelineCosts, topo: Topology,
                       deadline: float = float("inf"),
                       witnesses: list[tuple[float, float, tuple[tuple[int, int], ...]]] | None = None,
                       bounds: DeviceBounds | None = None) -> tuple[float, FloatArray]:
    """The proven lower bound of the combined objective over all mappings, and ``g[s, d]``: the
    larger of the bottleneck assignment and the ring/lane conflict bound (``deadline``,
    ``witnesses``: see :func:`conflict_bound_s`; ``bounds``: :func:`device_bounds` when the
    caller has them)."""
    bounds = device_bounds(model, costs, topo) if bounds is None else bounds
    g = replica_bounds(model, bounds)
    conflict = conflict_bound_s(model, costs, topo, bounds, deadline, witnesses=witnesses)
    return max(bottleneck_assignment_s(g, model.replicas), conflict), g
