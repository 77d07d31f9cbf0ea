"""PuLP back-end: the linear model solved by PuLP's bundled CBC (``pulp-cbc``).

PuLP sets ``LpStatusOptimal`` whenever CBC returns a solution, also after a time limit; the
honest status comes from ``sol_status`` (``LpSolutionIntegerFeasible`` = stopped with a
solution) and from CBC's own ``Result -`` line in its log, which also gives the proven bound.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import warnings
from typing import Any

from solvers.model.errors import require
from solvers.moirai.backends.result import BackendResult, Report
from solvers.moirai.linear_model import LinearModel

RELATIVE_GAP = 1e-7


def _log_summary(path: str) -> tuple[str | None, float | None]:
    """CBC's ``Result - ...`` line and its ``Lower bound:`` (or ``Objective value:`` when optimal)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None, None
    result = re.findall(r"^Result - (.*)$", text, re.MULTILINE)
    bound = re.findall(r"^Lower bound:\s*([-+0-9.eE]+)", text, re.MULTILINE)
    return (result[-1].strip() if result else None), (float(bound[-1]) if bound else None)


def solve_pulp(model: LinearModel, time_limit_s: float, threads: int, report: Report) -> BackendResult:
    """Solve ``model`` with PuLP + CBC, warm-started from the model's hint."""
    pulp: Any = require("pulp", "milp")
    prob = pulp.LpProblem("moirai", pulp.LpMinimize)
    xs = [pulp.LpVariable(f"v{i}", lowBound=lb, upBound=ub, cat="Integer" if integer else "Continuous")
          for i, (lb, ub, integer) in enumerate(zip(model.lb, model.ub, model.integer, strict=True))]
    prob += pulp.lpSum(c * xs[v] for v, c in model.objective.items())
    for r, (terms, lb, ub) in enumerate(model.rows):
        expr = pulp.lpSum(c * xs[v] for v, c in terms)
        if lb == ub:
            prob += (expr == lb, f"r{r}")
            continue
        if not math.isinf(lb):
            prob += (expr >= lb, f"r{r}l")
        if not math.isinf(ub):
            prob += (expr <= ub, f"r{r}u")
    for v, value in model.hint.items():
        xs[v].setInitialValue(round(value) if model.integer[v] else value)
    with tempfile.TemporaryDirectory(prefix="moirai-pulp-") as tmp:
        log = os.path.join(tmp, "cbc.log")
        cmd = pulp.PULP_CBC_CMD(msg=False, timeLimit=max(1, int(time_limit_s)), gapRel=RELATIVE_GAP,
                                warmStart=bool(model.hint), threads=max(1, threads), logPath=log, keepFiles=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prob.solve(cmd)
        result_line, bound = _log_summary(log)
    sol = prob.sol_status
    if sol == pulp.LpSolutionInfeasible:
        return BackendResult("infeasible", message=f"CBC: {result_line or 'infeasible'}")
    if sol not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        return BackendResult("unknown", message=f"CBC: {result_line or 'no solution'}")
    values = [float(x.varValue) if x.varValue is not None else 0.0 for x in xs]
    value = float(pulp.value(prob.objective))
    proved = sol == pulp.LpSolutionOptimal and (result_line is None or result_line.startswith("Optimal"))
    if proved:
        bound = value if bound is None else min(bound, value)
    elif bound is not None:
        bound = min(bound, value)
    report(value, bound)
    return BackendResult("optimal" if proved else "feasible", values, value, bound,
                         message=f"CBC: {result_line or ''} (PuLP status {pulp.LpStatus[prob.status]})")
