"""PipeDream's partitioning DP (Narayanan et al., SOSP'19, §3.1) on a layer chain.

Layers: maximal runs of ops sharing the ``layer`` attribute along the graph's topological
order (ops without one are their own layer), merged into at most ``max_layers`` balanced
runs — the pre-processing that turns an op graph into PipeDream's layer graph (Parmesan
§VIII-A does the same for its comparison).  Any split of the chain between layers gives
stages that follow the edges.  Per layer ``l``: ``T_l`` (forward + backward, slowest device),
``w_l`` (parameter bytes); per cut ``c`` (after layer ``c``): ``a_c`` = bytes crossing it.

Hierarchical recurrence, level ``k`` (``m_k`` components of level ``k - 1``, bandwidth ``B_k``)::

    T^k(i..j, m) = 1/m * max(A^{k-1}(i..j), 2 (m - 1) W(i..j) / B_k)
    A^k(i..j, m) = min(T^k(i..j, m),
                       min_{i <= s < j, 1 <= m' < m} max(A^k(i..s, m - m'), 2 a_s / B_k, T^k(s+1..j, m')))

with ``A^0(i..j) = T(i..j)`` (one worker) and ``A^{k-1}(i..j) = A^{k-1}(i..j, m_{k-1})``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.model.problem import Problem
from solvers.partition.costs import reference_costs


@dataclass(frozen=True)
class LayerChain:
    """``layer_of[v]`` = layer of op ``v``; per layer ``work_s``, ``param_bytes``, ``act_bytes``,
    ``working_bytes``; ``cut_bytes[c]`` = bytes crossing the cut after layer ``c``."""

    layer_of: IntArray
    work_s: FloatArray
    param_bytes: FloatArray
    act_bytes: FloatArray
    working_bytes: FloatArray
    cut_bytes: FloatArray

    @property
    def n_layers(self) -> int:
        return len(self.work_s)


def layer_chain(problem: Problem, max_layers: int) -> LayerChain:
    """Group ops into at most ``max_layers`` contiguous layers of the topological order."""
    g = problem.graph
    order = g.topo_order
    work = reference_costs(problem).work_s
    run = np.zeros(g.n_ops, dtype=np.int64)  # run index along the order
    for pos in range(1, g.n_ops):
        a, b = g.nodes[int(order[pos - 1])], g.nodes[int(order[pos])]
        same = a.layer is not None and a.layer == b.layer
        run[pos] = run[pos - 1] + (0 if same else 1)
    n_runs = int(run[-1]) + 1
    if n_runs > max_layers:  # merge runs into balanced chunks of work
        run_work = np.bincount(run, weights=work[order], minlength=n_runs).astype(np.float64)
        cum = np.cumsum(run_work) / max(float(run_work.sum()), 1e-300)
        ends = np.searchsorted(cum, np.arange(1, max_layers) / max_layers, side="left")  # last run of chunk b
        chunk_of_run = np.searchsorted(ends, np.arange(n_runs), side="left")
        _, compact = np.unique(chunk_of_run, return_inverse=True)
        run = compact.astype(np.int64)[run]
    layer_of = np.empty(g.n_ops, dtype=np.int64)
    layer_of[order] = run
    n = int(run.max()) + 1
    wk = np.zeros(n)
    np.maximum.at(wk, layer_of, np.maximum(g.mem_fwd_bytes, g.mem_bwd_bytes))
    # a producer's tensor crosses every cut from its layer to its last consumer's layer
    cut = np.zeros(n + 1)
    for u in range(g.n_ops):
        if not g.out_edges[u]:
            continue
        last = max(int(layer_of[int(g.edge_dst[j])]) for j in g.out_edges[u])
        size = max(float(g.edge_bytes[j]) for j in g.out_edges[u])
        if last > layer_of[u]:
            cut[layer_of[u]] += size
            cut[last] -= size
    return LayerChain(layer_of, np.bincount(layer_of, weights=work, minlength=n).astype(np.float64),
                      np.bincount(layer_of, weights=g.param_bytes, minlength=n).astype(np.float64),
                      np.bincount(layer_of, weights=g.act_bytes, minlength=n).astype(np.float64), wk,
                      np.cumsum(cut)[:n])


_BLOCK_ELEMENTS = 1 << 22  # candidates per array operation of a DP level (32 MiB of float64)


@dataclass(frozen=True)
class _Level:
    """``a[i, j, m]`` = ``A^k(i..j, m)``; when split, ``split_at[i, j, m]`` = ``s`` (the last layer
    of the earlier stages) and ``last_workers[i, j, m]`` = ``m'``, else ``-1``."""

    a: FloatArray
    split_at: IntArray
    last_workers: IntArray


