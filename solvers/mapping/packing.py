"""Packing groups of replicas into the components of a threshold graph.

The elements of a mapping that use fast channels (a stage's ring, a stage edge's lanes) join
their replicas into groups that must sit inside one component of the threshold graph
(:mod:`solvers.mapping.unionfind`); :func:`may_pack` tests whether given groups can, first by a
counting condition, then by an integer program (:func:`packing_milp`).  The conflict bound
(:func:`~solvers.mapping.bounds.conflict_bound_s`) rests on it; its leaves, element sets that
may pack, give mappings (:func:`packing_mapping`, :func:`packing_starts`) from which the search
(:mod:`solvers.mapping.search`) starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from solvers.arrays import FloatArray, IntArray
from solvers.mapping.objective import PipelineCosts, PipelineModel, combined_objective_s
from solvers.mapping.unionfind import UnionFind
from solvers.model.topology import Topology

PACKING_STARTS = 3


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


def may_pack(group_count: dict[int, int], components: IntArray, cache: dict[Any, bool] | None = None) -> bool:
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
    stages = UnionFind(model.n_stages)
    for kind, idx in fast:
        if kind == 1:
            stages.join(int(model.src[idx]), int(model.dst[idx]))
    ringed = {stages.root(idx) for kind, idx in fast if kind == 0}
    return sorted(((sorted(m), x in ringed) for x, m in stages.members.items()), key=lambda c: c[0][0])


def group_sizes(model: PipelineModel, fast: Sequence[tuple[int, int]]) -> dict[int, int]:
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


def packing_mapping(model: PipelineModel, topo: Topology, beta_Bps: float,
                    fast: Sequence[tuple[int, int]]) -> IntArray | None:
    """A mapping in which the elements ``fast`` (a conflict-bound leaf, :func:`conflict_bound_s`)
    are fast at ``beta_Bps``: the groups of replicas they join go, largest first, each into the
    component of {pairs wider than ``beta_Bps``} with the widest mean channel among those with
    room (lane by lane, so a fast ring's hops and a group's lanes stay inside it; if that fails,
    each into the one with the least room that fits; if that fails too, as an exact packing by
    HiGHS says); the other replicas fill the free devices lane by lane.  ``None`` when none packs."""
    s_, r, n = model.n_stages, model.replicas, topo.n_devices
    if s_ * r > n:
        return None
    bw = np.maximum(topo.bandwidth_Bps, topo.bandwidth_Bps.T).astype(np.float64)
    np.fill_diagonal(bw, 0.0)
    n_comp, label = connected_components(csr_matrix(bw > beta_Bps), directed=False)
    free = [_widest_chain(bw, np.flatnonzero(label == c)) for c in range(n_comp)]
    quality = [float(bw[np.ix_(m, m)].sum()) / (len(m) * (len(m) - 1)) if len(m) > 1 else 0.0 for m in free]
    groups: list[list[tuple[int, int]]] = []
    for members, ringed in fast_components(model, fast):
        if ringed:
            groups.append([(t, i) for i in range(r) for t in members])
        else:
            groups += [[(t, i) for t in members] for i in range(r)]
    big = sorted((g for g in groups if len(g) > 1), key=len, reverse=True)
    quota = _packing_quota([len(g) for g in big], [len(m) for m in free])
    for rule in ("widest", "tightest", "quota"):  # the first that packs every group
        place = np.full((s_, r), -1, dtype=np.int64)
        left = [list(m) for m in free]
        for grp in big:
            room = [c for c in range(n_comp) if len(left[c]) >= len(grp)]
            if rule == "quota":
                room = [c for c in room if quota.get((c, len(grp)), 0) > 0]
            if not room:
                break
            c = max(room, key=lambda c: (-len(left[c]), quality[c]) if rule == "tightest" else (quality[c], -len(left[c])))
            if rule == "quota":
                quota[(c, len(grp))] -= 1
            for (t, i), d in zip(grp, left[c][: len(grp)], strict=True):
                place[t, i] = d
            left[c] = left[c][len(grp):]
        else:
            break
    else:
        return None
    rest = iter(sorted(d for m in left for d in m))
    for i in range(r):
        for t in range(s_):
            if place[t, i] < 0:
                place[t, i] = next(rest)
    return place


def packing_starts(model: PipelineModel, topo: Topology, costs: PipelineCosts,
                   witnesses: Sequence[tuple[float, float, tuple[tuple[int, int], ...]]]) -> list[tuple[str, IntArray]]:
    """The ``PACKING_STARTS`` best mappings (by the combined objective) built by
    :func:`packing_mapping` from the conflict bound's leaves with the largest values and from
    each of them with one fast lane element made slow: smaller groups leave the slow hosts to
    lanes that can afford them (random_blk_1 (8,32): a leaf's stages 0-1-2-3-7 kept together put
    one lane group on a host 26x slower than the best; with the light 0 -> 1 slow, groups of
    stages 1-2-3-7 and stage 0 alone, the mapping starts 3.5 % lower)."""
    found: dict[tuple[float, tuple[tuple[int, int], ...]], IntArray] = {}
    for _, beta, fast in sorted(witnesses, reverse=True)[:PACKING_STARTS]:
        lanes = [e for e in fast if e[0] == 1]
        for drop in [None, *lanes]:
            kept = tuple(e for e in fast if e != drop)
            if (beta, kept) not in found and (p := packing_mapping(model, topo, beta, kept)) is not None:
                found[(beta, kept)] = p
    scored = sorted((combined_objective_s(model, costs, p), k, p) for k, p in enumerate(found.values()))
    return [(f"packing{k}", p) for k, (_, _, p) in enumerate(scored[:PACKING_STARTS])]


def _packing_quota(groups: list[int], components: list[int]) -> dict[tuple[int, int], int]:
    """How many groups of each size each component takes in an exact packing (HiGHS; empty when
    none is found)."""
    sizes = sorted(set(groups))
    bins = [c for c in range(len(components)) if sizes and components[c] >= sizes[0]]
    if not sizes or not bins:
        return {}
    k, m = len(bins), len(sizes)
    result = packing_milp(sizes, [groups.count(t) for t in sizes], [components[c] for c in bins])
    if result.x is None:
        return {}
    x = np.rint(result.x).astype(np.int64).reshape(k, m)
    return {(bins[a], sizes[b]): int(x[a, b]) for a in range(k) for b in range(m) if x[a, b] > 0}


def _widest_chain(bw: FloatArray, devices: IntArray) -> list[int]:
    """``devices`` in a greedy chain order: each next device the one with the widest channel from
    the previous (so that neighbours in the order, which share lanes and rings, are well linked)."""
    left = [int(d) for d in devices]
    if len(left) <= 2:
        return left
    chain = [left.pop(0)]
    while left:
        k = int(np.argmax(bw[chain[-1], left]))
        chain.append(left.pop(k))
    return chain
