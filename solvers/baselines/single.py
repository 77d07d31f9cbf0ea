"""``single``: the whole graph on the fastest device that can hold it (latency objective)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import capacity_bytes, device_memory_bytes
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.simulator import simulate


class SingleOptions(SolverOptions):
    """The single-device baseline has no options."""


class SingleSolver:
    name: ClassVar[str] = "single"
    summary: ClassVar[str] = "Everything on the fastest device that fits, in topological order"
    objectives: ClassVar[tuple[str, ...]] = ("latency",)
    options_type: ClassVar[type[SolverOptions]] = SingleOptions
    version: ClassVar[str] = "1"

    def solve(self, problem: Problem, options: SingleOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        g, topo = problem.graph, problem.topology
        compute = ComputeModel(g, topo)
        all_ops = np.arange(g.n_ops)
        need = device_memory_bytes(problem, all_ops)
        fits = [d for d in range(topo.n_devices) if need <= capacity_bytes(problem, d, 0)]
        if not fits:
            return Plan(stages=(), status="infeasible",
                        notes=(f"no device holds the whole graph ({need / 2**30:.3f} GiB needed)",))

        def total_s(d: int) -> float:
            t = float(compute.fwd_s(d).sum())
            return t + float(compute.bwd_s(d).sum()) if problem.training else t

        best = min(fits, key=lambda d: (total_s(d), d))
        dev = topo.devices[best].id
        ops = tuple(g.nodes[int(v)].id for v in g.topo_order)
        plan = Plan(stages=(Stage(ops, (dev,)),), micro_batches=1, schedule=problem.settings.own_schedule,
                    status="feasible", order={dev: ops}, stats={"device": dev, "fitting_devices": len(fits)})
        objective_s = float(simulate(problem, plan).metrics["objective_s"])
        progress(ProgressEvent(1.0, objective_s, None))
        return plan.with_(claimed_objective_s=objective_s)
