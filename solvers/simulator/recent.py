"""The last few simulations of one problem, so the same plan is not simulated twice.

A solver scores its finalists with :func:`~solvers.simulator.simulate`, and ``solve`` then
attaches the metrics of the plan it returns (:func:`solvers.solving.finish_plan`), which is one
of those finalists with other stats, notes and status.  What the simulator reads of a plan is
its stages (with their tensor-parallel degrees), their order, micro-batches, schedule, virtual
stages, recomputation and sequence parallelism
(:func:`plan_key`); everything else a solver or ``solve`` stamps on it leaves the result as it
was.  At 36,352 ops (Celeritas, docs/benchmarks.md) the second simulation was a fifth of the
whole call.

Only the most recent problem is remembered (by identity, held weakly: a problem dropped by its
caller drops its results), with its last :data:`KEPT` results.  Each caller gets its own copy
of the metrics.
"""

from __future__ import annotations

import copy
import threading
import weakref
from typing import Any

from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.simulator.result import SimulationResult

KEPT = 8

PlanKey = tuple[Any, ...]


def plan_key(plan: Plan) -> PlanKey:
    """The fields of ``plan`` the simulator reads: equal keys, equal results on one problem."""
    return (plan.stages, plan.order, plan.micro_batches, plan.schedule, plan.virtual_stages, plan.recompute,
            plan.sequence_parallel)


class RecentResults:
    """The last :data:`KEPT` simulation results of the most recent problem (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._problem: weakref.ref[Problem] | None = None
        self._entries: list[tuple[PlanKey, SimulationResult]] = []

    def get(self, problem: Problem, key: PlanKey) -> SimulationResult | None:
        """A copy of the result remembered for ``key`` on ``problem``, or ``None``."""
        with self._lock:
            if self._problem is None or self._problem() is not problem:
                return None
            for k, result in self._entries:
                if k == key:
                    return SimulationResult(copy.deepcopy(result.metrics), None)
        return None

    def put(self, problem: Problem, key: PlanKey, result: SimulationResult) -> None:
        """Remember ``result`` (metrics only) for ``key`` on ``problem``; another problem starts afresh."""
        kept = SimulationResult(copy.deepcopy(result.metrics), None)
        with self._lock:
            if self._problem is None or self._problem() is not problem:
                self._problem = weakref.ref(problem, self._dropped)
                self._entries = []
            others = [(k, r) for k, r in self._entries if k != key]
            self._entries = [*others[max(0, len(others) - KEPT + 1):], (key, kept)]

    def _dropped(self, ref: weakref.ref[Problem]) -> None:
        """The remembered problem was collected: its results go with it (no lock: called by the collector)."""
        if self._problem is ref:
            self._entries = []

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every result."""
        with self._lock:
            self._problem = None
            self._entries = []
