"""A solver whose module takes :data:`LOAD_S` to load, as a back-end with heavy dependencies does
on a loaded machine (tests/solvers/test_solve_limit.py).  :class:`SlowLoadingEven` is the
registry's ``even`` that spends the whole time it is given before it answers, so the call ends
at its limit only if the limit counts the loading."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from solvers.base import Budget, ProgressCallback, SolverOptions
from solvers.baselines.even import EvenOptions, EvenSolver
from solvers.model.plan import Plan
from solvers.model.problem import Problem

LOAD_S = 1.5
time.sleep(LOAD_S)  # the module's loading


class SlowLoadingEven:
    name: ClassVar[str] = "slow-loading-even"
    summary: ClassVar[str] = "even, after a slow module load, using all of its budget"
    objectives: ClassVar[tuple[str, ...]] = ("throughput",)
    options_type: ClassVar[type[SolverOptions]] = EvenOptions
    version: ClassVar[str] = "1"

    def solve(self, problem: Problem, options: Any, budget: Budget, progress: ProgressCallback) -> Plan:
        plan = EvenSolver().solve(problem, options, budget, progress)
        time.sleep(budget.remaining_s())
        return plan
