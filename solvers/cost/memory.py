"""Memory model (docs/cost-model.md; Parmesan Appendix C, Eq. 14 for recomputation).

Throughput plans, per device of stage ``s`` (``R`` replicas, ``k`` micro-batches in flight):

* parameters ``P_s * (1 + optimizer_bytes_per_param_byte)`` (every replica holds all of them);
* without recomputation: activations ``k * A_s / R`` plus the largest single-op working memory
  ``max_v max(mem_fwd, mem_bwd) / R``;
* with recomputation: only the stage-boundary inputs ``k * B_s / R`` are kept, plus the largest
  single-op working memory ``/ R``.

``k`` is ``MB`` for GPipe and ``min(S - s, MB)`` for 1F1B (``s`` counted from 0).

Latency plans, per device holding ops ``O``: parameters (times ``1 + optimizer`` in a training
pass), plus ``sum(act_bytes)`` of ``O`` (outputs kept; kept for backward in training), plus the
largest single-op working memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from solvers.arrays import IntArray
from solvers.cost.traffic import group_input_bytes
from solvers.model.problem import Problem

if TYPE_CHECKING:
    from solvers.model.plan import ResolvedPlan



def in_flight_micro_batches(schedule: str, n_stages: int, stage: int, micro_batches: int) -> int:
    """Micro-batches whose activations a stage holds at its peak (GPipe: all; 1F1B: S - s)."""
    if schedule == "gpipe":
        return micro_batches
    return max(1, min(n_stages - stage, micro_batches))


def capacity_bytes(problem: Problem, device: int, stage: int | None = None) -> float:
    """Usable memory of a device: its memory less the headroom, capped per stage if set."""
    cap = float(problem.topology.devices[device].memory_bytes) * (1.0 - problem.settings.memory_headroom)
    if stage is not None and stage in problem.settings.stage_memory_caps_bytes:
        cap = min(cap, float(problem.settings.stage_memory_caps_bytes[stage]))
    return cap


def param_bytes_factor(problem: Problem) -> float:
    """Bytes a latency plan holds per parameter byte: ``1 + optimizer`` in a training pass, else 1."""
    return 1.0 + problem.settings.optimizer_bytes_per_param_byte if problem.training else 1.0


def _working_bytes(problem: Problem, ops: IntArray) -> float:
    g = problem.graph
    if len(ops) == 0:
        return 0.0
    return float(np.maximum(g.mem_fwd_bytes[ops], g.mem_bwd_bytes[ops]).max())


def stage_memory_bytes(problem: Problem, ops: IntArray, n_replicas: int, in_flight: int,
                       boundary_input_bytes: float, recompute: bool | None = None) -> float:
    """Peak bytes on each device of a pipeline stage holding ``ops`` (see module doc)."""
    g = problem.graph
    s = problem.settings
    recompute = s.recompute if recompute is None else recompute
    params = float(g.param_bytes[ops].sum()) * (1.0 + s.optimizer_bytes_per_param_byte)
    kept = boundary_input_bytes if recompute else float(g.act_bytes[ops].sum())
    return params + (in_flight * kept + _working_bytes(problem, ops)) / n_replicas


def device_memory_bytes(problem: Problem, ops: IntArray, n_replicas: int = 1) -> float:
    """Peak bytes on each device of a latency-plan group holding ``ops`` (see module doc)."""
    g = problem.graph
    params = float(g.param_bytes[ops].sum()) * param_bytes_factor(problem)
    return params + (float(g.act_bytes[ops].sum()) + _working_bytes(problem, ops)) / n_replicas


def plan_memory_bytes(problem: Problem, rp: ResolvedPlan) -> list[float]:
    """Per stage: peak bytes on each of its devices (throughput or latency model, see module doc)."""
    plan = rp.plan
    if problem.objective != "throughput":
        return [device_memory_bytes(problem, ops, len(devs)) for ops, devs in zip(rp.stage_ops, rp.stage_devices,
                                                                                  strict=True)]
    inputs = group_input_bytes(problem.graph, rp.stage_of, rp.n_stages)
    return [stage_memory_bytes(problem, ops, len(devs),
                               in_flight_micro_batches(plan.schedule, rp.n_stages, s, plan.micro_batches),
                               float(inputs[s]), plan.recompute)
            for s, (ops, devs) in enumerate(zip(rp.stage_ops, rp.stage_devices, strict=True))]
