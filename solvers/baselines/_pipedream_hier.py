"""PipeDream's hierarchical DP over antichain states (Narayanan et al., SOSP'19, §3.1, with the
cost terms of its optimizer, msr-fiddle/pipedream ``optimizer/optimizer_graph_hierarchical.py``).

States ``0..n-1`` in topological order (:mod:`solvers.baselines._pipedream_states`).  A *row*
``i`` is where a segment starts: row 0 from the graph's beginning, row ``i >= 1`` right after
state ``i - 1``.  ``C[i, j]`` = compute of the segment (row ``i``, state ``j``] as a difference of
the states' prefix sums (``inf`` when ``j < i``), ``P[i, j]`` likewise for parameters.  Level
``k`` has ``M`` workers (each a whole level ``k - 1``, which itself has ``M'`` workers) linked by
bandwidth ``B``; with ``r`` workers::

    A[i, j, r] = (C[i, j] + 4 (r - 1) P[i, j] / (B r M')) / r                       (replicated)
    A[i, j, r] = min over states k before j, 1 <= r' < r of
                 max(A[i, k, r - r'],
                     (C[k+1, j] + 4 (r' - 1) P[k+1, j] / (B r')) / r',              (last stage)
                     2 a_k / (B r'),  2 a_j / (B r') unless j is the last state)      (transfers)

where ``k`` ranges over the antichain-DAG ancestors of ``j`` that are not ancestors of state
``i - 1``.  Level 1 starts from the states' compute; level ``k + 1`` takes ``C = A_k[:, :, M_k]``.
The top level solves row 0 only; its ``A[0, n-1, M]`` is the optimizer's "time per stage".
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.baselines._pipedream_states import AntichainStates

_CACHED_ELEMENTS = 1 << 25  # the L_r' tables are kept up to this many float64 values (256 MiB)


@dataclass(frozen=True)
class LevelTable:
    """``value[i, j, r-1]``; ``split[i, j, r-1]`` = state ``k`` ending the earlier stages (-1:
    replicated segment) and ``last_workers[i, j, r-1]`` = ``r'`` of the last stage."""

    value: FloatArray
    split: IntArray
    last_workers: IntArray


def prefix_differences(totals: FloatArray) -> FloatArray:
    """``D[i, j]`` = totals[j] (row 0) or totals[j] - totals[i - 1], ``inf`` where ``j < i``."""
    n = len(totals)
    out = np.vstack([totals[None, :], totals[None, :] - totals[:, None]])
    rows = np.arange(n + 1)[:, None]
    return np.where(np.arange(n)[None, :] >= rows, out, np.inf)


