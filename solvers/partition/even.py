"""The even split: a contiguous min-max partition of the ops in topological order.

:func:`balanced_chunks` solves the "linear partition" problem (``k`` contiguous, non-empty
chunks of a sequence of weights, the heaviest as light as possible); :func:`even_plan` cuts the
ops in topological order by their compute and maps stage ``s`` to devices ``s R .. s R + R - 1``.
The ``even`` baseline searches its shapes; the exact solver falls back to it.
"""

from __future__ import annotations

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.runnable import computing_ops


def _greedy_cuts(weights: FloatArray, cap: float) -> list[int]:
    """Start indices of chunks when each chunk is filled up to ``cap`` (a chunk holds >= 1 item)."""
    prefix = np.concatenate(([0.0], np.cumsum(weights)))
    starts = [0]
    n = len(weights)
    while True:
        start = starts[-1]
        # the last index j such that prefix[j] - prefix[start] <= cap, at least start + 1
        end = int(np.searchsorted(prefix, prefix[start] + cap * (1 + 1e-12), side="right")) - 1
        end = max(end, start + 1)
        if end >= n:
            return starts
        starts.append(end)


def balanced_chunks(weights: FloatArray, k: int) -> list[tuple[int, int]]:
    """Cut ``weights`` into ``min(k, len)`` contiguous non-empty chunks minimising the max sum.

    Binary search on the bottleneck with a greedy feasibility check (exact up to floating-point
    resolution), then the largest chunks are split until there are exactly ``k`` chunks.
    Returns ``(start, end)`` index pairs, end exclusive.
    """
    n = len(weights)
    if n == 0 or k <= 0:
        raise ValueError("balanced_chunks needs at least one weight and one chunk")
    k = min(k, n)
    lo, hi = float(weights.max()), float(weights.sum())
    for _ in range(100):
        if hi - lo <= 1e-12 * max(hi, 1e-300):
            break
        mid = (lo + hi) / 2
        if len(_greedy_cuts(weights, mid)) <= k:
            hi = mid
        else:
            lo = mid
    starts = _greedy_cuts(weights, hi)
    chunks = [(s, e) for s, e in zip(starts, [*starts[1:], n], strict=True)]
    while len(chunks) < k:
        sums = [float(weights[s:e].sum()) if e - s > 1 else -1.0 for s, e in chunks]
        i = int(np.argmax(sums))
        s, e = chunks[i]
        mid = s + max(1, int(np.searchsorted(np.cumsum(weights[s:e]), sums[i] / 2)))
        mid = min(max(mid, s + 1), e - 1)
        chunks[i : i + 1] = [(s, mid), (mid, e)]
    return chunks


def runnable_split(problem: Problem, n_stages: int) -> IntArray:
    """The even split with every stage computing (per op, its stage): the topological order cut into
    ``n_stages`` chunks of least heaviest work, where each op that does not compute
    (:func:`solvers.runnable.computing_ops`: inputs and constants) travels with the next op that does (the
    last ones with the last), so that no chunk holds only inputs and constants.  Needs ``n_stages`` ops that
    compute."""
    g = problem.graph
    order = g.topo_order
    working = computing_ops(g)[order]
    weights = (g.fwd_s + (g.bwd_s if problem.training else 0.0))[order]
    unit = np.minimum(np.cumsum(working) - working, int(working.sum()) - 1)  # the op that computes it joins
    chunks = balanced_chunks(np.bincount(unit, weights=weights).astype(np.float64), n_stages)
    chunk_of_unit = np.repeat(np.arange(len(chunks)), [b - a for a, b in chunks])
    stage_of = np.empty(g.n_ops, dtype=np.int64)
    stage_of[order] = chunk_of_unit[unit]
    return stage_of


def even_plan(problem: Problem, n_stages: int, replicas: int, micro_batches: int) -> Plan:
    """The even-split plan with ``n_stages`` stages of ``replicas`` devices each; where the plain cut leaves a
    stage of inputs and constants only (a zero-work prologue cut off alone), :func:`runnable_split`'s, which
    gives every stage an op that computes (when the graph has that many)."""
    g = problem.graph
    order = g.topo_order
    weights = g.fwd_s + (g.bwd_s if problem.training else 0.0)
    chunks = balanced_chunks(np.asarray(weights[order], dtype=np.float64), n_stages)
    computes = computing_ops(g)
    stage_of = np.empty(g.n_ops, dtype=np.int64)
    for s, (a, b) in enumerate(chunks):
        stage_of[order[a:b]] = s
    idle = len(chunks) > 1 and bool((np.bincount(stage_of[computes], minlength=len(chunks)) == 0).any())
    if idle and problem.objective == "throughput" and int(computes.sum()) >= n_stages:
        stage_of = runnable_split(problem, n_stages)
    devices = [d.id for d in problem.topology.devices]
    stages = tuple(
        Stage(tuple(g.nodes[int(v)].id for v in order if stage_of[v] == s), tuple(devices[s * replicas:(s + 1) * replicas]))
        for s in range(int(stage_of.max()) + 1)
    )
    return Plan(stages=stages, micro_batches=micro_batches, schedule=problem.settings.own_schedule,
                recompute=problem.settings.recomputes, status="feasible")
