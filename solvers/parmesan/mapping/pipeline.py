"""The combined mapping objective: the simulator's critical paths of one iteration (``c^{m+AR}``).

Parmesan's two instantiations each see half of what the simulator charges: ``c^m`` (Eq. 6, 8)
the stage-to-stage transfers, ``c^AR`` (Eq. 7, 9) the all-reduce ring.  The stage-level engine
(:mod:`solvers.simulator.stage`) runs, per stage ``s`` and micro-batch ``m``, ``F(s, m)`` (``f_s``)
and ``B(s, m)`` (``b_s``, + ``f_s`` with recomputation) in the schedule's order; a message of
lane ``i`` uses the directed channel ``place[a, i] -> place[b, i]`` (one transfer at a time)
for ``lat + bytes / R / bw``; after its last backward a stage runs its ring all-reduce.  For a
mapping, let ``Cf[e]`` / ``Cb[e]`` be the slowest lane's forward / gradient transfer of stage edge
``e = (a, b)`` and ``AR[s]`` the ring all-reduce (Eq. 9).  Every task waits for its inputs, so

* ``E[s]`` (start of ``F(s, 0)``) >= ``E[a] + f_a + Cf[e]`` for every sender ``a``;
* ``G[s]`` (start of ``B(s, 0)``) >= ``E[s] + k_s f_s`` (``k_s`` forwards come first: ``min(S - s, MB)``
  in 1F1B, ``MB`` in GPipe), >= ``G[b] + b_b + Cb[e]`` for every reader ``b``, and >=
  ``E[a] + f_a + k_s Cf[e] + f_s`` (the lane channel carries ``k_s`` messages one after another);
* ``L[s]`` (end of ``B(s, MB-1)``, the stage's last task) >= ``E[s] + MB (f_s + b_s)``,
  >= ``G[s] + MB b_s + (MB - k_s) f_s``, >= ``L[b] + Cb[e] + b_s``, >= ``G[b] + b_b + MB Cb[e] + b_s``
  and >= ``E[a] + f_a + MB Cf[e] + f_s + b_s``;
* the iteration ends after ``L[s] + AR[s]`` for every stage.

:func:`iteration_bound_s` evaluates these recurrences (their longest path), so the combined
objective of a mapping is a **proven lower bound of its simulated iteration time**; it equals
it when no transfer waits behind another one beyond the counted channel terms and no task
waits for more than the counted chain (it misses the queueing of 1F1B's steady state).  Stage
compute is each op's fastest time over the devices divided by ``R`` — the simulator's time on
homogeneous devices, a lower bound otherwise.  The objective is non-decreasing in every
``Cf``, ``Cb``, ``AR``, so a partial mapping evaluated with lower bounds for the transfers not
yet known is a lower bound of every completion (exact pruning for Alg. 2).

:func:`assignment_bound_s` is a lower bound of the objective over all mappings (hence of the
best simulated iteration time of the partition): replica ``(s, i)`` on device ``d`` forces, for
the edges of ``s``, at least ``d``'s cheapest channel, for the other edges at least the
``R``-th smallest cheapest channel over devices (the ``R`` lanes sit on ``R`` distinct devices),
and for the rings the widest bottleneck a ring of ``R`` devices through ``d`` can have (the
component of ``d`` in the threshold graph must hold ``R`` devices).  ``g(s, d)`` = the objective
evaluated with those bounds; every mapping pays ``max g(s, place[s, i])``, so the bound is the
bottleneck assignment of the ``S R`` replicas to distinct devices minimising that maximum,
solved exactly by bisection over the values with a max-flow.  :func:`conflict_bound_s` adds
the conflict between rings and lanes (a stage's ring and its lanes cannot all use fast channels
when the fast components are too small); the proven bound is the larger of the two.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow, minimum_spanning_tree

from solvers.arrays import FloatArray, IntArray
from solvers.cost.compute import ComputeModel
from solvers.cost.traffic import group_traffic_bytes
from solvers.model.problem import Problem
from solvers.model.topology import Topology


@dataclass(frozen=True)
class PipelineModel:
    """Placement-independent data of the recurrences: ``S`` stages, ``R`` replicas, ``MB`` micro-batches.

    ``f_s[s]`` / ``b_s[s]``: forward / backward (+ recomputed forward) time of a micro-batch;
    edge ``j``: stage ``src[j] -> dst[j]``, ``lane_bytes[j]`` per lane and micro-batch (zero-byte
    edges are dependencies of cost 0); ``k[s]``: forwards before ``B(s, 0)``.
    """

    n_stages: int
    replicas: int
    micro_batches: int
    f_s: FloatArray
    b_s: FloatArray
    src: IntArray
    dst: IntArray
    lane_bytes: FloatArray
    param_bytes: FloatArray
    k: IntArray

    @property
    def n_edges(self) -> int:
        return len(self.src)

    @cached_property
    def recurrence_lists(self) -> tuple[list[float], list[float], list[int], list[int], list[int],
                                        list[list[int]], list[list[int]]]:
        """``f_s``, ``b_s``, ``k``, ``src``, ``dst`` as lists, and each stage's edges in and out:
        what :func:`iteration_bound_s` reads, made once (it runs once per search node)."""
        src, dst = self.src.tolist(), self.dst.tolist()
        into: list[list[int]] = [[] for _ in range(self.n_stages)]
        out: list[list[int]] = [[] for _ in range(self.n_stages)]
        for j, (a, c) in enumerate(zip(src, dst, strict=True)):
            into[c].append(j)
            out[a].append(j)
        return self.f_s.tolist(), self.b_s.tolist(), self.k.tolist(), src, dst, into, out


def pipeline_model(problem: Problem, stage_of: IntArray, n_stages: int, replicas: int,
                   micro_batches: int) -> PipelineModel:
    """The model of a partition (op -> stage) as the stage-level engine runs it."""
    g = problem.graph
    fwd, bwd = ComputeModel(g, problem.topology).fastest_fwd_bwd_s()
    f = np.bincount(stage_of, weights=fwd, minlength=n_stages).astype(np.float64) / replicas
    b = np.bincount(stage_of, weights=bwd, minlength=n_stages).astype(np.float64) / replicas
    if problem.settings.recompute:
        b = b + f
    traffic = sorted(group_traffic_bytes(g, stage_of).items())
    params = np.bincount(stage_of, weights=g.param_bytes, minlength=n_stages).astype(np.float64)
    mb = micro_batches
    if problem.settings.schedule == "gpipe":
        k = np.full(n_stages, mb, dtype=np.int64)
    else:
        k = np.minimum(n_stages - np.arange(n_stages), mb).astype(np.int64)
    return PipelineModel(n_stages, replicas, mb, f, b, np.array([a for (a, _), _ in traffic], dtype=np.int64),
                         np.array([b_ for (_, b_), _ in traffic], dtype=np.int64),
                         np.array([size / replicas for _, size in traffic], dtype=np.float64), params, k)


def iteration_bound_s(model: PipelineModel, cf: list[Any], cb: list[Any], ar: list[Any]) -> Any:
    """The longest path of the recurrences (module doc) for edge costs ``cf``/``cb`` and rings ``ar``.

    Entries may be floats or numpy arrays of one common shape (evaluated element-wise).
    """
    s_, mb = model.n_stages, model.micro_batches
    f, b, k, src, dst, into, out = model.recurrence_lists
    e: list[Any] = [0.0] * s_
    for s in range(s_):
        for j in into[s]:
            e[s] = np.maximum(e[s], e[src[j]] + f[src[j]] + cf[j])
    g_: list[Any] = [0.0] * s_
    last: list[Any] = [0.0] * s_
    total: Any = 0.0
    for s in reversed(range(s_)):
        g_s = e[s] + k[s] * f[s]
        for j in into[s]:
            g_s = np.maximum(g_s, e[src[j]] + f[src[j]] + k[s] * cf[j] + f[s])
        for j in out[s]:
            g_s = np.maximum(g_s, g_[dst[j]] + b[dst[j]] + cb[j])
        g_[s] = g_s
        l_s = np.maximum(e[s] + mb * (f[s] + b[s]), g_s + mb * b[s] + (mb - k[s]) * f[s])
        for j in into[s]:
            l_s = np.maximum(l_s, e[src[j]] + f[src[j]] + mb * cf[j] + f[s] + b[s])
        for j in out[s]:
            c = dst[j]
            l_s = np.maximum(l_s, np.maximum(last[c] + cb[j], g_[c] + b[c] + mb * cb[j]) + b[s])
        last[s] = l_s
        total = np.maximum(total, l_s + ar[s])
    return total


def transfer_matrix_s(topo: Topology, size_bytes: float) -> FloatArray:
    """``[x, y]`` = postal time of ``size_bytes`` from ``x`` to ``y`` (:func:`solvers.cost.comm.transfer_s`)."""
    n = topo.n_devices
    if size_bytes <= 0:
        return np.zeros((n, n))
    with np.errstate(divide="ignore"):
        out = topo.latency_s + size_bytes / topo.bandwidth_Bps
    np.fill_diagonal(out, 0.0)
    return np.asarray(out, dtype=np.float64)


def ring_s(replicas: int, param_bytes: float, bottleneck_Bps: Any, latency_s: Any) -> Any:
    """Eq. 9 for a ring of ``replicas`` with the given bottleneck bandwidth and largest hop latency."""
    if replicas <= 1 or param_bytes <= 0:
        return 0.0
    return 2.0 * (replicas - 1) / replicas * param_bytes / bottleneck_Bps + 2.0 * (replicas - 1) * latency_s


@dataclass(frozen=True)
class PipelineCosts:
    """Transfer matrices per edge (forward ``x -> y`` and gradient ``y -> x``), bandwidths, latencies."""

    fwd: list[FloatArray]
    bandwidth_Bps: FloatArray
    latency_s: FloatArray

    @classmethod
    def of(cls, model: PipelineModel, topo: Topology) -> PipelineCosts:
        lat = topo.latency_s.copy()
        np.fill_diagonal(lat, 0.0)
        return cls([transfer_matrix_s(topo, float(m)) for m in model.lane_bytes.tolist()],
                   topo.bandwidth_Bps, lat)


def edge_costs(model: PipelineModel, costs: PipelineCosts, place: IntArray) -> tuple[list[float], list[float], list[float]]:
    """``Cf``, ``Cb``, ``AR`` of a complete mapping ``place[s, i]``."""
    cf, cb = [], []
    for j, (a, c) in enumerate(zip(model.src.tolist(), model.dst.tolist(), strict=True)):
        m = costs.fwd[j]
        cf.append(float(m[place[a], place[c]].max()))
        cb.append(float(m[place[c], place[a]].max()))
    ar = []
    r = model.replicas
    for s in range(model.n_stages):
        ring = place[s]
        nxt = np.roll(ring, -1)
        bw = float(costs.bandwidth_Bps[ring, nxt].min()) if r > 1 else np.inf
        lat = float(costs.latency_s[ring, nxt].max()) if r > 1 else 0.0
        ar.append(float(ring_s(r, float(model.param_bytes[s]), bw, lat)))
    return cf, cb, ar


def combined_objective_s(model: PipelineModel, costs: PipelineCosts, place: IntArray) -> float:
    """The combined objective of a complete mapping (a lower bound of its simulated iteration)."""
    return float(iteration_bound_s(model, *edge_costs(model, costs, place)))


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


def _spanning_merges(bandwidth_Bps: FloatArray) -> list[tuple[int, int, float]]:
    """Kruskal's merges of the maximum spanning forest on ``max(bw[a, b], bw[b, a])``, widest first:
    the components of every threshold graph {pairs with bandwidth >= beta} are unions along them."""
    bw = np.maximum(bandwidth_Bps, bandwidth_Bps.T).astype(np.float64)
    np.fill_diagonal(bw, 0.0)
    # weights decreasing in bandwidth; an infinite channel weighs least
    with np.errstate(divide="ignore"):
        weight = np.where(np.isinf(bw), 1e-300, np.where(bw > 0, 1.0 / np.where(bw > 0, bw, 1.0), 0.0))
    tree = minimum_spanning_tree(csr_matrix(weight)).tocoo()
    pairs = sorted(zip(tree.row.tolist(), tree.col.tolist(), strict=True), key=lambda p: -bw[p[0], p[1]])
    return [(x, y, float(bw[x, y])) for x, y in pairs]


def component_threshold_Bps(bandwidth_Bps: FloatArray, size: int) -> FloatArray:
    """Per device: the largest ``beta`` such that its component in {pairs with bandwidth >= beta}
    (either direction) holds at least ``size`` devices (``0`` if never)."""
    n = len(bandwidth_Bps)
    out = np.zeros(n)
    if size > n:
        return out
    groups = _UnionFind(n)
    done = np.zeros(n, dtype=bool)
    for x, y, beta in _spanning_merges(bandwidth_Bps):
        if groups.root(x) != groups.root(y) and groups.join(x, y) >= size:
            fresh = [d for d in groups.members[groups.root(x)] if not done[d]]
            out[fresh] = beta
            done[fresh] = True
    return out


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


class _UnionFind:
    """Disjoint sets with their members (path halving, union by size)."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self.members: dict[int, list[int]] = {x: [x] for x in range(n)}  # root -> its elements

    def root(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def join(self, x: int, y: int) -> int:
        """Merge the sets of ``x`` and ``y``; the size of the merged set."""
        rx, ry = self.root(x), self.root(y)
        if rx != ry:
            if len(self.members[rx]) < len(self.members[ry]):
                rx, ry = ry, rx
            self.parent[ry] = rx
            self.members[rx].extend(self.members.pop(ry))
        return len(self.members[rx])


def _components_by_beta(topo: Topology) -> list[tuple[float, IntArray]]:
    """``(beta, sizes)`` pairs, ``beta`` descending over the spanning merges' bandwidths: ``sizes`` =
    the component sizes of {pairs with bandwidth > beta} (either direction)."""
    groups = _UnionFind(topo.n_devices)
    merges = _spanning_merges(topo.bandwidth_Bps)
    out: list[tuple[float, IntArray]] = []
    k = 0
    while k < len(merges):
        beta = merges[k][2]
        out.append((beta, np.array([len(m) for m in groups.members.values()], dtype=np.int64)))
        while k < len(merges) and merges[k][2] == beta:
            groups.join(merges[k][0], merges[k][1])
            k += 1
    return out


def packing_milp(sizes: Sequence[int], counts: Sequence[int], capacities: Sequence[int]) -> Any:
    """HiGHS (``scipy.optimize.milp``, 1 s) on the packing of ``counts[t]`` groups of
    ``sizes[t]`` devices into components of ``capacities[c]`` devices: ``x[c, t]`` groups of size
    ``t`` in component ``c`` (row-major), ``sum_t sizes[t] x[c, t] <= capacities[c]``,
    ``sum_c x[c, t] = counts[t]``.  Returns scipy's result (``status`` 2: proven infeasible)."""
    k, m = len(capacities), len(sizes)
    fill = np.kron(np.eye(k), np.array(sizes, dtype=np.float64))  # row c: sum_t t x[c, t]
    count = np.kron(np.ones(k), np.eye(m))  # row t: sum_c x[c, t]
    need = np.array(counts, dtype=np.float64)
    return milp(np.zeros(k * m), integrality=np.ones(k * m), bounds=Bounds(0, np.inf),
                constraints=[LinearConstraint(fill, 0, np.array(capacities, dtype=np.float64)),
                             LinearConstraint(count, need, need)],
                options={"time_limit": 1.0})


def _packs(group_count: dict[int, int], components: IntArray, cache: dict[Any, bool] | None = None) -> bool:
    """Whether the groups (``{size: count}``) may pack into the components (sizes): ``False`` only
    when proven impossible.  First a counting condition: for every size ``t``, the groups of ``t``
    or more devices number at most ``sum floor(c / t)`` (each takes ``t`` devices of one
    component); with two or more sizes above 1, then the integer program ``sum_t t x[c, t] <= c``,
    ``sum_c x[c, t] = count_t`` (HiGHS, memoised in ``cache``; a limit hit counts as packable)."""
    sizes = sorted((t for t in group_count if t > 1), reverse=True)
    at_least = 0
    for t in sizes:
        at_least += group_count[t]
        if at_least > int((components // t).sum()):
            return False
    if len(sizes) < 2:
        return True
    bins = np.sort(components[components >= sizes[-1]])[::-1]
    key = (tuple((t, group_count[t]) for t in sizes), tuple(bins.tolist()))
    if cache is not None and key in cache:
        return bool(cache[key])
    result = packing_milp(sizes, [group_count[t] for t in sizes], bins.tolist())
    ok = bool(result.status != 2)  # 2: proven infeasible
    if cache is not None:
        cache[key] = ok
    return ok


def fast_components(model: PipelineModel, fast: Sequence[tuple[int, int]]) -> list[tuple[list[int], bool]]:
    """The stages joined by the fast elements (``(0, s)`` the ring of stage ``s``, ``(1, j)`` the
    lanes of edge ``j``): each component's stages (ascending; components by their first stage)
    and whether one of its rings is fast."""
    stages = _UnionFind(model.n_stages)
    for kind, idx in fast:
        if kind == 1:
            stages.join(int(model.src[idx]), int(model.dst[idx]))
    ringed = {stages.root(idx) for kind, idx in fast if kind == 0}
    return sorted(((sorted(m), x in ringed) for x, m in stages.members.items()), key=lambda c: c[0][0])


def _group_sizes(model: PipelineModel, fast: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Sizes of the groups of replicas joined by the fast elements (:func:`fast_components`), as
    ``{size: count}``: a component with a fast ring is one group of ``|C| R`` replicas, otherwise
    each lane's replicas in ``C`` are one group of ``|C|``."""
    r = model.replicas
    out: dict[int, int] = {}
    for members, ringed in fast_components(model, fast):
        if ringed:
            out[len(members) * r] = out.get(len(members) * r, 0) + 1
        else:
            out[len(members)] = out.get(len(members), 0) + r
    return out


def conflict_bound_s(model: PipelineModel, costs: PipelineCosts, topo: Topology, bounds: DeviceBounds,
                     deadline: float = float("inf"), node_limit: int = 4000,
                     witnesses: list[tuple[float, float, tuple[tuple[int, int], ...]]] | None = None) -> float:
    """A bound from the conflict between rings and lanes (not in the paper).

    Elements: the ring of each stage and the lanes of each stage edge.  For a bandwidth ``beta``,
    an element is *fast* when every hop of the ring (every lane, in one direction at least) has
    a channel wider than ``beta``; fast elements join their replicas' devices into one component
    of {pairs wider than ``beta``}, so the groups of replicas joined by a mapping's fast elements
    pack into those components (necessary condition :func:`_packs`; it holds for every subset
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
    which :func:`~solvers.parmesan.mapping.combined.packing_mapping` builds mappings.
    """
    s_, r = model.n_stages, model.replicas
    n = topo.n_devices
    if s_ * r <= 1 or n < 2:
        return 0.0
    cf0 = [f for f, _ in bounds.edge_floor]
    cb0 = [b for _, b in bounds.edge_floor]
    lat = costs.latency_s[~np.eye(n, dtype=bool)]
    lat_min = float(lat.min()) if lat.size else 0.0
    levels = [(beta, comps) for beta, comps in _components_by_beta(topo) if 0 < beta < np.inf]
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
        return _packs(_group_sizes(model, [elements[e] for e in fast]), levels[col][1], cache)

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