def _level(a_lower: FloatArray, chain: LayerChain, m_k: int, bw: float, deadline: float = math.inf) -> _Level | None:
    """One level of the recurrence; ``None`` once ``time.monotonic()`` passes ``deadline``
    (checked once per first layer).

    ``A(i..j, m)`` reads ``A(i..s, m - m')`` only, so for each ``m`` every first layer ``i`` is one
    array operation over all splits ``s``, last layers ``j`` and ``m'``.  Ties go to the
    replicated segment, then the smallest ``m'``, then the smallest ``s``.
    """
    n = chain.n_layers
    cw = np.concatenate(([0.0], np.cumsum(chain.param_bytes)))
    t = np.full((n, n, m_k + 1), np.inf)  # t[i, j, m] = T^k(i..j, m)
    w = cw[None, 1:] - cw[:-1, None]  # W(i..j)
    for m in range(1, m_k + 1):
        t[:, :, m] = np.maximum(a_lower, 2.0 * (m - 1) * w / bw) / m
    a = t.copy()  # a[i, j, m] = A^k(i..j, m): the replicated segment until a split beats it
    split_at = np.full(t.shape, -1, dtype=np.int64)
    last_workers = np.full(t.shape, -1, dtype=np.int64)
    comm = 2.0 * chain.cut_bytes / bw  # comm[s] for a split after layer s
    for m in range(2, m_k + 1):
        for i in range(n - 1):
            if time.monotonic() > deadline:
                return None
            # earlier[s - i, m' - 1] = max(A(i..s, m - m'), comm[s]) for m' = 1 .. m - 1
            earlier = np.maximum(a[i, i:n - 1, m - 1:0:-1], comm[i:n - 1, None])
            block = max(1, _BLOCK_ELEMENTS // max(1, (n - i) ** 2))  # m' values per array operation
            for lo in range(1, m, block):  # blocks of m' in increasing order: ties stay with the smaller m'
                hi = min(m, lo + block)
                cand = np.maximum(earlier[:, None, lo - 1:hi - 1], t[i + 1:, i + 1:, lo:hi])  # [s - i, j - i - 1, m' - lo]
                args = np.argmin(cand, axis=0)  # [j - i - 1, m' - lo]: the smallest s reaching the minimum
                vals = np.take_along_axis(cand, args[None], axis=0)[0]
                first = np.argmin(vals, axis=1)  # the smallest m' reaching the minimum
                cols = np.arange(n - i - 1)
                best = vals[cols, first]
                better = best < a[i, i + 1:, m]
                js = np.arange(i + 1, n)[better]
                a[i, js, m] = best[better]
                split_at[i, js, m] = args[cols, first][better] + i
                last_workers[i, js, m] = first[better] + lo
    return _Level(a, split_at, last_workers)


def _stages(level: _Level, i: int, j: int, m: int) -> list[tuple[int, int, int]]:
    """Top stages (first, last, replicas) of the optimum ``A(i..j, m)``."""
    if level.split_at[i, j, m] < 0:
        return [(i, j, m)]
    s, mp = int(level.split_at[i, j, m]), int(level.last_workers[i, j, m])
    return [*_stages(level, i, s, m - mp), (s + 1, j, mp)]


Group = tuple[int, list[tuple[int, int, int]]]


def hierarchical_dp(chain: LayerChain, inner: tuple[int, float], outer: tuple[int, float] | None,
                    deadline: float = math.inf) -> tuple[float, list[Group]] | None:
    """Two-level recurrence: ``inner`` = (GPUs per server, B_1), ``outer`` = (servers, B_2) or ``None``.

    Returns the value and the pipeline as groups ``(servers, [(first, last, gpus), ...])``: each
    outer stage runs its layers as an inner pipeline on every one of its servers; ``None`` when
    ``time.monotonic()`` passes ``deadline`` first.
    """
    n = chain.n_layers
    cw = np.concatenate(([0.0], np.cumsum(chain.work_s)))
    a0 = cw[None, 1:] - cw[:-1, None]  # A^0(i..j): one worker
    a0 = np.where(np.triu(np.ones((n, n), dtype=bool)), a0, np.inf)
    m1, b1 = inner
    level1 = _level(a0, chain, m1, b1, deadline)
    if level1 is None:
        return None
    if outer is None:
        return float(level1.a[0, n - 1, m1]), [(1, _stages(level1, 0, n - 1, m1))]
    m2, b2 = outer
    level2 = _level(level1.a[:, :, m1], chain, m2, b2, deadline)
    if level2 is None:
        return None
    groups = [(reps, _stages(level1, first, last, m1)) for first, last, reps in _stages(level2, 0, n - 1, m2)]
    return float(level2.a[0, n - 1, m2]), groups


def flat_dp(chain: LayerChain, n_stages: int, stage_cost: list[FloatArray],
            cut_cost: list[FloatArray]) -> tuple[float, list[int]] | None:
    """The recurrence with exactly ``n_stages`` stages of a fixed replica count.

    ``stage_cost[s][i, j]`` = PipeDream's time of stage ``s`` holding layers ``i..j`` (``inf`` if it
    does not fit); ``cut_cost[s][c]`` = communication time of a split after layer ``c`` entering
    stage ``s``.  ``A[s][j]`` = best slowest-stage time of layers ``0..j`` in ``s + 1`` stages.
    Returns the value and the last layer of every stage.
    """
    n = chain.n_layers
    if n_stages > n:
        return None
    a = np.full((n_stages, n), np.inf)
    arg = np.full((n_stages, n), -1, dtype=np.int64)  # arg[s][j] = last layer of stage s - 1
    a[0] = stage_cost[0][0]
    for s in range(1, n_stages):
        for j in range(s, n):
            i = np.arange(s - 1, j)  # last layer of the previous stage
            vals = np.maximum(np.maximum(a[s - 1, i], cut_cost[s][i]), stage_cost[s][i + 1, j])
            k = int(np.argmin(vals))
            a[s, j], arg[s, j] = vals[k], i[k]
    if not np.isfinite(a[-1, -1]):
        return None
    lasts = [n - 1]
    for s in range(n_stages - 1, 0, -1):
        lasts.append(int(arg[s, lasts[-1]]))
    return float(a[-1, -1]), lasts[::-1]


def mixed_flat_dp(n_layers: int, n_stages: int, replicas: int, n_devices: int,
                  costs: dict[int, tuple[list[FloatArray], list[FloatArray]]]) -> tuple[float, list[int], list[int]] | None:
    """:func:`flat_dp` with a tensor-parallel degree per stage: ``costs[t]`` = (``stage_cost``, ``cut_cost``) of
    stages of degree ``t`` (each as in :func:`flat_dp`), and stage ``s`` of degree ``t`` takes ``t x replicas`` of
    the ``n_devices`` devices.  ``A[s][j][m]`` = best slowest-stage time of layers ``0..j`` in ``s + 1`` stages on
    ``m`` devices; the stages' degrees are what the recurrence chooses (docs/tensor-parallel.md, "Search").
    Returns the value, the last layer of every stage and every stage's degree; ``None`` when nothing fits."""
    n, big = n_layers, n_devices + 1
    if n_stages > n:
        return None
    a = np.full((n_stages, n, big), np.inf)
    arg = np.full((n_stages, n, big, 2), -1, dtype=np.int64)  # (last layer of stage s - 1, degree of stage s)
    for t, (stage_cost, _) in costs.items():
        m = t * replicas
        if m < big:
            better = stage_cost[0][0] < a[0, :, m]
            a[0, better, m] = stage_cost[0][0][better]
            arg[0, better, m, 1] = t
    for s in range(1, n_stages):
        for j in range(s, n):
            i = np.arange(s - 1, j)  # last layer of the previous stage
            for t, (stage_cost, cut_cost) in costs.items():
                used = t * replicas
                if used >= big:
                    continue
                # vals[i, m] for m = used..n_devices: the previous stages on m - used devices
                prev = a[s - 1][i][:, :big - used]
                vals = np.maximum(np.maximum(prev, cut_cost[s][i][:, None]), stage_cost[s][i + 1, j][:, None])
                k = np.argmin(vals, axis=0)
                best = vals[k, np.arange(vals.shape[1])]
                cur = a[s, j, used:]
                better = best < cur
                cur[better] = best[better]
                arg[s, j, used:, 0][better] = i[k[better]]
                arg[s, j, used:, 1][better] = t
    m = int(np.argmin(a[-1, -1]))
    if not np.isfinite(a[-1, -1, m]):
        return None
    value = float(a[-1, -1, m])
    lasts, degrees, j = [n - 1], [], n - 1
    for s in range(n_stages - 1, -1, -1):
        prev_last, t = (int(x) for x in arg[s, j, m])
        degrees.append(t)
        if s:
            lasts.append(prev_last)
            j, m = prev_last, m - t * replicas
    return value, lasts[::-1], degrees[::-1]
