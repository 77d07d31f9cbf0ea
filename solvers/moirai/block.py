"""The critical block's bound: the relaxation of :mod:`~solvers.moirai.bounds` solved exactly on
the tasks whose packing sets the energetic bound (docs/moirai.md "Bounds of the task DAG").

Energetic reasoning refutes a makespan when the tasks that must run inside some interval
``[t1, t2]`` need more than ``p (t2 - t1)`` of it; at the bound that interval is exactly full, and
what it ignores is whether the tasks can be *packed*: ``p`` machines, precedences, heads and
tails.  :func:`~solvers.moirai.bounds.critical_block` names the tasks of the tightest interval;
here CP-SAT answers "can they end by ``T``?" on ``P|r_j, q_j, prec|Cmax`` restricted to them
(Graham's notation): each task takes its least duration ``d_t`` on one of ``p`` identical machines
(an ``AddNoOverlap`` per machine, with a redundant cumulative of capacity ``p``), starts at or
after its head ``r_t``, a task waits for every ancestor in the block, and the makespan is at
least ``C_t + q_t``.  Every schedule of the instance, restricted to the block, is a schedule of
this problem, so ``infeasible`` proves ``T`` a lower bound on the instance.  The machines are
identical, so machine ``k`` hosts a task only if an earlier task of the block (topological
order) is on machine ``k - 1`` (symmetry breaking, as in the whole-graph model).

The block is a fraction of the tasks (29 of 60 on the classic 60-op, 4-device instance of seed 2),
and without the other tasks CP-SAT refutes targets that the whole-graph model does not reach in
minutes.  Times are integer ticks rounded down, as in :mod:`~solvers.moirai.window` (docs/moirai.md
"Time resolution"): for a real schedule, ``S'_t = floor(S_t / tick)`` satisfies every constraint
with floored durations, heads and tails, so ``infeasible`` holds for the real problem.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from solvers.model.errors import require
from solvers.moirai.bounds import TaskBounds
from solvers.moirai.instance import Instance
from solvers.moirai.window import strong_cumulative


@dataclass(frozen=True)
class BlockAnswer:
    """``status``: ``infeasible`` (no schedule of the block ends by the target: a proven bound),
    ``feasible`` (one does: the block cannot refute the target; ``end_s`` = its makespan, heads and
    tails included) or ``unknown`` (out of time)."""

    status: str
    end_s: float | None = None


class Block:
    """The critical block of an instance, asked one target at a time (module doc)."""

    def __init__(self, inst: Instance, bounds: TaskBounds, tasks: Sequence[int], horizon_s: float,
                 ticks: int) -> None:
        rank = {t: i for i, t in enumerate(inst.topo)}
        self.tasks = sorted(tasks, key=rank.__getitem__)
        self.tick_s = horizon_s / ticks
        self.n_ticks = ticks
        self.p = inst.n_devices
        d = bounds.least_s
        self.dur = {t: self._ticks(float(d[t])) for t in self.tasks}
        self.head = {t: self._ticks(float(bounds.head_s[t])) for t in self.tasks}
        self.tail = {t: self._ticks(float(bounds.tail_s[t])) for t in self.tasks}
        self.before = {t: [a for a in self.tasks if (inst.reach[a] >> t) & 1] for t in self.tasks}  # ancestors

    def _ticks(self, seconds: float) -> int:
        return min(self.n_ticks, math.floor(seconds / self.tick_s))

    def decide(self, target_s: float, time_limit_s: float, seed: int = 0, threads: int = 1,
               minimise: bool = False, work_limit: float | None = None) -> BlockAnswer:
        """Can the block end by ``target_s`` (heads and tails included)?  Stops at the first
        schedule found, or with ``minimise`` returns the shortest one found in the limits;
        ``work_limit``: CP-SAT's deterministic time limit (the same answer on a busy machine)."""
        cp: Any = require("ortools.sat.python.cp_model", "milp")
        m = cp.CpModel()
        horizon = self._ticks(target_s)
        S, C, x = {}, {}, {}
        per_machine: list[list[Any]] = [[] for _ in range(self.p)]
        plain = []
        for t in self.tasks:
            hi = horizon - self.tail[t] - self.dur[t]
            if hi < self.head[t]:
                return BlockAnswer("infeasible")
            S[t] = m.NewIntVar(self.head[t], hi, f"S{t}")
            C[t] = m.NewIntVar(self.head[t] + self.dur[t], hi + self.dur[t], f"C{t}")
            plain.append(m.NewIntervalVar(S[t], self.dur[t], C[t], f"I{t}"))
            x[t] = [m.NewBoolVar(f"x{t}_{k}") for k in range(self.p)]
            m.AddExactlyOne(x[t])
            for k in range(self.p):
                per_machine[k].append(m.NewOptionalIntervalVar(S[t], self.dur[t], C[t], x[t][k], f"I{t}_{k}"))
        for t in self.tasks:
            for a in self.before[t]:
                m.Add(S[t] >= C[a])
        for intervals in per_machine:
            m.AddNoOverlap(intervals)
        m.AddCumulative(plain, [1] * len(plain), self.p)
        # symmetry: seen[k] = some earlier task is on machine k
        seen: list[Any] = [None] * self.p
        for t in self.tasks:
            for k in range(1, self.p):
                if seen[k - 1] is None:
                    m.Add(x[t][k] == 0)
                else:
                    m.AddImplication(x[t][k], seen[k - 1])
            for k in range(self.p):
                now = m.NewBoolVar(f"seen{t}_{k}")
                m.AddBoolOr([x[t][k]] + ([seen[k]] if seen[k] is not None else [])).OnlyEnforceIf(now)
                m.AddImplication(x[t][k], now)
                if seen[k] is not None:
                    m.AddImplication(seen[k], now)
                seen[k] = now
        if minimise:
            cmax = m.NewIntVar(0, horizon, "cmax")
            for t in self.tasks:
                m.Add(cmax >= C[t] + self.tail[t])
            m.Minimize(cmax)
        solver = cp.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.05, time_limit_s)
        if work_limit is not None:
            solver.parameters.max_deterministic_time = work_limit
        solver.parameters.num_workers = max(1, threads)
        solver.parameters.random_seed = seed
        strong_cumulative(solver.parameters)
        status = solver.Solve(m)
        if status == cp.INFEASIBLE:  # "no schedule ends by the target", also when minimising
            return BlockAnswer("infeasible")
        if status in (cp.OPTIMAL, cp.FEASIBLE):
            end = max(solver.Value(C[t]) + self.tail[t] for t in self.tasks)
            return BlockAnswer("feasible", end * self.tick_s)
        return BlockAnswer("unknown")
