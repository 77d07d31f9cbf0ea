"""Symmetry breaking for Alg. 2 (choices documented in docs/parmesan.md).

* Twin devices: ``a`` and ``b`` are twins when swapping them changes no channel (equal rows and
  columns of the bandwidth and latency matrices outside the pair, a symmetric pair channel)
  and they have the same kind, speed and memory — e.g. the GPUs of one host in a two-level
  hierarchy.  Among unused twins only one is tried: the subtrees under the others are mirror
  images.  The relation is transitive under these conditions, so classes are built by
  comparing each device with one representative per class.
* Lane symmetry (``c^m``): lanes never interact, so lanes are ordered by the device of their
  first stage.  Ring symmetry (``c^AR``): a ring is the same under rotation and reflection, so
  replica 0 takes the smallest device of its ring and replica 1 a smaller one than replica R-1.
"""

from __future__ import annotations

import numpy as np

from solvers.arrays import IntArray
from solvers.model.topology import Topology


def _twin_of(topo: Topology, reps: list[int], d: int) -> int | None:
    """The first of ``reps`` that is a twin of ``d`` (the channels between them symmetric, and the
    same bandwidth and latency to and from every other device), all candidates at once."""
    if not reps:
        return None
    idx = np.array(reps)
    ok = np.ones(len(reps), dtype=bool)
    rows = np.arange(len(reps))
    for m in (topo.bandwidth_Bps, topo.latency_s):
        ok &= m[idx, d] == m[d, idx]
        for eq in (m[idx, :] == m[d, :], m[:, d] == m[:, idx].T):
            eq[:, d] = True
            eq[rows, idx] = True
            ok &= eq.all(axis=1)
    hits = np.flatnonzero(ok)
    return int(idx[hits[0]]) if len(hits) else None


_CACHE: dict[int, tuple[Topology, IntArray]] = {}


def twin_classes(topo: Topology) -> IntArray:
    """``cls[d]`` = the smallest device index of ``d``'s twin class (cached for the last topologies)."""
    hit = _CACHE.get(id(topo))
    if hit is not None and hit[0] is topo:
        return hit[1]
    n = topo.n_devices
    cls = np.arange(n, dtype=np.int64)
    groups: dict[tuple[object, ...], list[int]] = {}
    for d, dev in enumerate(topo.devices):
        others = np.delete(np.arange(n), d)
        key = (dev.kind, dev.speed, dev.memory_bytes, dev.base_memory_bytes,
               *(tuple(np.sort(m[d, others]).tolist()) + tuple(np.sort(m[others, d]).tolist())
                 for m in (topo.bandwidth_Bps, topo.latency_s)))
        reps = groups.setdefault(key, [])
        twin = _twin_of(topo, reps, d)
        if twin is not None:
            cls[d] = twin
        else:
            reps.append(d)
    if len(_CACHE) >= 8:
        _CACHE.clear()
    _CACHE[id(topo)] = (topo, cls)
    return cls
