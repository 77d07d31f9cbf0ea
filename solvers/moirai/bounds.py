"""Placement-free lower bounds on the makespan of an instance's task DAG: heads, tails, energy.

The relaxation: task ``t`` takes at least ``d_t`` = its least time on an allowed device, at most
``p`` = ``n_devices`` tasks run at once, and transfers, channels, memory and the training pass's
order rules are dropped (they only delay or forbid).  Every schedule the simulator can produce
for a plan with one device per unit is a schedule of this relaxation (``P|prec|Cmax`` with
durations ``d_t``, Graham's notation), so the bounds below hold for the instance.  They are the
classic bounds of that problem, given to MOIRAI's models (§III-D) as redundant constraints and
reported as proven bounds (docs/moirai.md, "Status and bound"):

* **head** ``r_t`` (earliest start): ``r_t >= r_a + d_a`` for a predecessor ``a``; and for every
  ancestor ``a``, all ancestors ``b`` with ``r_b >= r_a`` run inside ``[r_a, S_t]`` on at most
  ``p`` devices, so ``S_t >= r_a + sum(d_b) / p`` (the load argument of Fernandez & Bussell,
  IEEE TC 1973, applied to the ancestor set, as in Carlier's head bounds for ``P|r_j,q_j|Cmax``);
* **tail** ``q_t`` (least time from ``t``'s end to the makespan): the same on descendants;
* ``max_t (r_t + d_t + q_t)``, which contains the critical path;
* **energetic reasoning** (Erschler & Lopez 1990; Baptiste, Le Pape & Nuijten, *Satisfiability
  tests and time-bound adjustments for cumulative scheduling problems*, Ann. OR 1999): for a
  candidate makespan ``T`` task ``t`` runs inside ``[r_t, T - q_t]``, so it occupies at least
  ``max(0, min(d_t, t2 - t1, r_t + d_t - t1, t2 - T + q_t + d_t))`` of any interval ``[t1, t2]``;
  when these sum to more than ``p (t2 - t1)`` for some interval, no schedule ends by ``T``.  A
  bisection finds the largest ``T`` so refuted (the intervals ``t1`` in the heads, ``t2`` in the
  deadlines suffice: the sum is piecewise linear in each end with breakpoints there).

All arithmetic is in seconds; :func:`task_bounds` shaves the bound by a relative ``1e-9`` so
float rounding never lifts it above the optimum (tests/solvers/moirai/test_bounds.py checks it
against brute force).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from solvers.arrays import FloatArray
from solvers.moirai.instance import Instance

HEADS_MAX_TASKS = 4000  # heads and tails keep an n x n ancestor matrix (16 MB at this size)
ENERGY_MAX_TASKS = 240  # energetic reasoning is O(n^3) per candidate: only on small instances
BISECTION_STEPS = 40
SHAVE = 1e-9  # relative


@dataclass(frozen=True)
class TaskBounds:
    """``head_s[t]`` / ``tail_s[t]``: proven least start of ``t`` / time from its end to the
    makespan; ``bound_s``: the proven lower bound on the makespan; ``least_s[t]``: the task's
    least duration (:func:`least_durations_s`), which they are computed with."""

    head_s: FloatArray
    tail_s: FloatArray
    bound_s: float
    least_s: FloatArray


def least_durations_s(inst: Instance) -> FloatArray:
    """Per task: its least time over the devices its unit may use."""
    allowed = inst.allowed[np.asarray(inst.task_unit, dtype=np.int64)]
    return np.asarray(np.where(allowed, inst.dur_s, np.inf).min(axis=1), dtype=np.float64)


def _heads(order: tuple[int, ...], pred: list[list[int]], d: FloatArray, p: int) -> FloatArray:
    """Heads along ``order`` (a topological order of the DAG given by ``pred``), module doc."""
    n = len(d)
    head = np.zeros(n)
    anc = np.zeros((n, n), dtype=bool)  # anc[t] = ancestors of t
    for t in order:
        ps = pred[t]
        if not ps:
            continue
        row = anc[t]
        for a in ps:
            row |= anc[a]
            row[a] = True
        best = max(head[a] + d[a] for a in ps)
        idx = np.flatnonzero(row)
        r = head[idx]
        by = np.argsort(-r, kind="stable")
        load = np.cumsum(d[idx][by]) / p
        best = max(best, float((r[by] + load).max()))
        head[t] = best
    return head


def _refuted(T: float, d: FloatArray, head: FloatArray, tail: FloatArray, p: int) -> bool:
    """Energetic reasoning: no schedule of the relaxation ends by ``T`` (module doc)."""
    deadline = T - tail
    if np.any(head + d > deadline + 1e-15 * max(1.0, T)):
        return True
    for t1, later, need in _mandatory_parts(d, head, deadline):
        if np.any(need.sum(axis=1) > p * (later - t1) * (1 + 1e-12)):
            return True
    return False


def _mandatory_parts(d: FloatArray, head: FloatArray, deadline: FloatArray
                     ) -> Iterator[tuple[float, FloatArray, FloatArray]]:
    """Energetic reasoning's intervals: for every start ``t1`` (a head), the ends ``t2`` (the
    deadlines after ``t1``) and each task's mandatory part in ``[t1, t2]`` (rows: ``t2``,
    columns: tasks; the least of its duration, the interval, and what it must run in the
    interval when started at its head or ended at its deadline)."""
    t2 = np.unique(deadline)
    for t1 in np.unique(head):
        later = t2[t2 > t1]
        if not len(later):
            continue
        width = later[:, None] - t1
        need = np.minimum(np.minimum(d[None, :], width), np.minimum(head + d - t1, later[:, None] - deadline + d))
        yield float(t1), later, np.maximum(need, 0.0)


def critical_block(inst: Instance, bounds: TaskBounds) -> list[int]:
    """The tasks with a positive mandatory part in the interval where energetic reasoning is
    tightest at the bound (largest ``energy - p (t2 - t1)`` at ``T = bound_s``): the block whose
    packing sets the bound (:mod:`~solvers.moirai.block` bounds it exactly).  Empty without
    energetic reasoning (one device, or more than ``ENERGY_MAX_TASKS`` tasks)."""
    n, p = inst.n_tasks, inst.n_devices
    if not 0 < n <= ENERGY_MAX_TASKS or p < 2:
        return []
    d, head, tail = bounds.least_s, bounds.head_s, bounds.tail_s
    deadline = bounds.bound_s - tail
    best, block = -np.inf, np.zeros(n, dtype=bool)
    for t1, later, need in _mandatory_parts(d, head, deadline):
        excess = need.sum(axis=1) - p * (later - t1)
        i = int(np.argmax(excess))
        if excess[i] > best:
            best, block = float(excess[i]), need[i] > 0
    return [int(t) for t in np.flatnonzero(block)]


def task_bounds(inst: Instance, upper_s: float | None = None) -> TaskBounds | None:
    """Heads, tails and the lower bound of the module doc (``None`` above ``HEADS_MAX_TASKS``
    tasks); ``upper_s``: a known makespan (the bisection's upper end; without it the serial time
    of every task)."""
    n, p = inst.n_tasks, inst.n_devices
    if n > HEADS_MAX_TASKS:
        return None
    d = least_durations_s(inst)
    pred = [list(ps) for ps in inst.pred]
    succ = [[s for s, _ in ss] for ss in inst.succ]
    head = _heads(inst.topo, pred, d, p)
    tail = _heads(tuple(reversed(inst.topo)), succ, d, p)
    lo = float((head + d + tail).max()) if n else 0.0
    lo = max(lo, float(d.sum()) / p)
    if 0 < n <= ENERGY_MAX_TASKS and p > 1:
        hi = float(d.sum()) if upper_s is None else max(lo, min(upper_s, float(d.sum())))
        if _refuted(lo, d, head, tail, p):
            for _ in range(BISECTION_STEPS):
                if hi - lo <= 1e-12 * hi:
                    break
                mid = 0.5 * (lo + hi)
                if _refuted(mid, d, head, tail, p):
                    lo = mid
                else:
                    hi = mid
    return TaskBounds(head, tail, lo * (1 - SHAVE), d)
