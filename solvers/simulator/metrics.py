"""The metrics dictionary every simulation returns (docs/simulator.md defines each key)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from solvers.cost.bounds import lower_bound_s
from solvers.cost.calibrated import calibration_digest, group_split_backward, memory_overhead
from solvers.cost.comm import group_transfer_s
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import plan_memory_bytes, plan_schedule, runs_virtual_stages
from solvers.cost.tensor_parallel import boundary_mode, device_compute_s, op_times_s
from solvers.cost.traffic import group_traffic_bytes
from solvers.model.plan import ResolvedPlan
from solvers.model.problem import Problem
from solvers.model.ranking import time_per_sample_s
from solvers.model.schedules import BACKWARD, BACKWARD_INPUT


def stage_times_s(problem: Problem, rp: ResolvedPlan, compute: ComputeModel, split: Sequence[float]) -> list[float]:
    """Per stage, per micro-batch: compute (forward + backward when training, the backward times the stage's
    ``split`` scale, :func:`split_backward_scales`) + outbound communication.

    Communication = one coalesced message per destination stage and direction (forward outputs,
    and in training the gradients returned to the producing stages), each timed by
    :func:`~solvers.cost.comm.group_transfer_s`.
    """
    topo = problem.topology
    out = []
    fwd_op, bwd_op = op_times_s(problem, rp, compute)
    for ops, again, k in zip(rp.stage_ops, rp.recompute, split, strict=True):
        f = float(fwd_op[ops].sum())
        t = f
        if problem.training:
            t += float(bwd_op[ops].sum()) * k + (f if again else 0.0)
        out.append(t)
    for (a, b), size in group_traffic_bytes(problem.graph, rp.stage_of).items():
        out[a] += group_transfer_s(topo, rp.stage_devices[a], rp.stage_devices[b], size, **boundary_mode(rp, a, b))
        if problem.training:
            out[b] += group_transfer_s(topo, rp.stage_devices[b], rp.stage_devices[a], size,
                                       **boundary_mode(rp, b, a))
    return out


def split_backward_scales(problem: Problem, rp: ResolvedPlan) -> list[float]:
    """Per stage, what its backward costs per micro-batch over the backward run whole: ``1 + s (k - 1)``, ``s``
    the share of its micro-batches the plan's schedule runs as ``I`` + ``W`` and ``k`` the calibrated
    ``split_backward`` of its devices' kind (:func:`~solvers.cost.calibrated.split_backward_factor`; 1
    uncalibrated, and for GPipe and 1F1B), as the action-list engine times them."""
    n = len(rp.stage_ops)
    ks = [group_split_backward(problem.topology, devs) for devs in rp.stage_devices]
    if not problem.training or all(k == 1.0 for k in ks) or not runs_virtual_stages(rp.plan):
        return [1.0] * n
    schedule = plan_schedule(rp.plan, n)
    split, whole = [0] * n, [0] * n
    for acts in schedule.actions:
        for a in acts:
            if a.kind == BACKWARD_INPUT:
                split[a.stage] += 1
            elif a.kind == BACKWARD:
                whole[a.stage] += 1
    return [1.0 + (i / (i + b) if i + b else 0.0) * (k - 1.0) for i, b, k in zip(split, whole, ks, strict=True)]


def busy_s(problem: Problem, rp: ResolvedPlan, compute: ComputeModel, micro_batches: int,
           split: Sequence[float]) -> dict[str, float]:
    """Per used device: its own compute seconds per iteration (its op times / R, every micro-batch; a
    tensor-parallel stage's split ops in ``1/t``; summed over the virtual stages it runs); ``split``: each
    stage's :func:`split_backward_scales`."""
    out: dict[str, float] = {}
    for s, (devs, again) in enumerate(zip(rp.stage_devices, rp.recompute, strict=True)):
        for d in devs:
            f, b = device_compute_s(problem, rp, compute, s, d)
            t = f
            if problem.training:
                t += b * split[s] + (f if again else 0.0)
            dev = problem.topology.devices[d].id  # several virtual stages on one device: their sum
            out[dev] = out.get(dev, 0.0) + micro_batches * t / rp.replicas(s)
    return out


def peak_memory_bytes(problem: Problem, rp: ResolvedPlan) -> dict[str, float]:
    """Per used device: its ``base_memory_bytes`` plus the peak bytes from :mod:`solvers.cost.memory`
    (the model resolve_plan checks); on a calibrated topology ``process_bytes + (1 + fraction) *``
    the latter (:mod:`solvers.calibration.apply`)."""
    out: dict[str, float] = {}
    process, fraction = memory_overhead(problem.topology)
    for need, devs in zip(plan_memory_bytes(problem, rp), rp.stage_devices, strict=True):
        for d in devs:
            dev = problem.topology.devices[d]
            tensors = process + (1.0 + fraction) * need if process or fraction else need
            out[dev.id] = dev.base_memory_bytes + tensors
    return out


def build_metrics(problem: Problem, rp: ResolvedPlan, compute: ComputeModel, *, engine: str, iteration_s: float,
                  latency_s: float, traffic: dict[tuple[int, int], float]) -> dict[str, Any]:
    """Assemble the metrics dictionary (JSON-able: str keys, floats, ints, lists)."""
    plan = rp.plan
    mb = plan.micro_batches
    objective_s = iteration_s if problem.objective == "throughput" else latency_s
    split = split_backward_scales(problem, rp)
    stages = stage_times_s(problem, rp, compute, split)
    busy = busy_s(problem, rp, compute, mb, split)
    used = len(busy)
    bubble = 1.0 - sum(busy.values()) / (used * iteration_s) if iteration_s > 0 and used else 0.0
    # recomputation adds work, so the bound counts it only when every stage recomputes
    bound = lower_bound_s(problem, mb, recompute=all(rp.recompute), compute=compute)
    ids = [d.id for d in problem.topology.devices]
    samples = mb * problem.graph.profiled_batch_size
    return {
        "engine": engine,
        "objective_s": objective_s,
        "iteration_s": iteration_s,
        "throughput_samples_per_s": samples / iteration_s if iteration_s > 0 else None,
        "samples_per_iteration": samples,
        "time_per_sample_s": time_per_sample_s(iteration_s, mb, problem.graph.profiled_batch_size),
        "latency_s": latency_s,
        "stage_times_s": stages,
        "bottleneck_stage_s": max(stages, default=0.0),
        "bubble_fraction": max(0.0, bubble),
        "peak_memory_bytes": peak_memory_bytes(problem, rp),
        "busy_s": busy,
        "bytes_per_channel": {f"{ids[a]}->{ids[b]}": x for (a, b), x in sorted(traffic.items())},
        "lower_bound_s": bound,
        "efficiency": bound / objective_s if objective_s > 0 else 1.0,
        "micro_batches": mb,
        "schedule": plan.schedule,
        "virtual_stages": plan.virtual_stages,
        "calibration": calibration_digest(problem.topology),
    }
