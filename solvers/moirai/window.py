"""CP-SAT over a window of units: MOIRAI's placement + scheduling model with the units outside
the window fixed (the large-neighbourhood step, docs/moirai.md "Window search").

Variables as in §III-D (Table II): ``x[u, k]`` for the units in the window (a fixed unit has one
device), start ``S[t]`` and completion ``C[t]`` of every task, and ``cmax`` (Eq. 4).  Constraints:
precedence with the transfer time of the edge when its ends sit on different devices (4a),
durations (4b), one device per unit (4c), memory (5), and one task at a time per device (6) as
``AddNoOverlap`` of optional intervals — order literals are not needed.  Outside the window a
device keeps the incumbent's order of its fixed tasks (a chain); window tasks go anywhere in it.

What the model leaves out is contention: every edge pays its own transfer time and channels
never queue.  The simulator sends one message per consumer device with the largest edge bytes
and serialises a channel, so each of its messages takes at least as long and arrives no earlier:
the model is a *relaxation* of the simulated latency over plans with one device per op, and
without communication it is exact.  In a training pass a device runs its forward tasks before
its backward tasks (kept, the simulator's rule); the reversed backward order is not imposed
(relaxed).  Times are integer ticks of ``horizon / ticks`` (``TICKS`` by default) rounded down,
so the incumbent maps to a feasible hint and, over the whole instance, the proven bound is a
valid lower bound; the integer optimum may lie up to one tick per task of a critical chain under
the real one (docs/moirai.md, "Time resolution").
A solution is re-timed exactly by :func:`~solvers.moirai.schedule.replay`.  Tasks outside the
window that end, in the incumbent, before the window's first start keep their times (they are
constants, and a device's other tasks start after them), so late windows are small models.

Two redundant constraints help the proofs: with identical devices a cumulative of capacity
``#devices`` over the tasks that are not frozen (the energy bound), and, over the whole
instance, interchangeable devices are used in index order (symmetry breaking: device ``c_j`` of a class hosts a unit only
if an earlier unit, in topological order, is on ``c_{j-1}``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from solvers.model.errors import PlacerError, require
from solvers.moirai.bounds import TaskBounds
from solvers.moirai.instance import Instance
from solvers.moirai.schedule import TimedSchedule, full_order, memory_fits, replay

TICKS = 1_000_000  # default time resolution: ticks per horizon (docs/moirai.md "Time resolution")
RELATIVE_GAP = 5e-5  # CP-SAT stops within this relative gap (the solver's "optimal" allows 1e-4)
Lit = Any  # a CP-SAT literal, or True for a fixed unit's only device


@dataclass(frozen=True)
class WindowResult:
    """``status``: the model's (``optimal`` = the window's optimum under the model); ``schedule``:
    the solution re-timed exactly; ``bound_s``: the model's proven bound on the makespan (a lower
    bound on the instance only when every unit was free)."""

    status: str
    schedule: TimedSchedule | None
    bound_s: float | None


def identical_classes(inst: Instance) -> list[list[int]]:
    """Devices that are interchangeable: equal task times, memory, pins and channels to all others."""
    topo = inst.problem.topology
    lat, bw = topo.latency_s, topo.bandwidth_Bps

    def channels_equal(a: int, b: int) -> bool:
        others = [k for k in range(inst.n_devices) if k not in (a, b)]
        return bool(lat[a, b] == lat[b, a] and bw[a, b] == bw[b, a]
                    and all(lat[a, k] == lat[b, k] and lat[k, a] == lat[k, b] and bw[a, k] == bw[b, k]
                            and bw[k, a] == bw[k, b] for k in others))

    classes: list[list[int]] = []
    for k in range(inst.n_devices):
        for cls in classes:
            r = cls[0]
            if (inst.cap_bytes[r] == inst.cap_bytes[k] and (inst.dur_s[:, r] == inst.dur_s[:, k]).all()
                    and (inst.allowed[:, r] == inst.allowed[:, k]).all() and channels_equal(r, k)):
                cls.append(k)
                break
        else:
            classes.append([k])
    return classes


def _enforce(*lits: Lit) -> list[Lit]:
    return [lit for lit in lits if lit is not True]


def _add(m: Any, constraint: Any, lits: list[Lit]) -> None:
    if lits:
        constraint.OnlyEnforceIf(lits)


class _Model:
    """The CP-SAT model of one window (module doc)."""

    def __init__(self, inst: Instance, incumbent: TimedSchedule | None, free: Collection[int], horizon_s: float,
                 cp: Any, ticks: int = TICKS) -> None:
        self.inst, self.cp, self.m = inst, cp, cp.CpModel()
        self.n_ticks = ticks
        self.tick_s = horizon_s / ticks
        self.free = set(free)
        self.everything = len(self.free) == inst.n_units
        fixed_dev = incumbent.device_of_unit if incumbent is not None else ()
        self.x: list[dict[int, Lit]] = []
        for u in range(inst.n_units):
            if u in self.free:
                row = {k: self.m.NewBoolVar(f"x{u}_{k}") for k in range(inst.n_devices) if inst.allowed[u, k]}
                self.m.AddExactlyOne(row.values())
                self.x.append(row)
            else:
                self.x.append({fixed_dev[u]: True})
        self.frozen = self._frozen(incumbent)
        self.floor: dict[int, int] = {}  # device -> end of its last frozen task (ticks)
        self.S = [self._time(t, incumbent, start=True) for t in range(inst.n_tasks)]
        self.C = [self._time(t, incumbent, start=False) for t in range(inst.n_tasks)]
        self.cmax = self.m.NewIntVar(0, self.n_ticks, "cmax")

    def ticks(self, seconds: float) -> int:
        return math.floor(seconds / self.tick_s)

    def _frozen(self, incumbent: TimedSchedule | None) -> set[int]:
        """Tasks outside the window that end, in the incumbent, before any window task starts:
        their times stay (so do their predecessors', which end earlier still)."""
        if incumbent is None or self.everything:
            return set()
        inst = self.inst
        first = min(incumbent.start_s[t] for t in range(inst.n_tasks) if inst.task_unit[t] in self.free)
        return {t for t in range(inst.n_tasks) if inst.task_unit[t] not in self.free and incumbent.end_s[t] < first}

    def _time(self, t: int, incumbent: TimedSchedule | None, start: bool) -> Any:
        if t not in self.frozen or incumbent is None:
            return self.m.NewIntVar(0, self.n_ticks, f"{'S' if start else 'C'}{t}")
        k = incumbent.device_of_unit[self.inst.task_unit[t]]
        s = self.ticks(incumbent.start_s[t])
        v = s if start else s + self.ticks(float(self.inst.dur_s[t, k]))
        if not start:
            self.floor[k] = max(self.floor.get(k, 0), v)
        return self.m.NewIntVar(v, v, f"{'S' if start else 'C'}{t}")

    def frozen_floors(self) -> None:
        """A device's other tasks start after its frozen tasks end."""
        floor = self.floor
        for t in range(self.inst.n_tasks):
            if t in self.frozen:
                continue
            for k, lit in self.x[self.inst.task_unit[t]].items():
                if floor.get(k, 0) > 0:
                    _add(self.m, self.m.Add(self.S[t] >= floor[k]), _enforce(lit))

    def devices_and_edges(self) -> None:
        m, inst = self.m, self.inst
        per_device: dict[int, list[Any]] = {}
        for t in range(inst.n_tasks):
            u = inst.task_unit[t]
            for k, lit in self.x[u].items() if t not in self.frozen else ():
                d = self.ticks(float(inst.dur_s[t, k]))
                if lit is True:
                    m.Add(self.C[t] == self.S[t] + d)
                    per_device.setdefault(k, []).append(m.NewIntervalVar(self.S[t], d, self.C[t], f"I{t}"))
                else:
                    per_device.setdefault(k, []).append(
                        m.NewOptionalIntervalVar(self.S[t], d, self.C[t], lit, f"I{t}_{k}"))
            for s, size in inst.succ[t]:
                if s in self.frozen:
                    continue  # then t is frozen too
                m.Add(self.S[s] >= self.C[t])
                us = inst.task_unit[s]
                if size <= 0 or us == u:
                    continue
                for ka, la in self.x[u].items():
                    for kb, lb in self.x[us].items():
                        c = self.ticks(inst.comm_s(size, ka, kb)) if ka != kb else 0
                        if c > 0:
                            _add(m, m.Add(self.S[s] >= self.C[t] + c), _enforce(la, lb))
            if not inst.succ[t]:
                m.Add(self.cmax >= self.C[t])
        for intervals in per_device.values():
            m.AddNoOverlap(intervals)

    def memory(self) -> None:
        """(5) in whole bytes: static bytes plus the largest working memory on each device fit."""
        m, inst = self.m, self.inst
        for k in range(inst.n_devices):
            cap = math.floor(float(inst.cap_bytes[k]))
            fixed = [u for u in range(inst.n_units) if self.x[u].get(k) is True]
            free = [(u, self.x[u][k]) for u in range(inst.n_units) if k in self.x[u] and self.x[u][k] is not True]
            base = sum(math.ceil(float(inst.static_bytes[u])) for u in fixed)
            total = base + sum(math.ceil(float(inst.static_bytes[u])) * lit for u, lit in free)
            work0 = max((math.ceil(float(inst.work_bytes[u])) for u in fixed), default=0)
            m.Add(total <= cap - work0)
            for u, lit in free:
                if inst.work_bytes[u] > 0:
                    m.Add(total <= cap - math.ceil(float(inst.work_bytes[u]))).OnlyEnforceIf(lit)

    def forward_before_backward(self) -> None:
        """Training: on each device every forward task ends before any backward task starts."""
        m, inst = self.m, self.inst
        n = inst.n_units
        for k in range(inst.n_devices):
            fwd_end = m.NewIntVar(0, self.n_ticks, f"F{k}")
            for u in range(n):
                if k in self.x[u]:
                    lits = _enforce(self.x[u][k])
                    _add(m, m.Add(fwd_end >= self.C[u]), lits)
                    _add(m, m.Add(self.S[n + u] >= fwd_end), lits)

    def chains(self, incumbent: TimedSchedule) -> None:
        """Outside the window each device keeps the incumbent's order of its fixed tasks."""
        for tasks in incumbent.order.values():
            fixed = [t for t in tasks if self.inst.task_unit[t] not in self.free and t not in self.frozen]
            for a, b in itertools.pairwise(fixed):
                self.m.Add(self.S[b] >= self.C[a])

    def energy(self) -> None:
        """With identical devices: a cumulative of capacity ``#devices`` over the tasks that are not
        frozen (the energy bound; redundant, it speeds the proofs)."""
        m, inst = self.m, self.inst
        if inst.n_devices < 2 or len(identical_classes(inst)) != 1:
            return
        live = [t for t in range(inst.n_tasks) if t not in self.frozen]
        intervals = [m.NewIntervalVar(self.S[t], self.ticks(float(inst.dur_s[t, 0])), self.C[t], f"E{t}")
                     for t in live]
        m.AddCumulative(intervals, [1] * len(live), inst.n_devices)

    def heads_tails(self, bounds: TaskBounds) -> None:
        """Whole instance only: every task starts at or after its head and ends at least its tail
        before ``cmax`` (:mod:`~solvers.moirai.bounds`; redundant, they hold for every schedule of
        the relaxation, in ticks rounded down)."""
        for t in range(self.inst.n_tasks):
            self.m.Add(self.S[t] >= min(self.n_ticks, self.ticks(float(bounds.head_s[t]))))
            self.m.Add(self.cmax >= self.C[t] + min(self.n_ticks, self.ticks(float(bounds.tail_s[t]))))

    def symmetry(self) -> None:
        """Whole instance only: interchangeable devices are used in index order (module doc)."""
        m, inst = self.m, self.inst
        classes = identical_classes(inst)
        units = [t for t in inst.topo if t < inst.n_units]
        for cls in classes:
            for prev, k in itertools.pairwise(cls):
                seen: Any = None  # literal: some earlier unit (topological order) is on ``prev``
                for u in units:
                    if k in self.x[u]:
                        if seen is None:
                            m.Add(self.x[u][k] == 0)
                        else:
                            m.AddImplication(self.x[u][k], seen)
                    if prev not in self.x[u]:
                        continue
                    now = m.NewBoolVar(f"seen{prev}_{u}")
                    m.AddBoolOr([self.x[u][prev]] + ([seen] if seen is not None else [])).OnlyEnforceIf(now)
                    m.AddImplication(self.x[u][prev], now)
                    if seen is not None:
                        m.AddImplication(seen, now)
                    seen = now

    def hint(self, incumbent: TimedSchedule) -> None:
        m, inst = self.m, self.inst
        end = [0] * inst.n_tasks
        for u in self.free:
            for k, lit in self.x[u].items():
                m.AddHint(lit, int(incumbent.device_of_unit[u] == k))
        for t in range(inst.n_tasks):
            k = incumbent.device_of_unit[inst.task_unit[t]]
            start = self.ticks(incumbent.start_s[t])
            end[t] = start + self.ticks(float(inst.dur_s[t, k]))
            if t not in self.frozen:
                m.AddHint(self.S[t], start)
                m.AddHint(self.C[t], end[t])
        m.AddHint(self.cmax, max((end[t] for t in range(inst.n_tasks) if not inst.succ[t]), default=0))


def _order(inst: Instance, device: list[int], start: list[int], end: list[int]) -> dict[int, list[int]]:
    """Per-device forward order by start, then end (a zero-time task before the task it shares
    its start with), then topological position."""
    rank = {t: i for i, t in enumerate(inst.topo)}
    out: dict[int, list[int]] = {}
    for t in sorted(range(inst.n_units), key=lambda t: (start[t], end[t], rank[t])):
        out.setdefault(device[t], []).append(t)
    return full_order(inst, out)


def strong_cumulative(params: Any) -> None:
    """CP-SAT's stronger propagation of the cumulative constraint (hard precedences, time-table
    edge finding, the overload checker), for models whose cumulative carries the proof."""
    params.use_hard_precedences_in_cumulative = True
    params.use_timetable_edge_finding_in_cumulative = True
    params.use_overload_checker_in_cumulative = True


def solve_window(inst: Instance, incumbent: TimedSchedule | None, free: Collection[int], horizon_s: float,
                 time_limit_s: float, seed: int = 0, threads: int = 1, lower_s: float = 0.0,
                 bounds: TaskBounds | None = None, upper_s: float | None = None,
                 ticks: int = TICKS, first_solution: bool = False) -> WindowResult:
    """Solve the window model: units in ``free`` are placed anew, the others keep ``incumbent``'s
    devices and order; every time is in ``[0, horizon_s]``; ``lower_s``: a proven lower bound on
    the makespan (``cmax`` starts there, so the search stops when it is met); ``bounds``: heads
    and tails of the instance, imposed when the window is the whole instance; ``upper_s``: only
    schedules with ``cmax`` at most this (in ticks rounded down) — the decision form: ``infeasible``
    over the whole instance proves that no plan ends by ``upper_s``; ``ticks``: the time
    resolution, ticks per ``horizon_s``; ``first_solution``: stop at the first solution (the
    decision form's "yes") instead of minimising ``cmax`` down to ``RELATIVE_GAP``."""
    cp: Any = require("ortools.sat.python.cp_model", "milp")
    model = _Model(inst, incumbent, free, horizon_s, cp, ticks)
    model.devices_and_edges()
    model.memory()
    if inst.training:
        model.forward_before_backward()
    model.frozen_floors()
    if incumbent is not None:
        model.chains(incumbent)
        model.hint(incumbent)
    model.energy()
    if model.everything:
        model.symmetry()
        if bounds is not None:
            model.heads_tails(bounds)
    model.m.Add(model.cmax >= min(ticks, model.ticks(lower_s)))
    if upper_s is not None:
        model.m.Add(model.cmax <= min(ticks, model.ticks(upper_s)))
    model.m.Minimize(model.cmax)
    solver = cp.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, time_limit_s)
    solver.parameters.num_workers = max(1, threads)
    solver.parameters.random_seed = seed
    solver.parameters.relative_gap_limit = 1.0 if first_solution else RELATIVE_GAP  # gap <= 1: any solution
    if model.everything:  # stronger cumulative propagation: it pays on whole instances (docs/moirai.md)
        strong_cumulative(solver.parameters)
    status = solver.Solve(model.m)
    bound_ticks = solver.BestObjectiveBound()
    bound_s = None if math.isinf(bound_ticks) else max(0.0, bound_ticks) * model.tick_s
    if status == cp.INFEASIBLE:
        return WindowResult("infeasible", None, None)
    if status not in (cp.OPTIMAL, cp.FEASIBLE):
        return WindowResult("unknown", None, bound_s)
    device = [next(k for k, lit in row.items() if lit is True or solver.Value(lit)) for row in model.x]
    if not memory_fits(inst, device):
        return WindowResult("unknown", None, bound_s)
    order = _order(inst, device, [solver.Value(v) for v in model.S], [solver.Value(v) for v in model.C])
    try:
        sched = replay(inst, device, order)
    except PlacerError:  # tick rounding tied a task with its predecessor: keep the incumbent
        return WindowResult("unknown", None, bound_s)
    return WindowResult("optimal" if status == cp.OPTIMAL else "feasible", sched, bound_s)
