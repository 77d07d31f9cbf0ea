"""Stage DP over fronted subgraphs (Parmesan §IV-A, Eq. 2 with constant replicas, Eq. 13).

``T[s][f]`` = the smallest achievable maximum stage time when the fronted subgraph ``f`` (a
row of the matrix from :func:`solvers.partition.fronted.enumerate_fronted`) is split into
``s`` stages of ``R`` replicas each, stage ``s - 1`` (0-based) being ``f - f'``::

    T[s][f] = min_{f' proper fronted subset of f} max(T[s-1][f'], t(f - f', R))

with ``T[0][empty] = 0``.  ``t`` is Eq. 3 (compute plus boundary communication, divided by
``R``), ``+inf`` when the stage does not fit memory (Eq. 14 / :mod:`solvers.cost.memory` for
its index and in-flight micro-batches) or violates a stage pin.  The pairs ``(f, f')`` and
their stage quantities do not depend on ``S``, ``R`` or the micro-batch count, so they are
computed once per clustered graph (:class:`Transitions`) and reused by the (S, R) search.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solvers.arrays import FloatArray, IntArray
from solvers.cost.memory import kept_bytes
from solvers.model.problem import Problem
from solvers.parmesan.clustering import ClusterGraph
from solvers.partition.costs import StageBytes, stage_capacity_bytes, stage_memory_vec

BoolMatrix = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Transitions:
    """Every (fronted set, proper fronted subset) pair in CSR form.

    Row ``i`` of ``sets`` is fronted set ``i``; its candidates are ``prev[start[i]:start[i+1]]``.
    Per pair ``p`` (stage ``U = sets[i] - sets[prev[p]]``): ``base_s[p]`` = Eq. 3 numerator
    (compute + boundary communication), ``comm_s[p]`` its boundary communication alone,
    ``param_bytes``, ``act_bytes``, ``input_bytes`` (tensors entering U), ``working_bytes``
    (largest op working memory), ``pinned[p, q]`` = U holds the q-th pinned cluster.
    """

    sets: BoolMatrix
    start: IntArray
    prev: IntArray
    base_s: FloatArray
    param_bytes: FloatArray
    act_bytes: FloatArray
    input_bytes: FloatArray
    working_bytes: FloatArray
    pinned: BoolMatrix
    pin_clusters: IntArray
    pin_stage: IntArray
    comm_s: FloatArray

    @property
    def n_pairs(self) -> int:
        return len(self.prev)


def _words(sets: BoolMatrix) -> npt.NDArray[np.uint64]:
    """Bit-pack each row into 64-bit words for fast subset tests."""
    n, k = sets.shape
    w = (k + 63) // 64
    padded = np.zeros((n, w * 64), dtype=bool)
    padded[:, :k] = sets
    packed = np.packbits(padded.reshape(n, w, 64), axis=2, bitorder="little")
    return packed.view(np.uint64).reshape(n, w)


def build_transitions(cg: ClusterGraph, sets: BoolMatrix, max_pairs: int) -> Transitions | None:
    """All DP pairs with their stage quantities; ``None`` if there are more than ``max_pairs``."""
    n = len(sets)
    words = _words(sets)
    sizes = sets.sum(axis=1)
    first_of_size = np.searchsorted(sizes, np.arange(cg.k + 2))
    cands: list[IntArray] = [np.zeros(0, dtype=np.int64)]
    total = 0
    for i in range(1, n):
        below = int(first_of_size[sizes[i]])
        sub = np.flatnonzero(((words[:below] & ~words[i]) == 0).all(axis=1))
        cands.append(sub.astype(np.int64))
        total += len(sub)
        if total > max_pairs:
            return None
    start = np.zeros(n + 1, dtype=np.int64)
    start[1:] = np.cumsum([len(c) for c in cands])
    prev = np.concatenate(cands)
    owner = np.repeat(np.arange(n), np.diff(start))
    cum = sets.astype(np.float64)
    work = cum @ cg.work_s
    params = cum @ cg.param_bytes
    acts = cum @ cg.act_bytes
    # the edges leaving each set.  Sets are down-closed and ``sets[fj]`` is inside ``sets[fi]``,
    # so for the stage U = fi - fj: an edge has exactly one end in U iff it leaves exactly one
    # of fi, fj, and enters U from outside iff it leaves fj but not fi
    leaving = sets[:, cg.src] & ~sets[:, cg.dst]
    largest = _largest_member(sets, cg.working_bytes)
    comm = np.empty(len(prev))
    inputs = np.empty(len(prev))
    working = np.empty(len(prev))
    chunk = max(1, 8_000_000 // max(1, len(cg.src)))  # pairs per block: a few large BLAS calls
    for a in range(0, len(prev), chunk):
        fi, fj = owner[a:a + chunk], prev[a:a + chunk]  # pair = (set fi, subset fj)
        out_i, out_j = leaving[fi], leaving[fj]
        comm[a:a + chunk] = (out_i ^ out_j).astype(np.float64) @ cg.comm_s
        inputs[a:a + chunk] = (out_j & ~out_i).astype(np.float64) @ cg.bytes
        working[a:a + chunk] = largest(fi, fj)
    pin_clusters = np.array([c for c, s in enumerate(cg.stage_pin) if s is not None], dtype=np.int64)
    pin_stage = np.array([cg.stage_pin[c] for c in pin_clusters.tolist()], dtype=np.int64)
    pin_sets = sets[:, pin_clusters]
    pinned = pin_sets[owner] & ~pin_sets[prev]
    return Transitions(sets, start, prev, work[owner] - work[prev] + comm, params[owner] - params[prev],
                       acts[owner] - acts[prev], inputs, working, pinned, pin_clusters, pin_stage, comm)


def with_cluster_costs(tr: Transitions, cg: ClusterGraph) -> Transitions:
    """``tr``'s pairs with the per-pair work, parameters, activations and working memory of ``cg``: the
    same hyper-operators and boundaries, each cluster with other costs (a tensor-parallel degree's,
    :mod:`solvers.parmesan.degree_dp`); the boundary communication and inputs stay ``tr``'s."""
    owner = np.repeat(np.arange(len(tr.sets)), np.diff(tr.start))
    cum = tr.sets.astype(np.float64)
    work, params, acts = cum @ cg.work_s, cum @ cg.param_bytes, cum @ cg.act_bytes
    largest = _largest_member(tr.sets, cg.working_bytes)
    working = np.empty(len(tr.prev))
    chunk = 1 << 16
    for a in range(0, len(tr.prev), chunk):
        working[a:a + chunk] = largest(owner[a:a + chunk], tr.prev[a:a + chunk])
    return dataclasses.replace(tr, base_s=work[owner] - work[tr.prev] + tr.comm_s,
                               param_bytes=params[owner] - params[tr.prev], act_bytes=acts[owner] - acts[tr.prev],
                               working_bytes=working)


