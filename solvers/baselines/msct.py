"""``m-sct``: Baechi's memory-constrained Small Communication Time placement (Jeon et al.,
SoCC'20, §4.3; SCT: Hanen & Munier 1995).

1. Favourite children from the SCT linear program, solved through OR-Tools (HiGHS by default,
   or GLOP; ``relaxation=False`` solves it as an ILP with SCIP).  Variables: ``s_v`` start of
   op ``v``; ``x_e`` in [0, 1] per edge ``e = (u, v)``, 0 meaning "v is u's favourite child"
   (no communication); ``w`` the makespan.  Minimise ``w`` subject to
   ``s_v >= s_u + p_u + c_e x_e`` (every edge), ``sum_{e out of u} x_e >= |succ(u)| - 1``
   (at most one favourite child), ``sum_{e into v} x_e >= |pred(v)| - 1`` (at most one
   favourite parent), ``w >= s_v + p_v`` (sinks).  ``p`` and ``c`` are device-averaged op
   and message times.  Rounding: ``x_e < threshold`` (0.5) marks the favourite child, at most
   one per op and one per consumer however the LP's tolerance rounds (:func:`round_favourites`).
2. m-ETF (:func:`~solvers.baselines.metf.etf_schedule`) where a favourite child is placed on
   its favourite parent's device whenever it fits there.

If the LP does not finish within its share of the budget (half of what remains, at most
``lp_time_limit_s``, counted from before the program is built), no favourites are used (plain
m-ETF) and the plan says so.  m-ETF then stops early enough to place the ops it has not reached
(:func:`~solvers.listsched.schedule.complete_fast`) and to build and simulate the plan within the
budget (:func:`~solvers.listsched.end_reserve_s`, measured on the run so that a loaded machine keeps
a reserve as slow as its end); the favourite-child program's share is taken from what is left after
that reserve.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field

from solvers.arrays import IntArray
from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.baselines.metf import etf_schedule
from solvers.listsched import (
    LatencyCosts,
    TaskGraph,
    budget_before_end,
    end_reserve_s,
    finish_schedule,
    start_op_schedule,
)
from solvers.model.errors import require
from solvers.model.plan import Plan
from solvers.model.problem import Problem


class MSCTOptions(SolverOptions):
    """``relaxation``: solve the favourite-child LP (True, Baechi's default) or the ILP.
    ``threshold``: ``x_e`` below it marks a favourite child.  ``lp_time_limit_s``: cap on
    the LP/ILP solve.  ``lp_solver``: the OR-Tools back-end of the LP (HiGHS is much faster
    than GLOP on large graphs, docs/benchmarks.md)."""

    relaxation: bool = True
    lp_solver: Literal["highs", "glop"] = "highs"
    threshold: float = Field(0.5, gt=0.0, le=0.5)
    lp_time_limit_s: float = Field(60.0, gt=0.0)


def favourite_children(tasks: TaskGraph, costs: LatencyCosts, relaxation: bool, threshold: float,
                       time_limit_s: float, lp_solver: str = "highs") -> tuple[IntArray | None, dict[str, Any]]:
    """The SCT program of the module doc; ``fav[u]`` = favourite child of ``u`` or -1
    (``None`` when the solver found no solution in time), and solve statistics.
    ``time_limit_s`` counts from the call: building the program (seconds at 200k ops) is part of it."""
    called = time.monotonic()
    sp = require("scipy.sparse", "milp")
    mbh = require("ortools.linear_solver.python.model_builder_helper", "milp")
    n = tasks.n
    src = np.asarray([u for u in range(n) for _ in tasks.succ[u]], dtype=np.int64)
    dst = np.asarray([v for u in range(n) for v in tasks.succ[u]], dtype=np.int64)
    size = np.asarray([b for u in range(n) for b in tasks.succ_bytes[u]], dtype=np.float64)
    n_edges = len(src)
    p = tasks.dur_s.mean(axis=1)
    c = costs.mean_comm_s(size)
    # columns: s_0..s_{n-1}, x_0..x_{E-1}, w
    col_x, col_w = n, n + n_edges
    rows: list[IntArray] = []
    cols: list[IntArray] = []
    vals: list[npt.NDArray[np.float64]] = []
    lower: list[npt.NDArray[np.float64]] = []
    e_idx = np.arange(n_edges)
    # precedence: s_v - s_u - c_e x_e >= p_u   (rows 0 .. E-1)
    rows += [e_idx, e_idx, e_idx]
    cols += [dst, src, col_x + e_idx]
    vals += [np.ones(n_edges), -np.ones(n_edges), -c]
    lower.append(p[src])
    r0 = n_edges
    out_deg = np.bincount(src, minlength=n)
    in_deg = np.bincount(dst, minlength=n)
    for ends, deg in ((src, out_deg), (dst, in_deg)):  # at most one favourite child / parent
        multi = np.flatnonzero(deg >= 2)
        row_of = np.full(n, -1, dtype=np.int64)
        row_of[multi] = r0 + np.arange(len(multi))
        sel = row_of[ends] >= 0
        rows.append(row_of[ends][sel])
        cols.append(col_x + e_idx[sel])
        vals.append(np.ones(int(sel.sum())))
        lower.append((deg[multi] - 1).astype(np.float64))
        r0 += len(multi)
    sinks = np.flatnonzero(out_deg == 0)  # w - s_v >= p_v
    k = np.arange(len(sinks))
    rows += [r0 + k, r0 + k]
    cols += [np.full(len(sinks), col_w), sinks]
    vals += [np.ones(len(sinks)), -np.ones(len(sinks))]
    lower.append(p[sinks])
    n_rows = r0 + len(sinks)
    matrix = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                           shape=(n_rows, n + n_edges + 1))
    var_ub = np.concatenate([np.full(n, np.inf), np.ones(n_edges), [np.inf]])
    objective = np.zeros(n + n_edges + 1)
    objective[col_w] = 1.0
    model = mbh.ModelBuilderHelper()
    model.fill_model_from_sparse_data(np.zeros(n + n_edges + 1), var_ub, objective, np.concatenate(lower),
                                      np.full(n_rows, np.inf), matrix)
    if not relaxation:
        for j in range(n_edges):
            model.set_var_integrality(col_x + j, True)
    backend = lp_solver if relaxation else "scip"
    solver = mbh.ModelSolverHelper(backend)
    solver.enable_output(False)
    if backend == "highs":
        solver.set_solver_specific_parameters("output_flag=false")
    solver.set_time_limit_in_seconds(max(0.05, time_limit_s - (time.monotonic() - called)))
    solver.solve(model)
    stats: dict[str, Any] = {"lp_solver": backend, "lp_rows": n_rows, "lp_columns": n + n_edges + 1,
                             "lp_status": str(solver.status()).rsplit(".", 1)[-1]}
    if not solver.has_solution():
        return None, stats
    x = np.asarray(solver.variable_values())[col_x:col_w]
    stats["lp_objective_s"] = float(solver.objective_value())
    fav = round_favourites(src, dst, x, threshold, n)
    stats["favourite_children"] = int((fav >= 0).sum())
    return fav, stats


def round_favourites(src: IntArray, dst: IntArray, x: npt.NDArray[np.float64], threshold: float, n: int) -> IntArray:
    """SCT rounding (Hanen & Munier): edge ``e`` is a favourite when ``x_e < threshold``, at most
    one favourite child per op and one favourite parent per op.

    The LP's degree rows only guarantee this in exact arithmetic: within the solver's feasibility
    tolerance two edges into one op can both come back at ``0.5 - 1e-13`` (their sum ``>= 1``
    holds up to ``1e-13``).  So the candidates are taken by increasing ``x`` (ties: edge order)
    and one is kept only while its producer has no favourite child and its consumer no
    favourite parent yet; with an exact solution this keeps every edge below the threshold.
    """
    fav = np.full(n, -1, dtype=np.int64)
    has_parent = np.zeros(n, dtype=bool)
    below = np.flatnonzero(x < threshold)
    for e in below[np.argsort(x[below], kind="stable")].tolist():
        u, v = int(src[e]), int(dst[e])
        if fav[u] < 0 and not has_parent[v]:
            fav[u] = v
            has_parent[v] = True
    return fav


class MSCTSolver:
    name: ClassVar[str] = "m-sct"
    summary: ClassVar[str] = "Baechi m-SCT: m-ETF with favourite children from the SCT LP (OR-Tools)"
    objectives: ClassVar[tuple[str, ...]] = ("latency",)
    options_type: ClassVar[type[SolverOptions]] = MSCTOptions
    version: ClassVar[str] = "1"

    def solve(self, problem: Problem, options: MSCTOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        set_up = time.monotonic()
        start = start_op_schedule(problem)
        if isinstance(start, Plan):
            return start
        sched, pins = start
        reserve_s = end_reserve_s(time.monotonic() - set_up)
        tasks, costs = sched.tasks, sched.costs
        lp_limit = min(options.lp_time_limit_s, max(0.0, budget.remaining_s() - reserve_s) * 0.5)
        fav, stats = favourite_children(tasks, costs, options.relaxation, options.threshold, lp_limit,
                                        options.lp_solver)
        progress(ProgressEvent(0.4, message=f"favourite-child program: {stats['lp_status']}"))
        notes = [] if fav is not None else ["the favourite-child program found no solution in time: plain m-ETF"]
        timed_out = etf_schedule(sched, pins, budget_before_end(budget, reserve_s),
                                 None if fav is None else fav.tolist())
        progress(ProgressEvent(0.9, sched.makespan_s()))
        stats["end_reserve_s"] = reserve_s
        return finish_schedule(problem, sched, timed_out=timed_out, stats=stats, notes=notes)
