"""The incumbent of ``exact``'s search: the best simulated candidate, and the tests every candidate
passes before it is simulated (docs/exact.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from solvers.arrays import BoolArray, FloatArray, IntArray
from solvers.cost.memory import kept_bytes
from solvers.exact.stage_model import StageModel
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.model.ranking import comparison_key_s
from solvers.simulator import simulate


@dataclass
class Best:
    """The best simulated candidate so far and what is known about it."""

    objective_s: float = float("inf")
    key_s: float = float("inf")  # the comparison key (solvers.model.ranking): candidates' micro-batch counts differ
    plan: Plan | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    pruned_shapes: int = 0  # tensor-parallel shapes whose bound cannot beat the incumbent
    idle_candidates: int = 0  # partitions not considered: a stage of inputs and constants only
    idle_shapes: list[str] = field(default_factory=list)  # shapes with more stages than ops that compute


def simulated_metrics(problem: Problem, plan: Plan) -> dict[str, Any] | None:
    """The simulator's metrics of ``plan``, ``None`` where it is invalid (memory)."""
    try:
        return dict(simulate(problem, plan).metrics)
    except InvalidPlan:
        return None


def idles(computes: BoolArray, stage_of: IntArray, n_stages: int) -> bool:
    """Whether some stage of the partition holds no op that computes (``computes[v]``:
    :func:`solvers.runnable.computing_ops`)."""
    return n_stages > 1 and bool((np.bincount(stage_of[computes], minlength=n_stages) == 0).any())


def memory_binds(model: StageModel, capacity: FloatArray, replicas: int, n_stages: int,
                 micro_batches: tuple[int, ...]) -> bool:
    """Whether some stage could exceed its memory (the whole graph on one stage, every in-flight
    micro-batch, every tensor kept, would not)."""
    kept = kept_bytes(float(model.act_bytes.sum()), float(model.edge_bytes.sum()), model.recompute)
    need = float(model.param_bytes.sum()) + (max(micro_batches) * kept + float(model.working_bytes.max(initial=0.0))) / replicas
    return need > float(capacity.min())


def keep_if_faster(problem: Problem, plan: Plan, shape: dict[str, Any], dp_bottleneck_s: float | None, best: Best) -> bool:
    """Simulate ``plan`` and make it ``best`` when strictly faster by the comparison key; its stats are
    ``shape`` and what the DP's bound proves of it."""
    metrics = simulated_metrics(problem, plan)
    key = None if metrics is None else comparison_key_s(metrics, problem.objective, problem.settings.global_batch)
    if metrics is None or key is None or not key < best.key_s:
        return False
    simulated_b = float(metrics["bottleneck_stage_s"])
    best.objective_s, best.key_s = float(metrics["objective_s"]), key
    best.plan = plan
    best.stats = {
        **shape,
        "bottleneck_lower_bound_s": dp_bottleneck_s,
        "simulated_bottleneck_s": simulated_b,
        "bottleneck_optimal": bool(dp_bottleneck_s is not None and simulated_b <= dp_bottleneck_s * (1 + 1e-9) + 1e-15),
        "simulator_lower_bound_s": metrics.get("lower_bound_s"),
    }
    return True


def incumbent_cap_s(problem: Problem, best: Best, mbs: tuple[int, ...]) -> float:
    """The largest DP bottleneck with which a plan can still beat ``best`` for one of ``mbs`` (``inf``
    without one): every micro-batch passes the bottleneck stage, so the iteration takes at least ``MB``
    times it (the premise of :func:`solvers.exact.solver._cannot_win`), compared in the comparison key's unit."""
    if best.plan is None or not mbs:
        return float("inf")
    if problem.settings.global_batch is None:
        return best.key_s * problem.graph.profiled_batch_size
    return max(best.key_s / mb for mb in mbs)
