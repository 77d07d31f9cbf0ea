"""The even split: a contiguous min-max partition of the ops in topological order.

:func:`balanced_chunks` solves the "linear partition" problem (``k`` contiguous, non-empty
chunks of a sequence of weights, the heaviest as light as possible); :func:`even_plan` cuts the
ops in topological order by their compute and maps stage ``s`` to devices ``s R .. s R + R - 1``.
The ``even`` baseline searches its shapes; the exact solver falls back to it.
"""

from __future__ import annotations

import numpy as np

from solvers.arrays import FloatArray
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem


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


def even_plan(problem: Problem, n_stages: int, replicas: int, micro_batches: int) -> Plan:
    """The even-split plan with ``n_stages`` stages of ``replicas`` devices each."""
    g = problem.graph
    order = g.topo_order
    weights = g.fwd_s + (g.bwd_s if problem.training else 0.0)
    chunks = balanced_chunks(np.asarray(weights[order], dtype=np.float64), n_stages)
    devices = [d.id for d in problem.topology.devices]
    stages = tuple(
        Stage(tuple(g.nodes[int(v)].id for v in order[a:b]), tuple(devices[s * replicas:(s + 1) * replicas]))
        for s, (a, b) in enumerate(chunks)
    )
    return Plan(stages=stages, micro_batches=micro_batches, schedule=problem.settings.own_schedule,
                recompute=problem.settings.recomputes, status="feasible")
