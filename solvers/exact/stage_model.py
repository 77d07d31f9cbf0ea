"""What one stage costs in the exact DP: a relaxation of the simulator's per-stage time.

For a contiguous stage ``U = I \\ I'`` run by ``R`` replicas (stage index ``s`` of ``S``):

* compute: ``W(U) / R`` with ``W`` the sum over ``U`` of each op's *least* time over the devices
  (forward + backward when training, + forward again when recomputing) — the simulator's group
  time is the *slowest* replica's, so this never exceeds it (equal on identical devices);
* communication (:mod:`solvers.cost.comm`, the simulator's ``stage_times_s``): the stage sends
  its outputs forward and, when training, the gradients of its inputs back.  Forward bytes
  ``out(U) = Σ_{u ∈ U} max{bytes(u, v) : v ∉ I}``, backward bytes ``in(U) = Σ_{u ∈ I'} max{bytes(u,
  v) : v ∈ U}``; each non-empty direction costs ``lat_min + bytes / (R · bw_max)`` with the
  smallest latency and largest bandwidth over all device pairs.  The simulator sends one message
  per destination stage, at least as many bytes (a tensor goes once per consumer stage) on a
  channel no faster: never more than its time;
* memory (:mod:`solvers.cost.memory`): ``P(U)·(1 + opt) + (k_s · kept(U) + work_mem(U)) / R``
  against the largest usable memory of any device for stage ``s``, with ``kept`` = ``in(U)``
  with recomputation, the activation sum otherwise, ``k_s`` the in-flight micro-batches.

So for every contiguous partition into ``S`` stages of ``R`` replicas, on any devices, the DP's
stage time is at most the simulator's ``stage_times_s`` of that stage: the DP optimum is a
lower bound on the simulated ``bottleneck_stage_s`` of every such plan, and equal to it on
identical devices joined by identical channels when no tensor feeds two later stages
(docs/exact.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from solvers.arrays import BoolArray, FloatArray, IntArray
from solvers.cost.calibrated import collective_efficiency
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import capacity_bytes, held_micro_batches, kept_bytes, stage_device_bytes
from solvers.cost.tensor_parallel import layout_of
from solvers.model.problem import Problem
from solvers.partition.tp import split_op_costs
from solvers.runnable import computing_ops


@dataclass(frozen=True)
class StageModel:
    """Per-op inputs of the stage cost (see the module doc).

    ``work_s[v]``: least per-micro-batch time of op ``v`` on one device; ``param_bytes[v]``
    (already times ``1 + opt``); ``act_bytes[v]``; ``working_bytes[v]``
    (``max(mem_fwd, mem_bwd)``); edges sorted by source: ``src``, ``dst``, ``edge_bytes``;
    ``bandwidth_Bps`` / ``latency_s``: the fastest channel; ``training``, ``recompute``;
    ``computes[v]``: op ``v`` computes from the model's inputs (:func:`solvers.runnable.computing_ops`:
    a stage needs one).
    """

    work_s: FloatArray
    param_bytes: FloatArray
    act_bytes: FloatArray
    working_bytes: FloatArray
    src: IntArray
    dst: IntArray
    edge_bytes: FloatArray
    bandwidth_Bps: float
    latency_s: float
    training: bool
    recompute: bool
    computes: BoolArray

    @property
    def has_traffic(self) -> bool:
        return bool(self.edge_bytes.size and self.edge_bytes.max() > 0 and np.isfinite(self.bandwidth_Bps))

    def message_s(self, size_bytes: FloatArray, replicas: int) -> FloatArray:
        """Postal time of one direction's bytes on the fastest channel, ``0`` for no bytes."""
        return np.where(size_bytes > 0, self.latency_s + size_bytes / (replicas * self.bandwidth_Bps), 0.0)


