"""Inner-level search of Alg. 2: is there a mapping whose largest stage time is at most ``t``?

Depth-first backtracking over the replicas in a fixed mapping order.  The checking scheme of
a replica (the stage times that can be tested when it is placed) is precomputed from G' and
the instantiation (§V-A):

* ``c^m``: replicas go lane by lane, stage by stage; placing ``(s, i)`` fixes its channels to
  its already-placed neighbours, so the times of ``(s, i)`` and of those neighbours are
  checked.  Times only grow as more neighbours are placed, so testing partial sums is exact
  pruning (a strengthening of the paper's scheme, which tests only completed stages);
* ``c^AR``: replicas go stage by stage; placing replica ``i > 0`` adds the ring hop from
  replica ``i - 1`` (and, for the last, the hop back to replica 0), so the all-reduce time
  known so far (bottleneck bandwidth, largest latency) is checked.

Every feasible candidate device is evaluated at once with numpy; candidates are tried in order
of the placed replica's own time, one per class of twin devices, with lane / ring symmetry
broken (:mod:`solvers.mapping.symmetry`).  The search stops at a deadline or a node limit and then
reports ``timeout`` (the target counts as "not found" without proof).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.mapping.stage_graph import Channels, Mode, StageGraph
from solvers.mapping.symmetry import twin_classes
from solvers.model.topology import Topology

Outcome = Literal["found", "exhausted", "timeout"]


class SearchResult(NamedTuple):
    """What an inner search (Alg. 2) returns: its outcome, the placement it found (``found``
    only) and the nodes it expanded."""

    outcome: Outcome
    found: IntArray | None
    nodes: int


@dataclass(frozen=True)
class SearchSpec:
    """Everything one inner search needs (picklable, so targets can run in worker processes).

    ``order[x]`` = (stage, replica) placed at depth ``x``; ``compute_s[x]`` its c_u;
    ``nbrs[x]`` = (depth y < x, bytes) of its already-placed neighbours (``c^m``);
    ``ring_prev[x]`` / ``ring_first[x]`` = depths of the previous and (for the last replica)
    first replica of its ring, -1 if none (``c^AR``).
    """

    mode: Mode
    order: list[tuple[int, int]]
    compute_s: FloatArray
    nbrs: list[list[tuple[int, float]]]
    ring_prev: list[int]
    ring_first: list[int]
    param_bytes: FloatArray
    replicas: int
    channels: Channels
    n_devices: int
    twin_class: IntArray
    order_after: list[list[int]]
    m_cap_s: float = float("inf")
    ar_cap_s: float = float("inf")


def make_spec(sg: StageGraph, topo: Topology, mode: Mode, m_cap_s: float = float("inf"),
              ar_cap_s: float = float("inf")) -> SearchSpec:
    """Mapping order and checking schemes for an instantiation.

    ``m_cap_s`` / ``ar_cap_s``: the guard — every replica's time under the *other* instantiation
    must stay within it (``inf``: no guard).  With a guard, lanes are no longer interchangeable
    (ring order = lane order), so only rotations and reflections of all lanes together are
    broken, on stage 0.
    """
    guarded = np.isfinite(m_cap_s) or np.isfinite(ar_cap_s)
    s_, r = sg.n_stages, sg.replicas
    if mode == "m":
        order = [(s, i) for i in range(r) for s in range(s_)]
    else:
        order = [(s, i) for s in range(s_) for i in range(r)]
    depth = {node: x for x, node in enumerate(order)}
    nbrs: list[list[tuple[int, float]]] = [[] for _ in order]
    if mode == "m" or np.isfinite(m_cap_s):
        for a, b, m in zip(sg.src.tolist(), sg.dst.tolist(), sg.bytes.tolist(), strict=True):
            for i in range(r):
                xa, xb = depth[(a, i)], depth[(b, i)]
                lo, hi = min(xa, xb), max(xa, xb)
                nbrs[hi].append((lo, m))
    ring_prev = [depth[(s, i - 1)] if i > 0 else -1 for s, i in order]
    ring_first = [depth[(s, 0)] if i == r - 1 and r > 1 else -1 for s, i in order]
    compute = np.array([sg.compute_s[s] for s, _ in order], dtype=np.float64)
    # order_after[x] = depths whose device the device of depth x must exceed (symmetry breaking)
    order_after: list[list[int]] = [[] for _ in order]
    for x, (s, i) in enumerate(order):
        if guarded and s == 0 and i > 0:
            order_after[x] = [depth[(0, 0)]] + ([depth[(0, 1)]] if r >= 3 and i == r - 1 else [])
        elif guarded:
            continue
        elif mode == "m" and s == 0 and i > 0:
            order_after[x] = [depth[(0, i - 1)]]
        elif mode == "ar" and i > 0:
            order_after[x] = [depth[(s, 0)]] + ([depth[(s, 1)]] if r >= 3 and i == r - 1 else [])
    return SearchSpec(mode, order, compute, nbrs, ring_prev, ring_first,
                      np.array([sg.param_bytes[s] for s, _ in order], dtype=np.float64), r,
                      Channels.of(topo), topo.n_devices, twin_classes(topo), order_after, m_cap_s, ar_cap_s)


@dataclass
class _Frame:
    x: int
    cands: IntArray
    own: FloatArray
    next: int
    saved: list[tuple[int, float]]


def search(spec: SearchSpec, target_s: float, deadline: float, node_limit: int) -> SearchResult:
    """Alg. 2: a placement (device per depth) with every checked time <= ``target_s``.

    Returns the outcome, the placement in mapping order (found only) and the nodes expanded.
    """
    n = len(spec.order)
    place = np.full(n, -1, dtype=np.int64)
    used = np.zeros(spec.n_devices, dtype=bool)
    partial = np.zeros(n)  # c^m (objective or guard): time so far of each placed replica
    ring_bw = np.full(n, np.inf)  # c^AR: bottleneck bandwidth of the ring hops placed up to depth x
    ring_lat = np.zeros(n)  # c^AR: largest latency of those hops
    ch = spec.channels
    devices = np.arange(spec.n_devices)
    nodes = 0

    limit_m = target_s if spec.mode == "m" else spec.m_cap_s
    limit_ar = target_s if spec.mode == "ar" else spec.ar_cap_s
    track_m, track_ar = bool(np.isfinite(limit_m)), bool(np.isfinite(limit_ar))

    def frame(x: int) -> _Frame:
        ok = ~used
        own_m = np.full(spec.n_devices, spec.compute_s[x])
        if track_m:
            for y, m in spec.nbrs[x]:
                term = ch.lat_sym[:, place[y]] + m * ch.inv_bw_sym[:, place[y]]
                own_m = own_m + term
                ok &= partial[y] + term <= limit_m
            ok &= own_m <= limit_m
        own = own_m
        if track_ar:
            own_ar = _ring_times(spec, x, place, ring_bw, ring_lat)
            ok &= own_ar <= limit_ar
            own = own_ar if spec.mode == "ar" else own_m
        for y in spec.order_after[x]:
            ok &= devices > place[y]
        cands = np.flatnonzero(ok)
        cands = cands[np.argsort(own[cands], kind="stable")]
        _, first = np.unique(spec.twin_class[cands], return_index=True)
        cands = cands[np.sort(first)]  # one device per twin class, in the sorted order
        return _Frame(x, cands.astype(np.int64), own_m, 0, [])

    stack = [frame(0)]
    while stack:
        top = stack[-1]
        if top.saved:  # undo the previous candidate of this depth
            d_old = int(place[top.x])
            used[d_old] = False
            place[top.x] = -1
            for y, old in top.saved:
                partial[y] = old
            top.saved = []
        if top.next >= len(top.cands):
            stack.pop()
            continue
        d = int(top.cands[top.next])
        top.next += 1
        nodes += 1
        if nodes % 256 == 0 and (time.monotonic() > deadline or nodes > node_limit):
            return SearchResult("timeout", None, nodes)
        x = top.x
        top.saved = [(x, float(partial[x]))]
        place[x] = d
        used[d] = True
        partial[x] = top.own[d]
        if track_m:
            for y, m in spec.nbrs[x]:
                top.saved.append((y, float(partial[y])))
                partial[y] += ch.lat_sym[d, place[y]] + m * ch.inv_bw_sym[d, place[y]]
        if track_ar:
            _ring_update(spec, x, d, place, ring_bw, ring_lat)
        if x == n - 1:
            return SearchResult("found", place.copy(), nodes)
        stack.append(frame(x + 1))
    return SearchResult("exhausted", None, nodes)


def _ring_times(spec: SearchSpec, x: int, place: IntArray, ring_bw: FloatArray, ring_lat: FloatArray) -> FloatArray:
    """c^AR known after placing depth ``x`` on each device (Eq. 9 over the hops placed so far)."""
    r = spec.replicas
    ch = spec.channels
    prev = spec.ring_prev[x]
    if prev < 0 or spec.param_bytes[x] <= 0:
        return np.full(spec.n_devices, spec.compute_s[x])
    bw = np.minimum(ring_bw[prev], ch.bandwidth_Bps[place[prev], :])
    lat = np.maximum(ring_lat[prev], ch.latency_s[place[prev], :])
    first = spec.ring_first[x]
    if first >= 0:
        bw = np.minimum(bw, ch.bandwidth_Bps[:, place[first]])
        lat = np.maximum(lat, ch.latency_s[:, place[first]])
    return np.asarray(spec.compute_s[x] + (2.0 * (r - 1) / r * spec.param_bytes[x] / bw + 2.0 * (r - 1) * lat))


def _ring_update(spec: SearchSpec, x: int, d: int, place: IntArray, ring_bw: FloatArray,
                 ring_lat: FloatArray) -> None:
    ch = spec.channels
    prev = spec.ring_prev[x]
    if prev < 0:
        ring_bw[x], ring_lat[x] = np.inf, 0.0
        return
    ring_bw[x] = min(ring_bw[prev], ch.bandwidth_Bps[place[prev], d])
    ring_lat[x] = max(ring_lat[prev], ch.latency_s[place[prev], d])
    first = spec.ring_first[x]
    if first >= 0:
        ring_bw[x] = min(ring_bw[x], ch.bandwidth_Bps[d, place[first]])
        ring_lat[x] = max(ring_lat[x], ch.latency_s[d, place[first]])


def placement_array(spec: SearchSpec, by_depth: IntArray, n_stages: int) -> IntArray:
    """Convert a placement in mapping order to the ``S x R`` array."""
    out = np.empty((n_stages, spec.replicas), dtype=np.int64)
    for x, (s, i) in enumerate(spec.order):
        out[s, i] = by_depth[x]
    return out
