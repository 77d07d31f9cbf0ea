"""A slow solver for the service tests, registered as a plugin through entry points.

``sleepy`` waits ``sleep_s`` in small steps, reporting progress, then puts every op on the
first device (one stage).  With ``ignore_budget`` it overruns its time limit, so that the
service's hard wall-clock kill can be tested; with ``child_process`` it starts a process of
its own, as parallel back-ends do; with ``helper_s`` it starts, first, a helper process in a
process group of its own that sleeps that long (as MILP back-ends do), so that tests can check
that nothing a solver started outlives its job.  ``busy`` burns a fixed amount of CPU (load benchmarks).
``lingering`` reports a proven bound at once (the simulator's graph bound of the problem, which holds
for every plan), then waits out its budget reporting it, as a proving member does that ``auto``'s
gap stop should cut short.
"""

from __future__ import annotations

import multiprocessing
import os
import time

from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.simulator import simulate

STEPS = 20


class SleepyOptions(SolverOptions):
    sleep_s: float = 1.0
    ignore_budget: bool = False
    child_process: bool = False
    report_progress: bool = True
    helper_s: float = 0.0


def _helper(sleep_s: float) -> None:
    os.setpgid(0, 0)
    time.sleep(sleep_s)


class SleepySolver:
    name = "sleepy"
    summary = "Test solver: waits, reporting progress, then places every op on the first device"
    objectives = ("throughput", "latency")
    options_type = SleepyOptions
    version = "1"

    def solve(self, problem: Problem, options: SleepyOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        helper = None
        if options.helper_s > 0:
            helper = multiprocessing.get_context("fork").Process(target=_helper, args=(options.helper_s,))
            helper.start()
        for step in range(STEPS):
            if budget.expired() and not options.ignore_budget:
                break
            time.sleep(options.sleep_s / STEPS)
            if options.report_progress:
                progress(ProgressEvent((step + 1) / STEPS, None, None, f"step {step + 1} of {STEPS}"))
        if options.child_process:  # back-ends may run work in processes of their own
            proc = multiprocessing.get_context("fork").Process(target=time.sleep, args=(0.01,))
            proc.start()
            proc.join()
            if proc.exitcode != 0:
                raise RuntimeError(f"the helper process exited with {proc.exitcode}")
        if helper is not None:
            helper.kill()
            helper.join()
        stage = Stage(tuple(problem.graph.ids), (problem.topology.devices[0].id,))
        return Plan(stages=(stage,), micro_batches=problem.micro_batch_candidates[0],
                    schedule=problem.settings.schedule, status="feasible")


class BusyOptions(SolverOptions):
    iterations: int = 5_000_000


class BusySolver:
    """Test solver for CPU-bound load: a fixed number of pure-Python loop iterations (one core),
    then every op on the first device."""

    name = "busy"
    summary = "Test solver: burns a fixed amount of CPU, then places every op on the first device"
    objectives = ("throughput", "latency")
    options_type = BusyOptions
    version = "1"

    def solve(self, problem: Problem, options: BusyOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        total = 0
        for i in range(options.iterations):
            total ^= i
        stage = Stage(tuple(problem.graph.ids), (problem.topology.devices[0].id,))
        return Plan(stages=(stage,), micro_batches=problem.micro_batch_candidates[0], status="feasible",
                    stats={"checksum": total})


class LingeringSolver:
    name = "lingering"
    summary = "Test solver: reports the graph bound, then waits out its budget; every op on the first device"
    objectives = ("throughput", "latency")
    options_type = SolverOptions
    version = "1"

    def solve(self, problem: Problem, options: SolverOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        stage = Stage(tuple(problem.graph.ids), (problem.topology.devices[0].id,))
        plan = Plan(stages=(stage,), micro_batches=problem.micro_batch_candidates[0], status="feasible")
        bound_s = simulate(problem, plan).metrics["lower_bound_s"]  # the graph's: it holds for every plan
        while not budget.expired():
            progress(ProgressEvent(0.0, None, bound_s, "proving"))
            time.sleep(0.1)
        return plan
