"""A slow solver for the service tests, registered as a plugin through entry points.

``sleepy`` waits ``sleep_s`` in small steps, reporting progress, then puts every op on the
first device (one stage).  With ``ignore_budget`` it overruns its time limit, so that the
service's hard wall-clock kill can be tested.
"""

from __future__ import annotations

import time

from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem

STEPS = 20


class SleepyOptions(SolverOptions):
    sleep_s: float = 1.0
    ignore_budget: bool = False


class SleepySolver:
    name = "sleepy"
    summary = "Test solver: waits, reporting progress, then places every op on the first device"
    objectives = ("throughput", "latency")
    options_type = SleepyOptions
    version = "1"

    def solve(self, problem: Problem, options: SleepyOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        for step in range(STEPS):
            if budget.expired() and not options.ignore_budget:
                break
            time.sleep(options.sleep_s / STEPS)
            progress(ProgressEvent((step + 1) / STEPS, None, None, f"step {step + 1} of {STEPS}"))
        stage = Stage(tuple(problem.graph.ids), (problem.topology.devices[0].id,))
        return Plan(stages=(stage,), micro_batches=problem.settings.micro_batches[0], status="feasible")