def _largest_member(sets: BoolMatrix, value: FloatArray) -> Callable[[IntArray, IntArray], FloatArray]:
    """``f(fi, fj)`` = the largest ``value`` of a node in ``sets[fi]`` but not in ``sets[fj]``
    (``sets[fj]`` inside ``sets[fi]``, the difference non-empty): the rows are bit-packed with the
    nodes by decreasing value, so it is the value of the lowest set bit of ``fi & ~fj``."""
    by_value = np.argsort(-value, kind="stable")
    words = _words(sets[:, by_value])
    ranked = value[by_value]

    def largest(fi: IntArray, fj: IntArray) -> FloatArray:
        diff = words[fi] & ~words[fj]
        word = (diff != 0).argmax(axis=1)
        x = diff[np.arange(len(diff)), word]
        low = x & (~x + np.uint64(1))  # the lowest set bit alone
        bit = np.frexp(low.astype(np.float64))[1] - 1  # exact: a power of two
        out: FloatArray = ranked[word * 64 + bit]
        return out

    return largest


@dataclass(frozen=True)
class DPResult:
    """The DP's optimum: ``stages[s]`` = cluster mask of stage ``s``; ``stage_s`` = Eq. 3 times."""

    objective_s: float
    stages: list[npt.NDArray[np.bool_]]
    stage_s: list[float]

    def op_stages(self, cluster_of: IntArray) -> IntArray:
        """The stage of every op, from the stage of its cluster (``cluster_of[op]``)."""
        cluster_stage: IntArray = np.argmax(np.stack(self.stages), axis=0)
        return cluster_stage[cluster_of].astype(np.int64)


