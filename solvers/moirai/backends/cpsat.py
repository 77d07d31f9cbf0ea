"""CP-SAT back-end: the same placement problem with optional intervals and no-overlap.

Per task and allowed device an optional interval (present iff the unit is there) shares the
task's start and end; ``AddNoOverlap`` per device replaces the big-M rows of (6).  Per message
and source device an optional interval of variable length on channel ``k' -> k''`` (present iff
``u_{q k' k''}``) with ``AddNoOverlap`` per channel gives (8); the same order literals as the
MILP's ``delta`` tie each channel's order to its sender's task order.  CP-SAT needs integers:
times are in ticks of ``horizon / TICKS`` rounded *down*, so every real schedule maps to a
feasible integer one and the proven bound (in ticks) is a valid lower bound on the real makespan;
the solution is re-timed exactly by the caller.  Memory is in whole bytes (static and working
memory rounded up, capacity down).  On larger models CP-SAT's presolve can drop the warm-start
hint and then find no solution at all; when the presolved search (60 % of the time) ends without
one, the rest of the time searches the unpresolved model, which keeps the hint.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from solvers.model.errors import require
from solvers.moirai.backends.result import BackendResult, Report
from solvers.moirai.formulation import fwd_before_bwd, order_key, precedes
from solvers.moirai.linear_model import Formulation

TICKS = 1_000_000
PRESOLVED_SHARE = 0.6  # of the time for the presolved search when a hint exists (module doc)


def solve_cpsat(f: Formulation, time_limit_s: float, threads: int, seed: int, report: Report) -> BackendResult:
    """Build and solve the CP-SAT model; values are returned in the formulation's units."""
    cp: Any = require("ortools.sat.python.cp_model", "milp")
    inst = f.inst
    tick_s = f.horizon_s / TICKS  # seconds per tick
    h = TICKS
    m = cp.CpModel()
    x = [{k: m.NewBoolVar(f"x{u}_{k}") for k in row} for u, row in enumerate(f.x)]
    for row in x:
        m.AddExactlyOne(row.values())
    S = [m.NewIntVar(0, h, f"S{t}") for t in range(inst.n_tasks)]
    C = [m.NewIntVar(0, h, f"C{t}") for t in range(inst.n_tasks)]
    per_device: dict[int, list[Any]] = {}
    for t in range(inst.n_tasks):
        for k, lit in x[inst.task_unit[t]].items():
            d = math.floor(float(inst.dur_s[t, k]) / tick_s)
            per_device.setdefault(k, []).append(m.NewOptionalIntervalVar(S[t], d, C[t], lit, f"I{t}_{k}"))
        for s, _ in inst.succ[t]:
            m.Add(S[s] >= C[t])
    for intervals in per_device.values():
        m.AddNoOverlap(intervals)
    _memory(m, f, x)
    delta = {}
    n = inst.n_units
    for (i, j) in f.delta:  # d = 1: i first (training: forward i first, backward j' first)
        d = delta[(i, j)] = m.NewBoolVar(f"d{i}_{j}")
        ui, uj = inst.task_unit[i], inst.task_unit[j]
        for k in x[ui].keys() & x[uj].keys():
            m.Add(C[i] <= S[j]).OnlyEnforceIf([d, x[ui][k], x[uj][k]])
            m.Add(C[j] <= S[i]).OnlyEnforceIf([d.Not(), x[ui][k], x[uj][k]])
            if inst.training:
                m.Add(C[n + j] <= S[n + i]).OnlyEnforceIf([d, x[ui][k], x[uj][k]])
                m.Add(C[n + i] <= S[n + j]).OnlyEnforceIf([d.Not(), x[ui][k], x[uj][k]])
    for i, bj in fwd_before_bwd(inst):
        ui, uj = inst.task_unit[i], inst.task_unit[bj]
        for k in x[ui].keys() & x[uj].keys():
            m.Add(C[i] <= S[bj]).OnlyEnforceIf([x[ui][k], x[uj][k]])
    msg_vars = _messages(m, f, x, S, C, delta, tick_s, h)
    cmax = m.NewIntVar(0, h, "cmax")
    for t in range(inst.n_tasks):
        if not inst.succ[t]:
            m.Add(cmax >= C[t])
    m.Minimize(cmax)
    _hint(m, f, _Vars(x, S, C, delta, msg_vars, cmax), tick_s)
    solver = cp.CpSolver()
    solver.parameters.num_workers = max(1, threads)
    solver.parameters.random_seed = seed
    to_units = tick_s * f.scale

    class _Progress(cp.CpSolverSolutionCallback):  # type: ignore[misc]
        def on_solution_callback(self) -> None:
            report(self.ObjectiveValue() * to_units, self.BestObjectiveBound() * to_units)

    started = time.monotonic()
    hinted = bool(f.model.hint)
    solver.parameters.max_time_in_seconds = max(0.05, time_limit_s * (PRESOLVED_SHARE if hinted else 1.0))
    status = solver.Solve(m, _Progress())
    bound_ticks = solver.BestObjectiveBound()
    left = time_limit_s - (time.monotonic() - started)
    if status == cp.UNKNOWN and hinted and left > 0.2:  # presolve lost the hint: search from it unpresolved
        solver.parameters.cp_model_presolve = False
        solver.parameters.max_time_in_seconds = left
        status = solver.Solve(m, _Progress())
        bound_ticks = max(bound_ticks, solver.BestObjectiveBound())
    if status == cp.INFEASIBLE:
        return BackendResult("infeasible", message="CP-SAT proved the model infeasible")
    bound = None if math.isinf(bound_ticks) else bound_ticks * to_units
    if status not in (cp.OPTIMAL, cp.FEASIBLE):  # no solution, but the bound is still proven
        return BackendResult("unknown", bound=bound, message=f"CP-SAT: {solver.StatusName(status)}")
    values = [0.0] * len(f.model.names)
    for u, row in enumerate(x):
        for k, lit in row.items():
            values[f.x[u][k]] = float(solver.Value(lit))
    for t in range(inst.n_tasks):
        values[f.S[t]] = solver.Value(S[t]) * to_units
        values[f.C[t]] = solver.Value(C[t]) * to_units
    values[f.cmax] = solver.Value(cmax) * to_units
    return BackendResult("optimal" if status == cp.OPTIMAL else "feasible", values,
                         solver.ObjectiveValue() * to_units, bound, message=f"CP-SAT: {solver.StatusName(status)}")


