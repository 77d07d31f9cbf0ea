"""Portfolio members for the tests of ``auto`` on a loaded machine (tests/solvers/test_portfolio_stream.py).

:class:`LateMoirai` and :class:`LateParmesan` are the registry's ``moirai`` and ``parmesan``
run within the time they are given, their incumbents reported as they are found, whose answer
then comes too late: they hold it back until ``auto`` kills them at its deadline, as a member
does on a machine slower than its clock.  :class:`EagerLate` streams ``even``'s plan as its
incumbent at once, then holds its answer back the same way (a member that finds nothing
better); :class:`SilentLate` sends nothing and holds ``even``'s plan back (a member still
computing its first answer).  :func:`spin` is a busy loop for a CPU hog.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.baselines.even import EvenOptions, EvenSolver
from solvers.composed.moirai import MoiraiWithWarmStart
from solvers.composed.parmesan import ParmesanWithSafetyNet
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.moirai.options import MoiraiOptions
from solvers.parmesan.solver import ParmesanOptions

HOLD_S = 60.0  # how long a late member holds its answer back (auto kills it long before)


def spin(until: float) -> None:
    """Burn a core until ``until`` (``time.monotonic``)."""
    x = 0
    while time.monotonic() < until:
        x += 1


def _hold(plan: Plan) -> Plan:
    time.sleep(HOLD_S)
    return plan


class LateMoirai:
    name: ClassVar[str] = "late-moirai"
    summary: ClassVar[str] = "moirai whose answer comes after auto's deadline"
    objectives: ClassVar[tuple[str, ...]] = ("latency",)
    options_type: ClassVar[type[SolverOptions]] = MoiraiOptions
    version: ClassVar[str] = "1"

    def solve(self, problem: Problem, options: Any, budget: Budget, progress: ProgressCallback) -> Plan:
        return _hold(MoiraiWithWarmStart().solve(problem, options, budget, progress))


class LateParmesan:
    name: ClassVar[str] = "late-parmesan"
    summary: ClassVar[str] = "parmesan whose answer comes after auto's deadline"
    objectives: ClassVar[tuple[str, ...]] = ("throughput",)
    options_type: ClassVar[type[SolverOptions]] = ParmesanOptions
    version: ClassVar[str] = "1"

    def solve(self, problem: Problem, options: Any, budget: Budget, progress: ProgressCallback) -> Plan:
        return _hold(ParmesanWithSafetyNet().solve(problem, options, budget, progress))


class EagerLate:
    name: ClassVar[str] = "eager-late"
    summary: ClassVar[str] = "even's plan streamed at once, the answer held back past auto's deadline"
    objectives: ClassVar[tuple[str, ...]] = ("throughput",)
    options_type: ClassVar[type[SolverOptions]] = EvenOptions
    version: ClassVar[str] = "1"

    def solve(self, problem: Problem, options: Any, budget: Budget, progress: ProgressCallback) -> Plan:
        plan = EvenSolver().solve(problem, options, budget, progress)
        progress(ProgressEvent(1.0, plan.claimed_objective_s, None, "incumbent", plan=plan))
        return _hold(plan)


class SilentLate(EagerLate):
    name: ClassVar[str] = "silent-late"
    summary: ClassVar[str] = "even's plan held back past auto's deadline, no incumbent streamed"

    def solve(self, problem: Problem, options: Any, budget: Budget, progress: ProgressCallback) -> Plan:
        return _hold(EvenSolver().solve(problem, options, budget, lambda event: None))


LATE = {"late-moirai": f"{__name__}:LateMoirai", "late-parmesan": f"{__name__}:LateParmesan",
        "eager-late": f"{__name__}:EagerLate", "silent-late": f"{__name__}:SilentLate"}