def stage_model(problem: Problem) -> StageModel:
    """The stage-cost inputs of ``problem`` (least op time, fastest channel)."""
    g, topo = problem.graph, problem.topology
    compute = ComputeModel(g, topo)
    work = np.full(g.n_ops, np.inf)
    for d in range(topo.n_devices):
        f = compute.fwd_s(d)
        w = f.copy()
        if problem.training:
            w = w + compute.bwd_s(d) + (f if problem.settings.recomputes else 0.0)
        work = np.minimum(work, w)
    off = ~np.eye(topo.n_devices, dtype=bool)
    bw = float(topo.bandwidth_Bps[off].max()) if off.any() else float("inf")
    lat = float(topo.latency_s[off].min()) if off.any() else 0.0
    order = np.argsort(g.edge_src, kind="stable")
    return StageModel(
        work_s=np.asarray(work, dtype=np.float64),
        param_bytes=np.asarray(g.param_bytes * (1.0 + problem.settings.optimizer_bytes_per_param_byte),
                               dtype=np.float64),
        act_bytes=np.asarray(g.act_bytes, dtype=np.float64),
        working_bytes=np.asarray(np.maximum(g.mem_fwd_bytes, g.mem_bwd_bytes), dtype=np.float64),
        src=np.asarray(g.edge_src[order], dtype=np.int64), dst=np.asarray(g.edge_dst[order], dtype=np.int64),
        edge_bytes=np.asarray(g.edge_bytes[order], dtype=np.float64),
        bandwidth_Bps=bw, latency_s=lat, training=problem.training, recompute=problem.settings.recomputes,
        computes=computing_ops(g))


def tp_stage_model(problem: Problem, model: StageModel, t: int, groups: list[list[int]],
                   kept: IntArray | None = None) -> StageModel:
    """``model`` for stages of tensor-parallel degree ``t`` on ``groups`` (docs/exact.md, "Tensor
    parallelism"), still a relaxation of the simulator's stage (:mod:`solvers.cost.tensor_parallel`).

    Per op of the whole graph: its least time over the groups' devices with a split op's compute
    divided by ``t e`` (Shoeybi et al. 2019, §3; ``e`` the kind's calibrated efficiency), plus its
    collectives on the fastest ring among the groups, with the smallest per-byte time and latency of
    any group (``2 ((t-1)/t) B / bw + 2 (t-1) lat`` per all-reduce: the row output forward, the
    column input's gradient backward); split ops hold ``1/t`` of their parameters, activations and
    working memory.  The DP divides the whole work by ``R``, the simulator the collectives' bytes
    but not their latency, so the stage time stays at most the simulator's.  ``kept``: the ops of a
    relaxation (:mod:`solvers.exact.relax`), whose model ``model`` is.  ``t = 1`` returns ``model``.
    """
    if t == 1:
        return model
    costs = split_op_costs(problem, t, groups, slowest=False)
    return _split_model(problem, model, costs.work_s + costs.comm_s, costs.shrink, kept)


def _split_model(problem: Problem, model: StageModel, work: FloatArray, shrink: FloatArray,
                 kept: IntArray | None) -> StageModel:
    """``model`` with the whole graph's per-op ``work`` and memory times ``shrink`` (at ``kept``)."""
    g = problem.graph
    params = g.param_bytes * (1.0 + problem.settings.optimizer_bytes_per_param_byte) * shrink
    act = g.act_bytes * shrink
    working = np.maximum(g.mem_fwd_bytes, g.mem_bwd_bytes) * shrink
    at = slice(None) if kept is None else kept
    return replace(model, work_s=np.asarray(work[at], dtype=np.float64),
                   param_bytes=np.asarray(params[at], dtype=np.float64),
                   act_bytes=np.asarray(act[at], dtype=np.float64),
                   working_bytes=np.asarray(working[at], dtype=np.float64))


