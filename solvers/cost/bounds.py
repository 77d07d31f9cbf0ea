"""Lower bounds on a problem's objective: the physical limit efficiency is reported against.

Every bound holds for *every* plan :func:`~solvers.validity.resolve_plan` accepts, whatever
its stages, replicas, micro-batch schedule or communication (docs/simulator.md gives the proofs).

The total-work bound (``MB`` micro-batches): a replica group
runs its tasks one at a time, so the iteration lasts at least the group's compute.  With speeds
only, op ``v`` on a group ``g`` of ``R`` devices takes ``max_d t_v / speed_d / R >= t_v / sum_g
speed``; summing over groups gives ``MB * sum_v w_v / sum_d speed_d`` with ``w_v = fwd + bwd
(+ fwd with recomputation)``.  With per-kind ``times`` overrides: ``MB * sum_v min_d w_dv / D``.

Both objectives take the max of
* the work bound (latency: ``MB`` defaults to 1, backward only in a training pass), and
* the critical path of one micro-batch with zero communication, each op at its fastest possible
  time.  Throughput: its fastest group time ``min_R (R-th smallest w_dv over devices) / R`` — a
  group of ``R`` replicas divides an op's time by ``R`` (Parmesan Eq. 3), so without this the
  bound would not hold for replicated groups.  Latency: its fastest device time ``min_d w_dv``,
  since a latency plan puts each op on one device (the validity rule
  :func:`~solvers.model.plan.check_one_device_per_op`).  In a training pass a path is its
  forward chain then its backward chain, so op ``v`` counts ``fwd + bwd`` (both run on the same
  device or group).  An iteration contains micro-batch 0's forward and backward, so the bound
  holds for throughput too (it matters when device speeds differ: with equal speeds it never
  exceeds the work bound).

A training pass on a calibrated topology adds the step overhead's fixed part
(:func:`~solvers.cost.calibrated.step_overhead_s`): every iteration ends with it, whatever the plan.
"""

from __future__ import annotations

import numpy as np

from solvers.arrays import FloatArray
from solvers.cost.calibrated import step_overhead_s
from solvers.cost.compute import ComputeModel
from solvers.model.problem import Problem


def lower_bound_s(problem: Problem, micro_batches: int | None = None, *, recompute: bool | None = None,
                  compute: ComputeModel | None = None) -> float:
    """A proven lower bound on the objective of any valid plan (see the module doc).

    ``micro_batches``: the plan's micro-batch count (default: the first candidate of the
    settings for throughput, 1 for latency).  ``recompute``: whether the plan recomputes
    activations (default: the problem's setting).  ``compute``: the problem's compute model,
    when the caller has one.
    """
    throughput = problem.objective == "throughput"
    if micro_batches is None:
        micro_batches = problem.micro_batch_candidates[0] if throughput else 1
    recompute = problem.settings.recomputes if recompute is None else recompute
    training = problem.training
    if compute is None:
        compute = ComputeModel(problem.graph, problem.topology)
    work = work_bound_s(problem, compute, micro_batches, training, recompute)
    # a calibrated training iteration ends with the step overhead, at least its fixed part
    step_s = step_overhead_s(problem.topology, 0.0) if training else 0.0
    return max(work, critical_path_bound_s(problem, compute, training, recompute)) + step_s


def _has_overrides(problem: Problem) -> bool:
    kinds = {d.kind for d in problem.topology.devices}
    return any(n.times and not kinds.isdisjoint(n.times) for n in problem.graph.nodes)


def _work_per_op(fwd: FloatArray, bwd: FloatArray, training: bool, recompute: bool) -> FloatArray:
    if not training:
        return fwd
    return fwd + bwd + (fwd if recompute else 0.0)


def work_bound_s(problem: Problem, compute: ComputeModel, micro_batches: int, training: bool,
                 recompute: bool) -> float:
    """Total work over total capacity (see the module doc)."""
    g, topo = problem.graph, problem.topology
    if not _has_overrides(problem):
        work = _work_per_op(g.fwd_s, g.bwd_s, training, recompute)
        return float(micro_batches * work.sum() / topo.speed.sum())
    best = np.full(g.n_ops, np.inf)
    for d in _device_classes(problem):
        best = np.minimum(best, _work_per_op(compute.fwd_s(d), compute.bwd_s(d), training, recompute))
    return float(micro_batches * best.sum() / topo.n_devices)


def _device_classes(problem: Problem) -> dict[int, int]:
    """One representative device per (kind, speed) class -> number of devices in the class."""
    first: dict[tuple[str, float], int] = {}
    count: dict[int, int] = {}
    for i, dev in enumerate(problem.topology.devices):
        rep = first.setdefault((dev.kind, dev.speed), i)
        count[rep] = count.get(rep, 0) + 1
    return count


def fastest_group_s(problem: Problem, compute: ComputeModel, training: bool, recompute: bool) -> FloatArray:
    """Per op: the least time any replica group can take for it (``min_R w_(R) / R``)."""
    classes = _device_classes(problem)
    reps = list(classes)
    # times[c, v] = w of op v on class c; counts[c] = devices in class c
    times = np.stack([_work_per_op(compute.fwd_s(d), compute.bwd_s(d), training, recompute) for d in reps])
    counts = np.array([classes[d] for d in reps], dtype=np.float64)
    order = np.argsort(times, axis=0, kind="stable")
    sorted_times = np.take_along_axis(times, order, axis=0)
    cum = np.cumsum(counts[order], axis=0)  # cum[j, v] = devices at least as fast as the j-th class for v
    return np.asarray((sorted_times / cum).min(axis=0), dtype=np.float64)


def fastest_device_s(problem: Problem, compute: ComputeModel, training: bool, recompute: bool) -> FloatArray:
    """Per op: the least time any one device takes for it (``min_d w_dv``)."""
    times = [_work_per_op(compute.fwd_s(d), compute.bwd_s(d), training, recompute) for d in _device_classes(problem)]
    return np.asarray(np.min(np.stack(times), axis=0), dtype=np.float64)


def critical_path_bound_s(problem: Problem, compute: ComputeModel, training: bool, recompute: bool) -> float:
    """Longest path with free communication and every op at its fastest group time (throughput) or
    its fastest device time (latency: one device per op)."""
    g = problem.graph
    fastest = fastest_group_s if problem.objective == "throughput" else fastest_device_s
    cost = fastest(problem, compute, training, recompute).tolist()
    finish = [0.0] * g.n_ops  # finish[v] = longest path ending with op v
    pred = g.pred
    for v in g.topo_order.tolist():
        start = 0.0
        for u in pred[v]:
            if finish[u] > start:
                start = finish[u]
        finish[v] = start + cost[v]
    return max(finish)
