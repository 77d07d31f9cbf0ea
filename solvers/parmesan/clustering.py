"""Operator clustering to K hyper-operators (Parmesan §IV-B, Eq. 4).

Greedy bottom-up merging: among adjacent pairs ``(u, v)`` whose union is convex (Definition 4)
and whose parameters fit one device (the memory constraint), merge the pair of smallest
``cost(u, v) = c_u(u) + c_u(v) - alpha * c_m(u, v)`` until ``K`` hyper-operators remain.

Implementation: a lazy heap of candidate edges; a pair is checked when popped.  Convexity of
an edge ``u -> v`` is "no other path from ``u`` to ``v``": a depth-first search from ``u``'s other
successors, pruned by a dynamic topological order (a node ranked after ``v`` cannot reach it).
After a merge the order is repaired locally (the descendants of ``u`` found by that search
move behind the merged node), so the ranks stay valid.  A search that visits more than
``VISIT_LIMIT`` nodes counts the pair as non-convex (conservative: it never creates a cycle).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.cost.traffic import group_traffic_bytes
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.problem import Problem
from solvers.partition.costs import ReferenceCosts

VISIT_LIMIT = 4096


@dataclass(frozen=True)
class ClusterGraph:
    """The hyper-operator DAG handed to the DP; clusters are numbered in a topological order.

    ``cluster_of[v]`` = cluster of op ``v``; per cluster ``c``: ``work_s[c]`` (sum of c_u),
    ``param_bytes[c]``, ``act_bytes[c]``, ``working_bytes[c]`` (largest single-op
    max(mem_fwd, mem_bwd)); per hyper-edge ``j``: ``src[j] -> dst[j]`` carrying ``bytes[j]``
    (tensors counted once per producer op and consumer cluster) costing ``comm_s[j]``.
    """

    cluster_of: IntArray
    work_s: FloatArray
    param_bytes: FloatArray
    act_bytes: FloatArray
    working_bytes: FloatArray
    src: IntArray
    dst: IntArray
    bytes: FloatArray
    comm_s: FloatArray
    stage_pin: tuple[int | None, ...] = field(default=())

    @property
    def k(self) -> int:
        return len(self.work_s)

    def members(self) -> list[IntArray]:
        """Op positions of every cluster."""
        order = np.argsort(self.cluster_of, kind="stable")
        bounds = np.searchsorted(self.cluster_of[order], np.arange(self.k + 1))
        return [order[bounds[c]:bounds[c + 1]] for c in range(self.k)]


def coarsen_further(problem: Problem, costs: ReferenceCosts, cg: ClusterGraph, k: int, alpha: float,
                    param_cap_bytes: float, deadline: float = float("inf")) -> tuple[ClusterGraph, dict[str, int]]:
    """Eq. 4 clustering continued on the hyper-operator graph itself (cheap: K nodes, not |V|)."""
    nodes = [Node(str(c), "cluster", float(cg.work_s[c]), 0.0, float(cg.param_bytes[c]), float(cg.act_bytes[c]),
                  float(cg.working_bytes[c]), 0.0) for c in range(cg.k)]
    edges = [Edge(str(a), str(b), float(m)) for a, b, m in zip(cg.src.tolist(), cg.dst.tolist(), cg.bytes.tolist(),
                                                                strict=True)]
    inner = Problem(OpGraph.build("clusters", nodes, edges), problem.topology, "throughput",
                    problem.settings.model_copy(update={"pinned": {}}))
    inner_costs = ReferenceCosts(cg.work_s, cg.comm_s, costs.bandwidth_Bps, costs.latency_s)
    pins = {c: p for c, p in enumerate(cg.stage_pin) if p is not None}
    coarse, stats = cluster_ops(inner, inner_costs, k, alpha, param_cap_bytes, pins, deadline)
    labels = coarse.cluster_of[cg.cluster_of]
    op_pins = {v: p for v in range(problem.graph.n_ops) if (p := cg.stage_pin[int(cg.cluster_of[v])]) is not None}
    return build_cluster_graph(problem, costs, labels, op_pins), stats


def build_cluster_graph(problem: Problem, costs: ReferenceCosts, labels: IntArray,
                        stage_pins: Mapping[int, int] | None = None) -> ClusterGraph:
    """The hyper-operator graph of an op -> label assignment (labels need not be compact).

    Clusters are renumbered in a topological order of the quotient graph (which must be
    acyclic).  ``stage_pins`` maps op positions to pinned stage indices.
    """
    g = problem.graph
    _, compact = np.unique(labels, return_inverse=True)
    compact = compact.astype(np.int64)
    k = int(compact.max()) + 1
    traffic = group_traffic_bytes(g, compact)
    # topological renumbering of the quotient graph (Kahn, ties by smallest op topo position)
    first_pos = np.full(k, g.n_ops, dtype=np.int64)
    np.minimum.at(first_pos, compact, g.topo_position)
    succ: list[list[int]] = [[] for _ in range(k)]
    indeg = np.zeros(k, dtype=np.int64)
    for a, b in traffic:
        succ[a].append(b)
        indeg[b] += 1
    ready = [(int(first_pos[c]), c) for c in range(k) if indeg[c] == 0]
    heapq.heapify(ready)
    rank = np.full(k, -1, dtype=np.int64)
    n = 0
    while ready:
        _, c = heapq.heappop(ready)
        rank[c] = n
        n += 1
        for b in succ[c]:
            indeg[b] -= 1
            if indeg[b] == 0:
                heapq.heappush(ready, (int(first_pos[b]), b))
    if n != k:
        raise ValueError("the clustering is not acyclic")
    cluster_of = rank[compact]
    working = np.maximum(g.mem_fwd_bytes, g.mem_bwd_bytes)
    work_s = np.bincount(cluster_of, weights=costs.work_s, minlength=k).astype(np.float64)
    params = np.bincount(cluster_of, weights=g.param_bytes, minlength=k).astype(np.float64)
    acts = np.bincount(cluster_of, weights=g.act_bytes, minlength=k).astype(np.float64)
    wk = np.zeros(k)
    np.maximum.at(wk, cluster_of, working)
    keys = sorted((int(rank[a]), int(rank[b]), s) for (a, b), s in traffic.items())
    src = np.array([a for a, _, _ in keys], dtype=np.int64)
    dst = np.array([b for _, b, _ in keys], dtype=np.int64)
    size = np.array([s for _, _, s in keys], dtype=np.float64)
    pins: list[int | None] = [None] * k
    for v, s in (stage_pins or {}).items():
        pins[int(cluster_of[v])] = s
    return ClusterGraph(cluster_of, work_s, params, acts, wk, src, dst, size, costs.comm_s(size), tuple(pins))


@dataclass
class _State:
    """Mutable clustering state: adjacency with bytes, a dynamic topological order."""

    succ: list[dict[int, float]]
    pred: list[dict[int, float]]
    work: list[float]
    params: list[float]
    pin: list[int | None]
    order: list[int]
    pos: list[int]
    version: list[int]


def _descendants_before(st: _State, u: int, v: int) -> set[int] | None:
    """Descendants of ``u`` ranked before ``v`` (not via the edge u->v); ``None`` if ``v`` is reachable
    another way (non-convex) or the search exceeded the visit limit."""
    limit = st.pos[v]
    seen: set[int] = set()
    stack = [x for x in st.succ[u] if x != v]
    while stack:
        x = stack.pop()
        if x == v:
            return None
        if x in seen or st.pos[x] > limit:
            continue
        seen.add(x)
        if len(seen) > VISIT_LIMIT:
            return None
        stack.extend(st.succ[x])
    return seen


def _merge(st: _State, u: int, v: int, desc: set[int]) -> None:
    """Merge ``v`` into ``u`` and repair the topological order (descendants of u move behind)."""
    a, b = st.pos[u], st.pos[v]
    region = st.order[a:b + 1]
    keep = [x for x in region if x >= 0 and x not in desc and x != u and x != v]
    moved = [x for x in region if x in desc]
    new = [*keep, u, *moved]
    new += [-1] * (len(region) - len(new))
    st.order[a:b + 1] = new
    for i, x in enumerate(new):
        if x >= 0:
            st.pos[x] = a + i
    del st.succ[u][v]
    del st.pred[v][u]
    for p, size in st.pred[v].items():
        del st.succ[p][v]
        st.succ[p][u] = st.succ[p].get(u, 0.0) + size
        st.pred[u][p] = st.pred[u].get(p, 0.0) + size
    for s, size in st.succ[v].items():
        del st.pred[s][v]
        st.pred[s][u] = st.pred[s].get(u, 0.0) + size
        st.succ[u][s] = st.succ[u].get(s, 0.0) + size
    st.succ[v], st.pred[v] = {}, {}
    st.work[u] += st.work[v]
    st.params[u] += st.params[v]
    st.pin[u] = st.pin[u] if st.pin[u] is not None else st.pin[v]
    st.version[u] += 1
    st.version[v] = -1


def cluster_ops(problem: Problem, costs: ReferenceCosts, k: int, alpha: float, param_cap_bytes: float,
                stage_pins: Mapping[int, int] | None = None,
                deadline: float = float("inf")) -> tuple[ClusterGraph, dict[str, int]]:
    """Cluster the op graph to at most ``k`` hyper-operators with Eq. 4 (see module doc).

    ``param_cap_bytes``: the memory constraint, a hyper-operator's parameters with their
    optimizer state must fit it.  At ``deadline`` (monotonic clock) the greedy stops and the
    remaining clusters are grouped into runs of the dynamic topological order (runs of a
    topological order are convex), balanced by work.  Returns the graph and counters.
    """
    g = problem.graph
    n = g.n_ops
    opt = 1.0 + problem.settings.optimizer_bytes_per_param_byte
    pins = dict(stage_pins or {})
    st = _State([{} for _ in range(n)], [{} for _ in range(n)], costs.work_s.tolist(),
                g.param_bytes.tolist(), [pins.get(v) for v in range(n)], g.topo_order.tolist(),
                g.topo_position.tolist(), [0] * n)
    for s, d, size in zip(g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_bytes.tolist(), strict=True):
        st.succ[s][d] = size
        st.pred[d][s] = size
    members = [[v] for v in range(n)]

    bw, lat = costs.bandwidth_Bps, costs.latency_s

    def cost(u: int, v: int) -> float:
        size = st.succ[u][v]
        comm = 2.0 * (lat + size / bw) if size > 0 else 0.0
        return st.work[u] + st.work[v] - alpha * comm

    heap = [(cost(u, v), u, v, 0, 0) for u in range(n) for v in st.succ[u]]
    heapq.heapify(heap)
    alive = n
    stats = {"merges": 0, "rejected_convexity": 0, "rejected_memory": 0, "rejected_pins": 0, "truncated": 0}
    while alive > k and heap:
        if stats["merges"] % 64 == 0 and time.monotonic() > deadline:
            stats["truncated"] = 1
            break
        _, u, v, vu, vv = heapq.heappop(heap)
        if st.version[u] != vu or st.version[v] != vv or v not in st.succ[u]:
            continue
        if (st.params[u] + st.params[v]) * opt > param_cap_bytes:
            stats["rejected_memory"] += 1
            continue
        if st.pin[u] is not None and st.pin[v] is not None and st.pin[u] != st.pin[v]:
            stats["rejected_pins"] += 1
            continue
        desc = _descendants_before(st, u, v)
        if desc is None:
            stats["rejected_convexity"] += 1
            continue
        _merge(st, u, v, desc)
        members[u] += members[v]
        alive -= 1
        stats["merges"] += 1
        ver = st.version[u]
        for p in st.pred[u]:
            heapq.heappush(heap, (cost(p, u), p, u, st.version[p], ver))
        for s in st.succ[u]:
            heapq.heappush(heap, (cost(u, s), u, s, ver, st.version[s]))
    labels = _labels_from_members(members, st.version, n)
    if alive > k and stats["truncated"]:
        labels = _runs(st, labels, k)
    return build_cluster_graph(problem, costs, labels, pins), stats


def _runs(st: _State, labels: IntArray, k: int) -> IntArray:
    """Group the alive clusters into about ``k`` runs of the topological order, balanced by work."""
    alive = [c for c in st.order if c >= 0 and st.version[c] >= 0]
    target = sum(st.work[c] for c in alive) / k
    run_of: dict[int, int] = {}
    run, acc, pin = 0, 0.0, None
    for c in alive:
        clash = st.pin[c] is not None and pin is not None and st.pin[c] != pin
        if run_of and (acc >= target or clash):
            run, acc, pin = run + 1, 0.0, None
        run_of[c] = run
        acc += st.work[c]
        pin = st.pin[c] if st.pin[c] is not None else pin
    return np.array([run_of[int(c)] for c in labels], dtype=np.int64)


def _labels_from_members(members: list[list[int]], version: list[int], n: int) -> IntArray:
    labels = np.empty(n, dtype=np.int64)
    for c in range(n):
        if version[c] >= 0:
            labels[members[c]] = c
    return labels