def any_group_stage_model(problem: Problem, model: StageModel, t: int, kept: IntArray | None = None) -> StageModel:
    """:func:`tp_stage_model` for a stage of degree ``t`` on *any* ``t`` devices (the mixed search of
    docs/exact.md, "A degree per stage", whose groups are cut after the DP): each op's least time over
    every device of the topology (a split op's compute over ``t e``), its collectives on the fastest
    channel of the topology (``model``'s: no ring of ``t`` devices has a faster slowest hop or a smaller
    largest latency), split ops holding ``1/t`` of their memory.  A relaxation of the simulator's stage
    on every group.  ``t = 1`` returns ``model``."""
    if t == 1:
        return model
    g, topo = problem.graph, problem.topology
    every = [[d] for d in range(topo.n_devices)]  # one-device groups: compute over every device, no ring
    costs = split_op_costs(problem, t, every, slowest=False)
    eff = collective_efficiency(topo)
    per_byte = 1.0 / (model.bandwidth_Bps * eff) if np.isfinite(model.bandwidth_Bps) else 0.0
    lat = model.latency_s / eff
    lay = layout_of(g)

    def all_reduce_s(size: FloatArray) -> FloatArray:  # split_op_costs' all-reduce on the fastest channel
        return np.asarray(np.where(size > 0, 2.0 * ((t - 1) / t * size * per_byte + (t - 1) * lat), 0.0))

    comm = all_reduce_s(lay.output_reduce_bytes)
    if problem.training:
        comm = comm + all_reduce_s(lay.input_gather_bytes)
    return _split_model(problem, model, costs.work_s + comm, costs.shrink, kept)


def stage_capacities_bytes(problem: Problem, n_stages: int) -> FloatArray:
    """Per stage index: the largest usable memory any device offers it (a relaxation)."""
    n = problem.topology.n_devices
    return np.array([max(capacity_bytes(problem, d, s) for d in range(n)) for s in range(n_stages)])


def in_flight(problem: Problem, n_stages: int, micro_batches: int) -> FloatArray:
    """Per stage index: micro-batches whose activations it holds at once
    (:func:`~solvers.cost.memory.held_micro_batches`)."""
    return np.array([held_micro_batches(problem, problem.settings.own_schedule, n_stages, s, micro_batches)
                     for s in range(n_stages)], dtype=np.float64)


def partition_times_s(model: StageModel, stage_of: IntArray, n_stages: int, replicas: int) -> FloatArray:
    """The stage times of a given contiguous partition in this model (the DP's warm start)."""
    comp = np.bincount(stage_of, weights=model.work_s, minlength=n_stages) / replicas
    if not model.has_traffic:
        return np.asarray(comp, dtype=np.float64)
    out, into = partition_traffic_bytes(model, stage_of, n_stages)
    times = comp + model.message_s(out, replicas)
    return np.asarray(times + (model.message_s(into, replicas) if model.training else 0.0), dtype=np.float64)


def partition_traffic_bytes(model: StageModel, stage_of: IntArray, n_stages: int) -> tuple[FloatArray, FloatArray]:
    """Per stage: (forward bytes out, backward bytes in) as the module doc counts them."""
    a, b = stage_of[model.src], stage_of[model.dst]
    out = np.zeros(n_stages)
    into = np.zeros(n_stages)
    cross = (a != b) & (model.edge_bytes > 0)
    for key, target, per in ((model.src[cross], a[cross], out), (model.src[cross] * n_stages + b[cross], b[cross], into)):
        best: dict[int, tuple[int, float]] = {}
        for k, t, size in zip(key.tolist(), target.tolist(), model.edge_bytes[cross].tolist(), strict=True):
            if size > best.get(k, (t, 0.0))[1]:
                best[k] = (t, size)
        for t, size in best.values():
            per[t] += size
    return out, into


def partition_memory_bytes(model: StageModel, stage_of: IntArray, n_stages: int, replicas: int,
                           in_flight: FloatArray) -> FloatArray:
    """Per stage: its memory in this model (equal to :func:`solvers.cost.memory.stage_memory_bytes`)."""
    params = np.bincount(stage_of, weights=model.param_bytes, minlength=n_stages).astype(np.float64)
    acts = np.bincount(stage_of, weights=model.act_bytes, minlength=n_stages).astype(np.float64)
    kept = kept_bytes(acts, partition_traffic_bytes(model, stage_of, n_stages)[1], model.recompute)
    working = np.zeros(n_stages)
    np.maximum.at(working, stage_of, model.working_bytes)
    return stage_device_bytes(params, kept, working, in_flight.astype(np.float64), replicas, 0.0)  # params already times 1 + opt
