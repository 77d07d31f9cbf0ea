"""OR-Tools MPSolver back-end: the linear model solved by CBC, SCIP or HiGHS.

The warm start reaches the engine as a hint (``SetHint``; used by SCIP, ignored by CBC) and,
for every engine, as the cut-off ``cmax <= horizon`` built into the model.  HiGHS gets no hint:
``SetHint`` on OR-Tools 9.15's HiGHS interface crashes the process.
"""

from __future__ import annotations

import math
from typing import Any

from solvers.model.errors import require
from solvers.moirai.backends.result import BackendResult, Report
from solvers.moirai.linear_model import LinearModel

ENGINES = {"cbc": "CBC", "scip": "SCIP", "highs": "HIGHS"}
RELATIVE_GAP = 1e-7


def solve_mpsolver(model: LinearModel, engine: str, time_limit_s: float, threads: int, seed: int,
                   report: Report) -> BackendResult:
    """Solve ``model`` with MPSolver's ``engine``; the status comes from the engine's own proof."""
    pywraplp: Any = require("ortools.linear_solver.pywraplp", "milp")
    solver = pywraplp.Solver.CreateSolver(ENGINES[engine])
    if solver is None:
        return BackendResult("unknown", message=f"OR-Tools has no {ENGINES[engine]} solver in this build")
    inf = solver.infinity()
    xs = [solver.IntVar(lb, ub, name) if integer else solver.NumVar(lb, ub, name)
          for name, lb, ub, integer in zip(model.names, model.lb, model.ub, model.integer, strict=True)]
    for terms, lb, ub in model.rows:
        ct = solver.RowConstraint(-inf if math.isinf(lb) else lb, inf if math.isinf(ub) else ub, "")
        for v, c in terms:
            ct.SetCoefficient(xs[v], c)
    objective = solver.Objective()
    for v, c in model.objective.items():
        objective.SetCoefficient(xs[v], c)
    objective.SetMinimization()
    solver.SuppressOutput()
    if model.hint and engine != "highs":  # SetHint crashes the HiGHS interface of OR-Tools 9.15
        keys = sorted(model.hint)
        solver.SetHint([xs[v] for v in keys], [model.hint[v] for v in keys])
    solver.SetTimeLimit(max(1, int(time_limit_s * 1000)))
    if engine != "highs":
        solver.SetNumThreads(max(1, threads))
    if engine == "scip":
        solver.SetSolverSpecificParametersAsString(f"randomization/randomseedshift = {seed}\n")
    params = pywraplp.MPSolverParameters()
    params.SetDoubleParam(params.RELATIVE_MIP_GAP, RELATIVE_GAP)
    status = solver.Solve(params)
    if status == pywraplp.Solver.INFEASIBLE:
        return BackendResult("infeasible", message="the engine proved the model infeasible")
    if status not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return BackendResult("unknown", message=f"no solution (MPSolver status {status})")
    value = objective.Value()
    bound = objective.BestBound()
    bound = None if bound is None or math.isinf(bound) or math.isnan(bound) else min(bound, value)
    if status == pywraplp.Solver.OPTIMAL and bound is None:
        bound = value
    report(value, bound)
    return BackendResult("optimal" if status == pywraplp.Solver.OPTIMAL else "feasible",
                         [x.solution_value() for x in xs], value, bound)
