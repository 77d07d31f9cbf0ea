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


def _twins(topo: Topology, a: int, b: int) -> bool:
    bw, lat = topo.bandwidth_Bps, topo.latency_s
    if bw[a, b] != bw[b, a] or lat[a, b] != lat[b, a]:
        return False
    keep = np.ones(topo.n_devices, dtype=bool)
    keep[[a, b]] = False
    return all(np.array_equal(m[a, keep], m[b, keep]) and np.array_equal(m[keep, a], m[keep, b])
               for m in (bw, lat))


def twin_classes(topo: Topology) -> IntArray:
    """``cls[d]`` = the smallest device index of ``d``'s twin class."""
    n = topo.n_devices
    cls = np.arange(n, dtype=np.int64)
    groups: dict[tuple[object, ...], list[int]] = {}
    for d, dev in enumerate(topo.devices):
        others = np.delete(np.arange(n), d)
        key = (dev.kind, dev.speed, dev.memory_bytes,
               *(tuple(np.sort(m[d, others]).tolist()) + tuple(np.sort(m[others, d]).tolist())
                 for m in (topo.bandwidth_Bps, topo.latency_s)))
        reps = groups.setdefault(key, [])
        for r in reps:
            if _twins(topo, r, d):
                cls[d] = r
                break
        else:
            reps.append(d)
    return cls
