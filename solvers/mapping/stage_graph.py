"""The replicated stage graph G' of §V and the two stage-time instantiations (Eq. 6–9).

A mapping is an ``S x R`` array ``place[s, i]`` = device of replica ``i`` of stage ``s``.  Replica
``i`` of a stage talks to replica ``i`` of its neighbours (docs/cost-model.md, equal replica counts), and
the replicas of a stage all-reduce in ring order ``place[s, 0], ..., place[s, R-1]``.

* ``c^m`` (Eq. 6, 8): ``c_u(s) + sum over adjacent stages`` of the forward activation and the
  backward gradient of each replica's slice, postal model (:func:`solvers.cost.comm.transfer_s`);
* ``c^AR`` (Eq. 7, 9): ``c_u(s) +`` ring all-reduce of the stage's parameters
  (:func:`solvers.cost.comm.allreduce_s`).

``c_u(s)`` is the stage's forward + backward time on the slowest device divided by ``R``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.cost.comm import allreduce_s
from solvers.cost.traffic import group_traffic_bytes
from solvers.model.problem import Problem
from solvers.model.topology import Topology
from solvers.partition.costs import reference_costs

Mode = Literal["m", "ar"]


@dataclass(frozen=True)
class StageGraph:
    """``compute_s[s]`` = c_u per replica; edge ``j``: stages ``src[j] -> dst[j]`` moving ``bytes[j]``
    per replica and micro-batch; ``param_bytes[s]`` = P(s) of Eq. 9."""

    n_stages: int
    replicas: int
    compute_s: FloatArray
    src: IntArray
    dst: IntArray
    bytes: FloatArray
    param_bytes: FloatArray

    def allreduce_ratio(self) -> float:
        """Total all-reduce bytes over total inter-stage bytes (the §V-B selection criterion)."""
        if self.replicas <= 1:
            return 0.0
        p2p = float(self.bytes.sum()) * self.replicas
        ar = float(self.param_bytes.sum()) * self.replicas
        return ar / p2p if p2p > 0 else float("inf")

    def default_mode(self) -> Mode:
        """``ar`` when all-reduce traffic dominates (ratio > 1), otherwise ``m`` (§V-B)."""
        return "ar" if self.allreduce_ratio() > 1.0 else "m"


def stage_graph(problem: Problem, stage_of: IntArray, n_stages: int, replicas: int) -> StageGraph:
    """The stage graph of a partition (op -> stage) with ``replicas`` devices per stage."""
    g = problem.graph
    work = reference_costs(problem).work_s
    compute = np.bincount(stage_of, weights=work, minlength=n_stages).astype(np.float64) / replicas
    traffic = group_traffic_bytes(g, stage_of)
    keys = sorted(k for k, size in traffic.items() if size > 0)
    params = np.bincount(stage_of, weights=g.param_bytes, minlength=n_stages).astype(np.float64)
    return StageGraph(n_stages, replicas, compute, np.array([a for a, _ in keys], dtype=np.int64),
                      np.array([b for _, b in keys], dtype=np.int64),
                      np.array([traffic[k] / replicas for k in keys], dtype=np.float64), params)


@dataclass(frozen=True)
class Channels:
    """Symmetrised channel costs: ``pair_s(m)[a, b]`` = m bytes a->b plus m bytes b->a (postal)."""

    lat_sym: FloatArray
    inv_bw_sym: FloatArray
    bandwidth_Bps: FloatArray
    latency_s: FloatArray

    @classmethod
    def of(cls, topo: Topology) -> Channels:
        bw = topo.bandwidth_Bps
        with np.errstate(divide="ignore"):
            inv = np.where(np.isfinite(bw), 1.0 / bw, 0.0)
        lat = topo.latency_s.copy()
        np.fill_diagonal(lat, 0.0)
        inv_sym = inv + inv.T
        np.fill_diagonal(inv_sym, 0.0)
        return cls(lat + lat.T, inv_sym, bw, lat)


def node_times(sg: StageGraph, topo: Topology, place: IntArray, mode: Mode) -> FloatArray:
    """Per replica ``(s, i)``: the instantiated stage time ``c^m`` or ``c^AR`` under ``place``."""
    times = np.repeat(sg.compute_s[:, None], sg.replicas, axis=1)
    if mode == "m":
        ch = Channels.of(topo)
        for a, b, m in zip(sg.src.tolist(), sg.dst.tolist(), sg.bytes.tolist(), strict=True):
            da, db = place[a], place[b]
            term = np.where(da != db, ch.lat_sym[da, db] + m * ch.inv_bw_sym[da, db], 0.0)
            times[a] += term
            times[b] += term
    else:
        for s in range(sg.n_stages):
            times[s] += allreduce_s(topo, place[s].tolist(), float(sg.param_bytes[s]))
    return np.asarray(times, dtype=np.float64)


def mapping_objective_s(sg: StageGraph, topo: Topology, place: IntArray, mode: Mode) -> float:
    """Problem (5): the largest instantiated stage time."""
    return float(node_times(sg, topo, place, mode).max())
