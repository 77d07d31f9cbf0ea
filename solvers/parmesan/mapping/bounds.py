"""Initial bounds of Alg. 1: lower bounds Eq. 10 / Eq. 11 and the upper bound from heuristics.

Both lower bounds take, for every replica, its compute plus the cheapest communication it could
possibly have on the best device (Proposition 1), computed by sorting:

* Eq. 10 (``c^m``): the ``k`` neighbours of a replica must sit on ``k`` distinct other devices;
  pairing the largest messages with the cheapest channels (rearrangement inequality) and adding
  the ``k`` smallest latencies separately bounds their cost from below;
* Eq. 11 (``c^AR``): a replica has two ring neighbours on distinct devices (one when ``R = 2``),
  so the ring's bottleneck is at most the second-best (best) channel from its device.
"""

from __future__ import annotations

import numpy as np

from solvers.arrays import FloatArray
from solvers.model.topology import Topology
from solvers.parmesan.mapping.stage_graph import Channels, Mode, StageGraph


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