def solve_level(states: AntichainStates, compute: FloatArray, workers: int, within: int,
                bandwidth_Bps: float, top: bool, deadline: float = math.inf) -> LevelTable | None:
    """One level of the recurrence (module docstring) for every row, or row 0 when ``top``;
    ``None`` once ``time.monotonic()`` passes ``deadline`` (checked once per row).

    For ``r = m + 1`` workers every row ``i`` is one array operation per ``r'``: the candidates
    of all states ``k`` and segment ends ``j`` at once, ``max(A[i, k, r - r'], L_r'[k, j])`` with
    ``L_r'[k, j]`` the last stage's and the transfers' term (``inf`` unless ``k`` is an ancestor
    of ``j``).  ``A[i, k, .]`` is ``inf`` for ``k < i`` (a segment cannot end before it starts),
    which covers the states an earlier stage may not end at (the ancestors of state ``i - 1``
    come before it in the order).  Ties go to the smallest ``k``, then the smallest ``r'``.
    """
    n = states.n_states
    params = prefix_differences(states.param_bytes)
    params = np.where(np.isfinite(params), params, 0.0)
    r = np.arange(1, workers + 1)
    value = (compute[:, :, None] + 4.0 * (r - 1) * params[:, :, None] / (bandwidth_Bps * r * within)) / r
    value = np.where(np.isfinite(compute)[:, :, None], value, np.inf)
    split = np.full(value.shape, -1, dtype=np.int64)
    last_workers = np.zeros(value.shape, dtype=np.int64)
    rows = range(1 if top else n)  # row n (after the last state) holds no segment
    ancestor_of = states.ancestors.T  # [k, j]: k is an ancestor of j
    not_last = np.arange(n) < n - 1
    cached: dict[int, FloatArray] = {}
    keep = (workers - 1) * n * n <= _CACHED_ELEMENTS  # else each L_r' is rebuilt where it is used

    def tail(rp: int) -> FloatArray:
        """``L_r'[k, j]``: the last stage (k, j] on ``r'`` workers and its transfers."""
        if rp in cached:
            return cached[rp]
        last = (compute[1:] + 4.0 * (rp - 1) * params[1:] / (bandwidth_Bps * rp)) / rp  # [k, j]: (k, j]
        moved = 2.0 * states.out_bytes / (bandwidth_Bps * rp)
        moved_kj = np.where(not_last[None, :], np.maximum(moved[:, None], moved[None, :]), moved[:, None])
        out: FloatArray = np.where(ancestor_of, np.maximum(last, moved_kj), np.inf)
        if keep:
            cached[rp] = out
        return out

    for m in range(1, workers):
        for i in rows:
            if time.monotonic() > deadline:
                return None
            vals = np.empty((m, n - i - 1))
            args = np.empty((m, n - i - 1), dtype=np.int64)
            for rp in range(1, m + 1):
                cand = np.maximum(value[i, i:, m - rp][:, None], tail(rp)[i:, i + 1:])  # [k - i, j - i - 1]
                args[rp - 1] = np.argmin(cand, axis=0)
                vals[rp - 1] = np.take_along_axis(cand, args[rp - 1][None, :], axis=0)[0]
            best_value = vals.min(axis=0)
            order = np.where(vals == best_value[None, :], args * m + np.arange(m)[:, None], np.iinfo(np.int64).max)
            pick = np.argmin(order, axis=0)
            js = np.arange(i + 1, n)
            better = best_value < value[i, i + 1:, m]
            at = js[better]
            value[i, at, m] = best_value[better]
            split[i, at, m] = args[pick[better], better] + i
            last_workers[i, at, m] = pick[better] + 1
    return LevelTable(value, split, last_workers)


def stages_of(table: LevelTable, row: int, last: int, workers: int) -> list[tuple[int, int, int]]:
    """The segment (``row``, ``last``] with ``workers`` as stages ``(row, last state, workers)``."""
    out: list[tuple[int, int, int]] = []
    j, m = last, workers - 1
    while table.split[row, j, m] >= 0:
        k, rp = int(table.split[row, j, m]), int(table.last_workers[row, j, m])
        out.append((k + 1, j, rp))
        j, m = k, m - rp
    out.append((row, j, m + 1))
    return out[::-1]


Group = tuple[int, list[tuple[int, int, int]]]


def pipedream_dp(states: AntichainStates, levels: list[tuple[int, float]], deadline: float = math.inf
                 ) -> tuple[float, list[Group]] | None:
    """The optimizer's value ("time per stage in pipeline", seconds per minibatch) and its pipeline
    as groups ``(outer workers, [(row, last state, inner workers), ...])``; ``levels`` = (workers,
    bandwidth) from the innermost level out, one or two levels.  ``None`` when ``time.monotonic()``
    passes ``deadline`` first (no level's table is complete before the top one is)."""
    n = states.n_states
    compute = prefix_differences(states.compute_s)
    tables: list[LevelTable] = []
    within = 1
    for depth, (workers, bw) in enumerate(levels):
        table = solve_level(states, compute, workers, within, bw, depth == len(levels) - 1, deadline)
        if table is None:
            return None
        tables.append(table)
        compute, within = table.value[:, :, -1], workers
    value = float(tables[-1].value[0, n - 1, -1])
    top = stages_of(tables[-1], 0, n - 1, levels[-1][0])
    if len(tables) == 1:
        return value, [(1, top)]
    inner_workers = levels[0][0]
    return value, [(reps, stages_of(tables[0], row, last, inner_workers)) for row, last, reps in top]
