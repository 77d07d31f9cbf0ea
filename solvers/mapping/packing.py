"""Packing groups of replicas into the components of a threshold graph.

The elements of a mapping that use fast channels (a stage's ring, a stage edge's lanes) join
their replicas into groups that must sit inside one component of the threshold graph
(:mod:`solvers.mapping.unionfind`); :func:`may_pack` tests whether given groups can, first by a
counting condition, then by an integer program (:func:`packing_milp`).  The conflict bound
(:func:`~solvers.mapping.bounds.conflict_bound_s`) and the packing starts of the search
(:func:`~solvers.mapping.search.packing_mapping`) rest on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from solvers.arrays import IntArray
from solvers.mapping.objective import PipelineModel
from solvers.mapping.unionfind import UnionFind


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
