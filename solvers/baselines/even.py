"""``even``: contiguous split along a topological order balancing compute, consecutive mapping.

Throughput: ``S`` stages of ``R`` replicas (from the settings, or the best simulated ``S``
among a few candidates when not fixed); stage ``s`` runs on devices ``s*R .. s*R+R-1`` in
topology order.  Latency: one chunk per device, in device order.  The balance uses the
reference-device times (forward + backward for training), as the classic baseline does.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.model.ranking import comparison_key_s
from solvers.partition.even import even_plan
from solvers.partition.shapes import replicas_fit
from solvers.simulator import simulate


class EvenOptions(SolverOptions):
    """The even split has no options."""


def _stage_candidates(problem: Problem, replicas: int) -> list[int]:
    most = min(problem.topology.n_devices // replicas, problem.graph.n_ops)
    if problem.settings.stages is not None:
        return [problem.settings.stages]
    powers = [1 << i for i in range(most.bit_length()) if (1 << i) <= most]
    return sorted(set(powers) | {most})


class EvenSolver:
    name: ClassVar[str] = "even"
    summary: ClassVar[str] = "Contiguous topological split balancing compute, consecutive device mapping"
    objectives: ClassVar[tuple[str, ...]] = ("throughput", "latency")
    options_type: ClassVar[type[SolverOptions]] = EvenOptions
    version: ClassVar[str] = "1"
    # its solve takes about one virtual-stage cut and simulation: the schedule search simulates the first
    # candidate that fits only (solvers.partition.schedules.ESTIMATE_MARGIN), within its 2x time budget
    schedule_search_first_fit: ClassVar[bool] = True

    def solve(self, problem: Problem, options: EvenOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        if problem.objective == "latency":
            candidates = [(min(problem.topology.n_devices, problem.graph.n_ops), 1, 1)]
        else:
            replicas = problem.settings.replicas or 1
            candidates = [(s, replicas, mb) for s in _stage_candidates(problem, replicas)
                          for mb in problem.micro_batch_candidates if replicas_fit(problem, replicas, mb)]
        best: Plan | None = None
        best_key = np.inf
        rejected = 0
        for i, (stages, replicas, mb) in enumerate(candidates):
            if best is not None and budget.expired():
                break
            plan = even_plan(problem, stages, replicas, mb)
            try:
                metrics = simulate(problem, plan).metrics
            except InvalidPlan:
                rejected += 1
                continue
            key = comparison_key_s(metrics, problem.objective, problem.settings.global_batch)
            improved = best is None or (key is not None and key < best_key)  # per sample: micro-batch counts compare
            if improved:
                best, best_key = plan.with_(claimed_objective_s=float(metrics["objective_s"])), key or np.inf
            assert best is not None
            progress(ProgressEvent((i + 1) / len(candidates), best.claimed_objective_s, None,
                                   plan=best.with_(status="feasible") if improved else None))
        stats = {"candidates": len(candidates), "rejected_for_memory": rejected}
        if best is None:
            why = ("no even split fits the devices' memory" if candidates else
                   f"settings.replicas: {problem.settings.replicas} replicas split no candidate micro-batch's rows evenly")
            return Plan(stages=(), status="infeasible", stats=stats, notes=(why,))
        return best.with_(stats=stats)
