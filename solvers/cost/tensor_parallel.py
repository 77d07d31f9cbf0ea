"""Tensor-parallel stages in the cost model (docs/cost-model.md, "Tensor parallelism").

A stage with degree ``t`` and ``R`` replicas runs on ``t * R`` devices, replica ``k`` on the
tensor-parallel group ``devices[k*t:(k+1)*t]``.  Which ops split is :mod:`solvers.model.tp_rules`.
Per micro-batch, with each replica taking ``1/R`` of it (Parmesan Eq. 3):

* a split op takes ``time(d) / (t * e_kind(d))`` on device ``d`` (``e``: the calibrated
  tensor-parallel efficiency of the device kind, 1 by default), a replicated op ``time(d)``; the
  stage takes the slowest device's time ``/ R``;
* each column/row pair adds its collectives over the group's ring (Shoeybi et al. 2019, §3):
  an all-reduce of the row output forward and of the column input's gradient backward, or with
  sequence parallelism (Korthikanti et al. 2022, §4.2.2) an all-gather of the column input and a
  reduce-scatter of the row output forward, the reverse backward; bytes ``/ R``; the slowest group
  sets the time;
* split ops hold ``1/t`` of their parameters, activations and working memory on each device;
* the data-parallel all-reduce runs per shard: rank ``j`` of every replica all-reduces its
  ``P_split / t + P_replicated`` bytes, the ``t`` rings in parallel.
"""

from __future__ import annotations

from typing import TypedDict
from weakref import WeakKeyDictionary

import numpy as np

from solvers.arrays import FloatArray
from solvers.cost.calibrated import tp_efficiency
from solvers.cost.comm import ring_hop_s
from solvers.cost.compute import ComputeModel
from solvers.model.graph import OpGraph
from solvers.model.plan import ResolvedPlan
from solvers.model.problem import Problem
from solvers.model.tp_rules import SplitLayout, split_layout

_LAYOUTS: WeakKeyDictionary[OpGraph, SplitLayout] = WeakKeyDictionary()


def layout_of(graph: OpGraph) -> SplitLayout:
    """:func:`~solvers.model.tp_rules.split_layout` of ``graph``, computed once per graph."""
    hit = _LAYOUTS.get(graph)
    if hit is None:
        hit = _LAYOUTS[graph] = split_layout(graph)
    return hit


def stage_split_mask(problem: Problem, rp: ResolvedPlan, stage: int) -> np.ndarray | None:
    """Per op: whether stage ``stage`` runs it split ``t`` ways; None when the stage has ``t = 1``."""
    if rp.tp(stage) == 1:
        return None
    return layout_of(problem.graph).split_mask(rp.plan.sequence_parallel)


def _split_compute(compute: ComputeModel, devices: list[int], t: int, replicas: int, split: np.ndarray,
                   backward: bool) -> FloatArray:
    topo = compute.topology
    out: FloatArray | None = None
    for d in devices:
        vec = (compute.bwd_s(d) if backward else compute.fwd_s(d)).copy()
        vec[split] /= t * tp_efficiency(topo, topo.devices[d].kind)
        out = vec if out is None else np.maximum(out, vec)
    assert out is not None
    return np.asarray(out / replicas, dtype=np.float64)


def collective_op_s(problem: Problem, rp: ResolvedPlan, stage: int) -> tuple[FloatArray, FloatArray]:
    """Per op of the graph: seconds of the tensor-parallel collectives stage ``stage`` runs after its
    forward and in its backward (zeros where ``t = 1``); see the module doc."""
    n = problem.graph.n_ops
    fwd, bwd = np.zeros(n), np.zeros(n)
    t = rp.tp(stage)
    if t == 1:
        return fwd, bwd
    lay = layout_of(problem.graph)
    r = rp.replicas(stage)
    out_b, in_b = lay.output_reduce_bytes / r, lay.input_gather_bytes / r
    share = (t - 1) / t
    for group in rp.tp_groups(stage):
        per_byte, lat = ring_hop_s(problem.topology, group)
        # one ring reduce-scatter or all-gather of x bytes: (t-1)/t x / bw + (t-1) lat (0 for no bytes)
        half_in = np.where(in_b > 0, share * in_b * per_byte + (t - 1) * lat, 0.0)
        half_out = np.where(out_b > 0, share * out_b * per_byte + (t - 1) * lat, 0.0)
        if rp.plan.sequence_parallel:  # all-gather + reduce-scatter each way
            f = b = half_in + half_out
        else:  # all-reduce = reduce-scatter + all-gather: row output forward, column input backward
            f, b = 2.0 * half_out, 2.0 * half_in
        fwd, bwd = np.maximum(fwd, f), np.maximum(bwd, b)
    return fwd, bwd


