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
caller drops its results), with its last :data:`KEPT` results.  A problem that differs from it
only in the settings the simulator does not read (:data:`SCHEDULE_CHOICE`: ``solve`` runs a
solver on a copy with GPipe or 1F1B in place of ``auto``, :func:`solvers.partition.schedules.base_settings`)
shares its results.  Each caller gets its own copy of the metrics.
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
SCHEDULE_CHOICE = ("schedule", "virtual_stages", "max_tp")
"""Settings the simulator does not read: a plan states its own schedule, virtual stages and tensor-parallel degrees."""

PlanKey = tuple[Any, ...]


def plan_key(plan: Plan) -> PlanKey:
    """The fields of ``plan`` the simulator reads: equal keys, equal results on one problem."""
    return (plan.stages, plan.order, plan.micro_batches, plan.schedule, plan.virtual_stages, plan.recompute,
            plan.sequence_parallel)


def same_simulation(a: Problem, b: Problem) -> bool:
    """Whether every plan simulates alike on ``a`` and ``b``: one problem, or the same graph and topology
    objects and objective with settings that differ at most in :data:`SCHEDULE_CHOICE`."""
    if a is b:
        return True
    if a.graph is not b.graph or a.topology is not b.topology or a.objective != b.objective:
        return False
    left, right = dict(a.settings), dict(b.settings)
    for name in SCHEDULE_CHOICE:
        left.pop(name)
        right.pop(name)
    return left == right


class RecentResults:
    """The last :data:`KEPT` simulation results of the most recent problem (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._problem: weakref.ref[Problem] | None = None
        self._entries: list[tuple[PlanKey, SimulationResult]] = []

    def get(self, problem: Problem, key: PlanKey) -> SimulationResult | None:
        """A copy of the result remembered for ``key`` on ``problem``, or ``None``."""
        with self._lock:
            remembered = self._problem() if self._problem is not None else None
            if remembered is None or not same_simulation(remembered, problem):
                return None
            for k, result in self._entries:
                if k == key:
                    return SimulationResult(copy.deepcopy(result.metrics), None)
        return None

    def put(self, problem: Problem, key: PlanKey, result: SimulationResult) -> None:
        """Remember ``result`` (metrics only) for ``key`` on ``problem``; another problem starts afresh, one
        that simulates alike (:func:`same_simulation`) keeps the results and is remembered in its place."""
        kept = SimulationResult(copy.deepcopy(result.metrics), None)
        with self._lock:
            remembered = self._problem() if self._problem is not None else None
            if remembered is not problem:
                if remembered is None or not same_simulation(remembered, problem):
                    self._entries = []
                self._problem = weakref.ref(problem, self._dropped)
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