def _memory(m: Any, f: Formulation, x: list[dict[int, Any]]) -> None:
    """(5) in whole bytes: the static bytes on ``k`` plus each present unit's working memory fit."""
    inst = f.inst
    for k in range(inst.n_devices):
        on_k = [(u, x[u][k]) for u in range(inst.n_units) if k in x[u]]
        cap = math.floor(float(inst.cap_bytes[k]))
        total = sum(math.ceil(float(inst.static_bytes[u])) * lit for u, lit in on_k)
        m.Add(total <= cap)
        for u, lit in on_k:
            if inst.work_bytes[u] > 0:
                m.Add(total <= cap - math.ceil(float(inst.work_bytes[u]))).OnlyEnforceIf(lit)


def _messages(m: Any, f: Formulation, x: list[dict[int, Any]], S: list[Any], C: list[Any],
              delta: dict[tuple[int, int], Any], tick_s: float, h: int) -> list[tuple[Any, Any, Any, Any, dict[int, Any]]]:
    """(7) channel choice and duration, consumers waiting, (8) one message at a time per channel."""
    inst = f.inst
    channel: dict[tuple[int, int], list[Any]] = {}
    lits: list[tuple[int, int, dict[int, Any], Any, Any]] = []  # task, dst, u, start, end
    out: list[tuple[Any, Any, Any, Any, dict[int, Any]]] = []  # per f.messages: z, start, end, length, u
    for q in f.messages:
        a, k2, ua = q.task, q.dst, inst.task_unit[q.task]
        z = m.NewBoolVar(f"z{a}_{k2}")
        qs, qc, qt = m.NewIntVar(0, h, f"qS{a}_{k2}"), m.NewIntVar(0, h, f"qC{a}_{k2}"), m.NewIntVar(0, h, f"qT{a}_{k2}")
        m.Add(qs >= C[a])
        m.Add(qc == qs + qt)
        for b, _ in q.consumers:
            xb = x[inst.task_unit[b]][k2]
            m.AddBoolOr([xb.Not(), z] + ([x[ua][k2]] if k2 in x[ua] else []))  # z >= x_b,k'' - x_a,k''
            m.Add(S[b] >= qc).OnlyEnforceIf(xb)
        for b in q.zero_consumers:
            if k2 in x[inst.task_unit[b]]:
                m.Add(S[b] >= qc).OnlyEnforceIf([x[inst.task_unit[b]][k2], z])
        u = {}
        for k1 in q.u:
            u[k1] = m.NewBoolVar(f"u{a}_{k1}_{k2}")
            m.AddBoolAnd([x[ua][k1], z]).OnlyEnforceIf(u[k1])
            m.AddBoolOr([x[ua][k1].Not(), z.Not(), u[k1]])
            for b, size in q.consumers:
                p = math.floor(inst.comm_s(size, k1, k2) / tick_s)
                m.Add(qt >= p).OnlyEnforceIf([x[ua][k1], x[inst.task_unit[b]][k2]])
            channel.setdefault((k1, k2), []).append(m.NewOptionalIntervalVar(qs, qt, qc, u[k1], f"Q{a}_{k1}_{k2}"))
        m.Add(sum(u.values()) == z)
        lits.append((a, k2, u, qs, qc))
        out.append((z, qs, qc, qt, u))
    for intervals in channel.values():
        m.AddNoOverlap(intervals)
    for i, (a, k2, u, qs, qc) in enumerate(lits):
        for c, k2b, ur, rs, rc in lits[i + 1:]:
            if k2b != k2:
                continue
            for k1 in u.keys() & ur.keys():
                both = [u[k1], ur[k1]]
                if a == c or precedes(inst, a, c):
                    m.Add(rs >= qc).OnlyEnforceIf(both)
                elif precedes(inst, c, a):
                    m.Add(qs >= rc).OnlyEnforceIf(both)
                else:
                    key, a_first = order_key(inst, a, c)
                    d = delta[key]
                    (fs, fc), (ss, sc) = ((qs, qc), (rs, rc)) if a_first else ((rs, rc), (qs, qc))
                    m.Add(ss >= fc).OnlyEnforceIf([d, *both])
                    m.Add(fs >= sc).OnlyEnforceIf([d.Not(), *both])
    return out


