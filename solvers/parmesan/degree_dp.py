"""Stage DP over fronted subgraphs with a tensor-parallel degree per stage (Parmesan §IV-A, Eq. 2).

Eq. 2 carries a device dimension: ``T[F][d][s]`` partitions fronted subgraph ``F`` into ``s``
stages on ``d`` devices.  The paper fixes every stage's replicas to ``R`` (Appendix B, Eq. 13),
which makes the dimension constant; here a stage also chooses a tensor-parallel degree ``t`` from
the searched degrees and takes ``t x R`` devices (``R`` groups of ``t``), so the dimension is back,
counted in *units* of ``R`` devices (one device per replica): a stage of degree ``t`` takes ``t``
units of the ``U = D // R`` there are::

    T[s][f][u] = min_t min_{f' proper fronted subset of f} max(T[s-1][f'][u - t], t_t(f - f', R))

``T[s][f][u]`` (``s`` 0-based) = the smallest achievable maximum stage time when fronted set ``f``
is split into ``s + 1`` stages using at most ``u`` units, stage ``s`` being ``f - f'``; ``T[-1][empty][u]
= 0`` for every ``u``.  ``t_t`` is Eq. 3 with degree ``t``'s per-op costs
(:func:`~solvers.partition.tp.split_op_costs`: split ops' compute over ``t``, their collectives on
the slowest device and ring) and memory (split ops at ``1/t``), ``+inf`` over memory or against a
pin (:func:`~solvers.parmesan.dp.pair_stage_s` on the degree's
:func:`~solvers.parmesan.dp.with_cluster_costs`).  The optimum is ``T[S-1][V][U]``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solvers.arrays import FloatArray, IntArray
from solvers.model.problem import Problem
from solvers.parmesan.dp import Transitions, pair_stage_s


@dataclass(frozen=True)
class DegreeDPResult:
    """The optimum: ``stages[s]`` = cluster mask of stage ``s``, ``degrees[s]`` its degree, ``stage_s[s]``
    its Eq. 3 time at that degree."""

    objective_s: float
    stages: list[npt.NDArray[np.bool_]]
    degrees: list[int]
    stage_s: list[float]

    def op_stages(self, cluster_of: IntArray) -> IntArray:
        """The stage of every op, from the stage of its cluster (``cluster_of[op]``)."""
        cluster_stage: IntArray = np.argmax(np.stack(self.stages), axis=0)
        return cluster_stage[cluster_of].astype(np.int64)


def run_degree_dp(problem: Problem, by_degree: Mapping[int, Transitions], n_stages: int, replicas: int,
                  micro_batches: int, n_units: int, allreduce: tuple[float, float] = (0.0, 0.0),
                  deadline: float = float("inf")) -> DegreeDPResult | None:
    """The recurrence of the module doc for ``n_stages`` stages of ``replicas`` replicas on ``n_units``
    units; ``by_degree[t]`` = the pairs with degree ``t``'s stage quantities (every entry the same pairs).
    ``None`` when no partition fits or ``time.monotonic()`` passes ``deadline`` first.  Ties: the
    smallest degree, then the smallest subset index."""
    if n_stages > n_units or not by_degree:
        return None
    pairs = next(iter(by_degree.values()))
    n, k = pairs.sets.shape
    owner = np.repeat(np.arange(n), np.diff(pairs.start))  # pairs are sorted by owner (CSR)
    size = pairs.sets.sum(axis=1)
    before = np.full((n_units + 1, n), np.inf)  # T[-1]: nothing placed
    before[:, 0] = 0.0
    tables: list[FloatArray] = []  # tables[s][u, f] = T[s][f][u]
    stage_times: list[dict[int, FloatArray]] = []  # stage_times[s][t][p] = t_t of pair p as stage s
    for s in range(n_stages):
        hi = n_units - (n_stages - 1 - s)  # each later stage takes one unit at least
        cur = np.full((n_units + 1, n), np.inf)
        times: dict[int, FloatArray] = {}
        # the pairs that can be stage s: s stages before it (the empty set before stage 0), room for the
        # stages after it (the whole graph at the last stage); the others cannot lead to T[S-1][V][U]
        live = np.flatnonzero((size[pairs.prev] >= s) & (size[owner] <= k - (n_stages - 1 - s))
                              & ((pairs.prev == 0) if s == 0 else True) & ((owner == n - 1) if s == n_stages - 1 else True))
        own = owner[live]
        seg_start = np.flatnonzero(np.r_[True, own[1:] != own[:-1]]) if len(own) else np.zeros(0, dtype=np.int64)
        owners = own[seg_start]
        for t in sorted(by_degree):
            lo = s + t  # each earlier stage took one unit at least
            if lo > hi:
                continue
            if time.monotonic() > deadline:
                return None
            tr = by_degree[t]
            times[t] = pair_stage_s(problem, tr, n_stages, s, replicas, micro_batches, allreduce)
            if not len(live):
                continue
            # vals[u - lo, i] = max(T[s-1][prev[p]][u - t], t_t(p)) for u = lo .. hi, p = live[i]
            vals = np.maximum(np.take(before[lo - t:hi - t + 1], tr.prev[live], axis=1), times[t][live][None, :])
            lowest = np.minimum.reduceat(vals, seg_start, axis=1)  # per owner of live pairs
            cur[lo:hi + 1, owners] = np.minimum(cur[lo:hi + 1, owners], lowest)
        tables.append(cur)
        stage_times.append(times)
        before = cur
    value = float(tables[-1][n_units, n - 1])
    if not np.isfinite(value):
        return None
    return _backtrack(pairs, tables, stage_times, value, n_units)


def _backtrack(pairs: Transitions, tables: list[FloatArray], stage_times: list[dict[int, FloatArray]],
               value: float, n_units: int) -> DegreeDPResult:
    """The stages and degrees realising ``value``: at each stage, from the last, the first degree and
    pair whose term equals the table's entry (the same floating-point operations, so exactly)."""
    n = len(pairs.sets)
    stages: list[npt.NDArray[np.bool_]] = []
    degrees: list[int] = []
    times: list[float] = []
    f, u = n - 1, n_units
    for s in range(len(tables) - 1, -1, -1):
        target = tables[s][u, f]
        owned = np.arange(pairs.start[f], pairs.start[f + 1])
        chosen: tuple[int, int] | None = None
        for t in sorted(stage_times[s]):
            if u - t < 0:
                continue
            earlier = tables[s - 1][u - t, pairs.prev[owned]] if s else np.where(pairs.prev[owned] == 0, 0.0, np.inf)
            hit = np.flatnonzero(np.maximum(earlier, stage_times[s][t][owned]) == target)
            if len(hit):
                chosen = (t, int(owned[hit[0]]))
                break
        assert chosen is not None, "the DP table has no realising pair"
        t, p = chosen
        j = int(pairs.prev[p])
        stages.append(pairs.sets[f] & ~pairs.sets[j])
        degrees.append(t)
        times.append(float(stage_times[s][t][p]))
        f, u = j, u - t
    return DegreeDPResult(value, stages[::-1], degrees[::-1], times[::-1])