def pair_stage_s(problem: Problem, tr: Transitions, n_stages: int, stage: int, replicas: int, micro_batches: int,
                 allreduce: tuple[float, float] = (0.0, 0.0)) -> FloatArray:
    """Per pair, Eq. 3's time of its stage as stage ``stage`` of ``n_stages`` of ``replicas`` replicas
    (with the optional all-reduce term of :func:`run_dp`), ``+inf`` over memory or against a pin."""
    candidates = StageBytes(tr.param_bytes, kept_bytes(tr.act_bytes, tr.input_bytes, problem.settings.recomputes),
                            tr.working_bytes)
    mem = stage_memory_vec(problem, candidates, replicas, n_stages, stage, micro_batches)
    stage_t = tr.base_s / replicas
    if allreduce[0] > 0 or allreduce[1] > 0:
        stage_t = stage_t + np.where(tr.param_bytes > 0, allreduce[0] * tr.param_bytes + allreduce[1], 0.0)
    stage_t = np.where(mem <= stage_capacity_bytes(problem, stage), stage_t, np.inf)
    if len(tr.pin_clusters):
        need = tr.pin_stage == stage
        ok = tr.pinned[:, need].all(axis=1) & ~tr.pinned[:, ~need].any(axis=1)
        stage_t = np.where(ok, stage_t, np.inf)
    out: FloatArray = stage_t
    return out


def run_dp(problem: Problem, tr: Transitions, n_stages: int, replicas: int, micro_batches: int,
           allreduce: tuple[float, float] = (0.0, 0.0)) -> DPResult | None:
    """Eq. 13 for ``n_stages`` stages of ``replicas`` devices; ``None`` when no partition fits.

    ``allreduce`` = (seconds per parameter byte, fixed seconds) added to a stage holding
    parameters — the optional all-reduce term (not in Eq. 3; see :mod:`solvers.parmesan.search`).
    """
    n = len(tr.sets)
    nonempty = np.flatnonzero(np.diff(tr.start) > 0)
    seg_start = tr.start[nonempty]
    seg_len = np.diff(tr.start)[nonempty]
    t_prev = np.full(n, np.inf)
    t_prev[0] = 0.0
    choice: list[IntArray] = []  # choice[s][f] = pair index realising T[s+1][f] (-1: none)
    stage_times: list[FloatArray] = []  # stage_times[s][p] = time of stage s through pair p
    for s in range(n_stages):
        stage_t = pair_stage_s(problem, tr, n_stages, s, replicas, micro_batches, allreduce)
        vals = np.maximum(t_prev[tr.prev], stage_t)  # candidate T[s+1][owner] via each pair
        # per non-empty segment (the pairs of one set, contiguous), the first pair of smallest value
        lowest = np.minimum.reduceat(vals, seg_start)
        at_lowest = np.flatnonzero(vals == np.repeat(lowest, seg_len))
        firsts = at_lowest[np.searchsorted(at_lowest, seg_start)]
        t_cur = np.full(n, np.inf)
        best = np.full(n, -1, dtype=np.int64)
        t_cur[nonempty] = lowest
        best[nonempty] = firsts
        choice.append(best)
        stage_times.append(stage_t)
        t_prev = t_cur
    full = n - 1
    if not np.isfinite(t_prev[full]):
        return None
    stages: list[npt.NDArray[np.bool_]] = []
    times: list[float] = []
    i = full
    for s in range(n_stages - 1, -1, -1):
        p = int(choice[s][i])
        j = int(tr.prev[p])
        stages.append(tr.sets[i] & ~tr.sets[j])
        times.append(float(stage_times[s][p]))
        i = j
    stages.reverse()
    times.reverse()
    return DPResult(float(t_prev[full]), stages, times)


def stage_base_s(cg: ClusterGraph, inside: npt.NDArray[np.bool_]) -> float:
    """Eq. 3 numerator of one stage (cluster mask ``inside``): compute + boundary communication."""
    cross = inside[cg.src] ^ inside[cg.dst]
    return float(cg.work_s[inside].sum() + cg.comm_s[cross].sum())