@dataclass
class _Vars:
    """The CP-SAT variables mirrored from the formulation (for the hint)."""

    x: list[dict[int, Any]]
    S: list[Any]
    C: list[Any]
    delta: dict[tuple[int, int], Any]
    messages: list[tuple[Any, Any, Any, Any, dict[int, Any]]]
    cmax: Any


def _hint(m: Any, f: Formulation, v: _Vars, tick_s: float) -> None:
    """Hint the warm start mapped to ticks: starts rounded down, lengths as in the model (floored),
    ends = start + length; this integer schedule satisfies every constraint (module doc)."""
    hint = f.model.hint
    if not hint:
        return
    inst = f.inst
    ticks = 1.0 / (f.scale * tick_s)  # ticks per model unit
    device = [next((k for k, var in row.items() if hint.get(var, 0.0) > 0.5), -1) for row in f.x]
    for u, row in enumerate(v.x):
        for k, lit in row.items():
            m.AddHint(lit, int(device[u] == k))
    end = [0] * inst.n_tasks
    for t in range(inst.n_tasks):
        start = math.floor(hint.get(f.S[t], 0.0) * ticks)
        k = device[inst.task_unit[t]]
        end[t] = start + math.floor(float(inst.dur_s[t, k]) / tick_s)
        m.AddHint(v.S[t], start)
        m.AddHint(v.C[t], end[t])
    for q, (z, qs, qc, qt, chan) in zip(f.messages, v.messages, strict=True):
        active = hint.get(q.z, 0.0) > 0.5
        k1 = device[inst.task_unit[q.task]]
        length = max((math.floor(inst.comm_s(size, k1, q.dst) / tick_s) for b, size in q.consumers
                      if device[inst.task_unit[b]] == q.dst), default=0) if active else 0
        start = math.floor(hint.get(q.S, 0.0) * ticks) if active else end[q.task]
        m.AddHint(z, int(active))
        m.AddHint(qs, start)
        m.AddHint(qt, length)
        m.AddHint(qc, start + length)
        for k, lit in chan.items():
            m.AddHint(lit, int(active and k == k1))
    for key, lit in v.delta.items():
        m.AddHint(lit, int(hint.get(f.delta[key], 0.0) > 0.5))
    m.AddHint(v.cmax, max((end[t] for t in range(inst.n_tasks) if not inst.succ[t]), default=0))
