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
yet known is a lower bound of every completion (exact pruning for Alg. 2).  Its lower bounds over
all mappings are in :mod:`solvers.mapping.bounds`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

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
    if problem.settings.recomputes:
        b = b + f
    traffic = sorted(group_traffic_bytes(g, stage_of).items())
    params = np.bincount(stage_of, weights=g.param_bytes, minlength=n_stages).astype(np.float64)
    mb = micro_batches
    if problem.settings.own_schedule == "gpipe":
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
