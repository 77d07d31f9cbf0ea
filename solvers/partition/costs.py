"""Reference costs of phase 1 (Parmesan §IV, §VI): a flattened, homogeneous view of the topology.

Phase 1 cannot know which devices two stages will land on (§VI), so stage times use one
reference device and one reference channel:

* ``c_u(v)``: forward + backward time of op ``v`` on the *slowest* device (homogeneous GPUs are
  the paper's assumption, footnote 1; the slowest keeps the estimate safe), plus the forward
  again when activations are recomputed (the simulator's rule);
* ``c_m(e)``: activation forward plus gradient backward (postal model of
  :mod:`solvers.cost.comm`: latency + bytes / bandwidth, both directions) over the reference
  channel: the median over devices of each device's best channel.  Phase 2 places adjacent
  stages on well-connected pairs, so the best channel, not the average pair, is what a stage
  boundary costs after mapping (the median over all pairs would price every boundary at the
  slowest tier of a hierarchy and skew the balance towards few, compute-heavy stages).

Memory follows :func:`solvers.cost.memory.stage_memory_bytes` (Eq. 14 in recompute mode) in a
vectorised form so the DP can test thousands of candidate stages at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from solvers.arrays import FloatArray
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import capacity_bytes, held_micro_batches, stage_device_bytes
from solvers.model.problem import Problem


@dataclass(frozen=True)
class ReferenceCosts:
    """Per-op work ``work_s`` (c_u), per-edge ``edge_comm_s`` (c_m) and the reference channel."""

    work_s: FloatArray
    edge_comm_s: FloatArray
    bandwidth_Bps: float
    latency_s: float

    def comm_s(self, size_bytes: FloatArray | float) -> FloatArray:
        """Forward + backward postal time of tensors of ``size_bytes`` on the reference channel."""
        size = np.asarray(size_bytes, dtype=np.float64)
        return np.where(size > 0, 2.0 * (self.latency_s + size / self.bandwidth_Bps), 0.0)


def reference_costs(problem: Problem) -> ReferenceCosts:
    """Eq. 3's ``c_u`` and ``c_m`` on the slowest device and the reference channel."""
    g, topo = problem.graph, problem.topology
    compute = ComputeModel(g, topo)
    work = np.zeros(g.n_ops)
    for d in range(topo.n_devices):
        fwd = compute.fwd_s(d)
        work = np.maximum(work, fwd * (2.0 if problem.settings.recomputes else 1.0) + compute.bwd_s(d))
    n = topo.n_devices
    if n > 1:
        bw_off = np.where(np.eye(n, dtype=bool), 0.0, topo.bandwidth_Bps)
        best = np.argmax(bw_off, axis=1)  # each device's best partner
        bw = float(np.median(bw_off[np.arange(n), best]))
        lat = float(np.median(topo.latency_s[np.arange(n), best]))
    else:
        bw, lat = float("inf"), 0.0
    ref = ReferenceCosts(work, np.zeros(0), bw, lat)
    return ReferenceCosts(work, ref.comm_s(g.edge_bytes), bw, lat)


def allreduce_terms(problem: Problem, replicas: int, micro_batches: int) -> tuple[float, float]:
    """Optional phase-1 all-reduce term per stage, amortised over the micro-batches of an iteration.

    Eq. 9 over a reference ring: the median over devices of the channel to each device's
    ``R - 1``-th best partner (a ring of R well-connected devices), i.e. ``(2 (R-1)/R / (B MB),
    2 (R-1) lat / MB)`` as (seconds per parameter byte, fixed seconds).  Zero when ``R = 1``.
    """
    topo = problem.topology
    n = topo.n_devices
    if replicas <= 1 or n <= 1:
        return 0.0, 0.0
    bw = np.where(np.eye(n, dtype=bool), 0.0, topo.bandwidth_Bps)
    order = np.argsort(-bw, axis=1)[:, : replicas - 1]
    partner = order[:, -1]  # the (R-1)-th best partner of every device
    b = float(np.median(bw[np.arange(n), partner]))
    lat = float(np.median(topo.latency_s[np.arange(n), partner]))
    return 2.0 * (replicas - 1) / replicas / (b * micro_batches), 2.0 * (replicas - 1) * lat / micro_batches


def stage_capacity_bytes(problem: Problem, stage: int) -> float:
    """Smallest usable memory over all devices for pipeline stage ``stage`` (any device may host it)."""
    return min(capacity_bytes(problem, d, stage) for d in range(problem.topology.n_devices))


class StageBytes(NamedTuple):
    """The bytes of candidate stages, one entry each: their parameters, what each micro-batch in
    flight keeps (:func:`solvers.cost.memory.kept_bytes` of the candidate's activation sum and
    boundary inputs, with ``problem.settings.recomputes``) and their working memory."""

    param: FloatArray
    kept: FloatArray
    working: FloatArray


def stage_memory_vec(problem: Problem, candidates: StageBytes, replicas: int, n_stages: int, stage: int,
                     micro_batches: int) -> FloatArray:
    """Vectorised :func:`solvers.cost.memory.stage_memory_bytes` for ``candidates`` as stage
    ``stage`` of ``n_stages`` stages of ``replicas`` replicas, ``micro_batches`` an iteration."""
    s = problem.settings
    k = held_micro_batches(problem, s.schedule, n_stages, stage, micro_batches)
    return stage_device_bytes(candidates.param, candidates.kept, candidates.working, k, replicas,
                              s.optimizer_bytes_per_param_byte)