def collective_hop_bytes(problem: Problem, rp: ResolvedPlan, stage: int) -> float:
    """Bytes one micro-batch's tensor-parallel collectives put on each hop of each group's ring."""
    t = rp.tp(stage)
    if t == 1:
        return 0.0
    lay = layout_of(problem.graph)
    ops = rp.stage_ops[stage]
    out_b = float(lay.output_reduce_bytes[ops].sum()) / rp.replicas(stage)
    in_b = float(lay.input_gather_bytes[ops].sum()) / rp.replicas(stage)
    if problem.training:
        return 2.0 * (t - 1) / t * (out_b + in_b)
    return (t - 1) / t * ((out_b + in_b) if rp.plan.sequence_parallel else 2.0 * out_b)


def op_times_s(problem: Problem, rp: ResolvedPlan, compute: ComputeModel) -> tuple[FloatArray, FloatArray]:
    """Per op: forward and backward seconds per micro-batch on its stage's devices, the stage's
    tensor-parallel collectives included (the slowest replica / R, Parmesan Eq. 3)."""
    n = problem.graph.n_ops
    fwd, bwd = np.zeros(n), np.zeros(n)
    for s, (ops, devs) in enumerate(zip(rp.stage_ops, rp.stage_devices, strict=True)):
        split = stage_split_mask(problem, rp, s)
        if split is None:
            fwd[ops] = compute.group_fwd_s(devs)[ops]
            bwd[ops] = compute.group_bwd_s(devs)[ops]
            continue
        t, r = rp.tp(s), rp.replicas(s)
        comm_f, comm_b = collective_op_s(problem, rp, s)
        fwd[ops] = (_split_compute(compute, devs, t, r, split, False) + comm_f)[ops]
        bwd[ops] = (_split_compute(compute, devs, t, r, split, True) + comm_b)[ops]
    return fwd, bwd


def device_compute_s(problem: Problem, rp: ResolvedPlan, compute: ComputeModel, stage: int,
                     device: int) -> tuple[float, float]:
    """Forward and backward compute seconds of one device of ``stage`` for a whole micro-batch (a
    replica's share is ``1/R`` of it); split ops take ``1/(t e)``."""
    ops = rp.stage_ops[stage]
    f, b = compute.fwd_s(device)[ops].copy(), compute.bwd_s(device)[ops].copy()
    split = stage_split_mask(problem, rp, stage)
    if split is not None:
        scale = rp.tp(stage) * tp_efficiency(problem.topology, problem.topology.devices[device].kind)
        f[split[ops]] /= scale
        b[split[ops]] /= scale
    return float(f.sum()), float(b.sum())


def shard_allreduces(problem: Problem, rp: ResolvedPlan, stage: int) -> list[tuple[list[int], float]]:
    """The data-parallel all-reduces of ``stage``: ``(ring, bytes)`` per tensor-parallel rank (one ring
    over all its devices when ``t = 1``)."""
    ops = rp.stage_ops[stage]
    params = problem.graph.param_bytes[ops]
    split = stage_split_mask(problem, rp, stage)
    if split is None:
        return [(list(rp.stage_devices[stage]), float(params.sum()))]
    t = rp.tp(stage)
    shard = float(params[split[ops]].sum()) / t + float(params[~split[ops]].sum())
    return [(ring, shard) for ring in rp.shard_rings(stage)]


class BoundaryMode(TypedDict):
    """Keyword arguments of :func:`~solvers.cost.comm.transfer_pairs` for one stage-to-stage message."""

    src_tp: int
    dst_tp: int
    sharded: bool


def boundary_mode(rp: ResolvedPlan, a: int, b: int) -> BoundaryMode:
    """Keyword arguments of :func:`~solvers.cost.comm.transfer_pairs` for a message from stage ``a``
    to stage ``b``: their degrees, and whether it is sharded (sequence parallelism on a split side)."""
    ta, tb = rp.tp(a), rp.tp(b)
    return BoundaryMode(src_tp=ta, dst_tp=tb, sharded=rp.plan.sequence_parallel and max(ta, tb) > 1)
