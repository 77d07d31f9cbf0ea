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

from dataclasses import dataclass

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.model.problem import Problem
from solvers.parmesan.costs import reference_costs


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


def _level(a_lower: FloatArray, chain: LayerChain, m_k: int, bw: float) -> tuple[FloatArray, dict[tuple[int, int, int], tuple[int, int]]]:
    """One level of the recurrence: ``A[i, j, m]`` and the split choices."""
    n = chain.n_layers
    cw = np.concatenate(([0.0], np.cumsum(chain.param_bytes)))
    t = np.full((n, n, m_k + 1), np.inf)  # t[i, j, m] = T^k(i..j, m)
    a = np.full((n, n, m_k + 1), np.inf)  # a[i, j, m] = A^k(i..j, m)
    split: dict[tuple[int, int, int], tuple[int, int]] = {}  # (i, j, m) -> (s, m') when split
    w = cw[None, 1:] - cw[:-1, None]  # W(i..j)
    for m in range(1, m_k + 1):
        t[:, :, m] = np.maximum(a_lower, 2.0 * (m - 1) * w / bw) / m
    comm = 2.0 * chain.cut_bytes / bw  # comm[s] for a split after layer s
    for length in range(1, n + 1):
        for i in range(0, n - length + 1):
            j = i + length - 1
            for m in range(1, m_k + 1):
                best, choice = t[i, j, m], None
                if length > 1 and m > 1:
                    s = np.arange(i, j)
                    for mp in range(1, m):
                        vals = np.maximum(np.maximum(a[i, s, m - mp], comm[s]), t[s + 1, j, mp])
                        k = int(np.argmin(vals))
                        if vals[k] < best:
                            best, choice = float(vals[k]), (int(s[k]), mp)
                a[i, j, m] = best
                if choice is not None:
                    split[(i, j, m)] = choice
    return a, split


def _stages(split: dict[tuple[int, int, int], tuple[int, int]], i: int, j: int, m: int) -> list[tuple[int, int, int]]:
    """Top stages (first, last, replicas) of the optimum ``A(i..j, m)``."""
    choice = split.get((i, j, m))
    if choice is None:
        return [(i, j, m)]
    s, mp = choice
    return [*_stages(split, i, s, m - mp), (s + 1, j, mp)]


Group = tuple[int, list[tuple[int, int, int]]]


def hierarchical_dp(chain: LayerChain, inner: tuple[int, float], outer: tuple[int, float] | None
                    ) -> tuple[float, list[Group]]:
    """Two-level recurrence: ``inner`` = (GPUs per server, B_1), ``outer`` = (servers, B_2) or ``None``.

    Returns the value and the pipeline as groups ``(servers, [(first, last, gpus), ...])``: each
    outer stage runs its layers as an inner pipeline on every one of its servers.
    """
    n = chain.n_layers
    cw = np.concatenate(([0.0], np.cumsum(chain.work_s)))
    a0 = cw[None, 1:] - cw[:-1, None]  # A^0(i..j): one worker
    a0 = np.where(np.triu(np.ones((n, n), dtype=bool)), a0, np.inf)
    m1, b1 = inner
    a1, split1 = _level(a0, chain, m1, b1)
    if outer is None:
        return float(a1[0, n - 1, m1]), [(1, _stages(split1, 0, n - 1, m1))]
    m2, b2 = outer
    a2, split2 = _level(a1[:, :, m1], chain, m2, b2)
    groups = [(reps, _stages(split1, first, last, m1)) for first, last, reps in _stages(split2, 0, n - 1, m2)]
    return float(a2[0, n - 1, m2]), groups


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
