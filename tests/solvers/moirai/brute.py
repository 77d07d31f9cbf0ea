"""Brute force over every placement and every per-device order, scored by the shared simulator."""

from __future__ import annotations

from solvers.model.errors import InvalidPlan
from solvers.model.problem import Problem
from solvers.simulator import simulate
from tests.solvers.moirai.tiny import candidates, linear_extensions, plan_of


def brute_force_latency_s(problem: Problem) -> float:
    """The least simulated latency over all placements that fit and all orders."""
    orders = linear_extensions(problem.graph)
    best = float("inf")
    for device_of in candidates(problem):
        seen: set[tuple[tuple[str, tuple[str, ...]], ...]] = set()
        for order in orders:
            plan = plan_of(problem, device_of, order)
            key = tuple(sorted((plan.order or {}).items()))
            if key in seen:
                continue
            seen.add(key)
            try:
                best = min(best, float(simulate(problem, plan).metrics["latency_s"]))
            except InvalidPlan:  # over a device's memory
                break
    return best
