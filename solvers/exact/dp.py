"""The max-load DP over ideals (Tarnawski et al., NeurIPS 2020, §4: throughput maximisation).

For ``S`` stages of ``R`` replicas, with ``t(I \\ I')`` the stage time of
:mod:`solvers.exact.stage_model` (``+inf`` when the stage does not fit memory at its index)::

    T[0][∅] = 0,   T[0][I] = +inf for I ≠ ∅
    T[s][I] = min_{I' ⊊ I ideal} max(T[s-1][I'], t_{s-1}(I \\ I'))        s = 1 .. S

``T[s][I]`` = the smallest bottleneck of the first ``s`` stages when they hold exactly the ops
of ideal ``I``; the answer is ``T[S][V]`` and the stages are read back from the argmins.
Stages are non-empty (``I' ⊊ I``) and compute: a transition whose stage ``I \\ I'`` holds only
inputs and constants (:mod:`solvers.runnable`: the runtime cannot run such a stage) is not a
candidate, so ``T`` ranges over the chains whose every stage holds an op that computes
(``require_compute=False`` drops that rule, for the relaxation's bound: :mod:`solvers.exact.relax`).

Pruning (a branch-and-bound on an incumbent ``UB``, the warm start's bottleneck in the same
model, which the optimum cannot exceed): a stage with ``W(U)/R > UB`` is never built, so for
each ``I`` only the ideals ``I'`` with ``W(I') >= W(I) - R·UB`` are candidates (found by a
binary search on the ideals sorted by work, then a packed-bit subset test); a pair whose full
stage time exceeds ``UB`` is dropped; and ``T[s][I]`` is only kept where the work left after
``I`` fits the remaining ``S - s`` stages (``W(V) - W(I) <= (S - s)·R·UB``) and the work of ``I``
fits ``s`` stages.  None of these removes an optimal chain.

Cost: building the pairs is ``O(N · (c·w + c·(|V| + |E|)))`` for ``N`` ideals, ``c`` candidates
per ideal and ``w`` 64-bit words per ideal (the ``|V| + |E|`` factor only with traffic); the DP
itself is ``O(S · P · log P)`` for ``P`` pairs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solvers.arrays import BoolArray, FloatArray, IntArray
from solvers.cost.memory import kept_bytes
from solvers.exact.ideals import Ideals, subsets_among
from solvers.exact.stage_model import StageModel

BoolMatrix = BoolArray
_TOL = 1e-9


@dataclass(frozen=True)
class Pairs:
    """Every kept transition ``I' -> I`` (stage ``U = I \\ I'``), grouped by ``I`` ascending.

    Per pair ``p``: ``prev[p]`` = ``I'`` (int32), ``time_s[p]`` = stage time, ``computes[p]`` = the
    stage holds an op that computes (``StageModel.computes``),
    ``fixed_bytes[p]`` = ``P(U)·(1 + opt) + work_mem(U) / R``, ``kept_bytes[p]`` = ``kept(U) / R``
    (memory at stage index ``s``: ``fixed + k_s · kept``; both ``None`` when no stage can exceed
    the memory).  Group ``j`` holds pairs ``starts[j] .. starts[j+1] - 1``, all with ``I = heads[j]``.
    """

    prev: npt.NDArray[np.int32]
    heads: IntArray
    starts: IntArray
    time_s: FloatArray
    computes: BoolArray
    fixed_bytes: FloatArray | None
    kept_bytes: FloatArray | None

    @property
    def count(self) -> int:
        return len(self.prev)


@dataclass(frozen=True)
class DPResult:
    """The optimum ``bottleneck_s``, the chain of ideals ``chain`` (``∅ = chain[0] ⊂ ... ⊂ V``) and
    each stage's time ``stage_times_s`` in the DP's model; ``fewer_stages_s`` = the least
    bottleneck of fewer non-empty stages covering every op (a relaxation's bound needs it:
    :mod:`solvers.exact.relax`)."""

    bottleneck_s: float
    chain: list[int]
    stage_times_s: list[float]
    fewer_stages_s: float = float("inf")  # min over s < S of T[s][V] (inf: none, or above the cap)


def ideal_sums(ideals: Ideals, values: FloatArray, chunk: int = 4096) -> FloatArray:
    """``out[i]`` = sum of ``values`` over the ops of ideal ``i``."""
    out = timed_ideal_sums(ideals, values, float("inf"), chunk)
    assert out is not None
    return out


def timed_ideal_sums(ideals: Ideals, values: FloatArray, deadline: float, chunk: int = 4096) -> FloatArray | None:
    """:func:`ideal_sums`, or ``None`` once the ``deadline`` (monotonic clock) has passed."""
    out = np.empty(ideals.count)
    for a in range(0, ideals.count, chunk):
        if time.monotonic() > deadline:
            return None
        rows = np.arange(a, min(a + chunk, ideals.count))
        out[rows] = ideals.members(rows) @ values
    return out


def _traffic_bytes(model: StageModel, inside: npt.NDArray[np.bool_], prev: BoolMatrix) -> tuple[FloatArray, FloatArray]:
    """(forward bytes out of, backward bytes into) each stage ``inside \\ prev[r]`` (stage_model doc)."""
    src, dst, size = model.src, model.dst, model.edge_bytes
    leave = inside[src] & ~inside[dst] & (size > 0)
    within = inside[src] & inside[dst] & (size > 0)
    out = np.zeros(len(prev))
    into = np.zeros(len(prev))
    for mask, forward in ((leave, True), (within, False)):
        if not mask.any():
            continue
        s, d, b = src[mask], dst[mask], size[mask]
        ind = ~prev[:, s] if forward else prev[:, s] & ~prev[:, d]
        starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
        per_producer = np.maximum.reduceat(ind * b, starts, axis=1)
        if forward:
            out = per_producer.sum(axis=1)
        else:
            into = per_producer.sum(axis=1)
    return out, into


def build_pairs(ideals: Ideals, model: StageModel, work_s: FloatArray, replicas: int, upper_s: float,
                max_pairs: int, deadline: float = float("inf"), with_memory: bool = True) -> Pairs | None:
    """Every transition whose stage time is at most ``upper_s``; ``None`` past ``max_pairs`` or
    the ``deadline`` (monotonic clock).  ``with_memory=False``: no stage can exceed memory, the
    memory columns are skipped."""
    act = timed_ideal_sums(ideals, model.act_bytes, deadline) if with_memory else np.zeros(ideals.count)
    params = timed_ideal_sums(ideals, model.param_bytes, deadline) if with_memory else np.zeros(ideals.count)
    computing = timed_ideal_sums(ideals, model.computes.astype(np.float64), deadline)
    if act is None or params is None or computing is None:
        return None
    sums = _IdealSums(act, params)
    by_work = np.argsort(work_s, kind="stable")
    sorted_work = work_s[by_work]
    limit = upper_s * (1 + _TOL) + 1e-15
    parts: list[_Part] = []
    heads: list[int] = []
    total = 0
    for i in range(1, ideals.count):
        if i % 16 == 0 and time.monotonic() > deadline:
            return None
        lo = np.searchsorted(sorted_work, work_s[i] - replicas * limit, side="left")
        hi = np.searchsorted(sorted_work, work_s[i], side="right")
        cands = by_work[lo:hi]
        cands = subsets_among(ideals, i, np.sort(cands[ideals.size[cands] < ideals.size[i]]))
        if len(cands) == 0:
            continue
        time_s, fixed, kept = _stage_terms(ideals, model, work_s, sums, i, cands, replicas, with_memory)
        keep = time_s <= limit
        if not keep.any():
            continue
        parts.append((cands[keep].astype(np.int32), time_s[keep], computing[i] - computing[cands[keep]] > 0.5,
                      None if fixed is None else fixed[keep], None if kept is None else kept[keep]))
        heads.append(i)
        total += int(keep.sum())
        if total > max_pairs:
            return None
    return _concat(parts, heads, with_memory)


@dataclass(frozen=True)
class _IdealSums:
    """Activation and parameter bytes summed over each ideal (stages are differences of these)."""

    act_bytes: FloatArray
    param_bytes: FloatArray


def _stage_terms(ideals: Ideals, model: StageModel, work_s: FloatArray, sums: _IdealSums, i: int,
                 cands: IntArray, replicas: int, with_memory: bool
                 ) -> tuple[FloatArray, FloatArray | None, FloatArray | None]:
    """(stage time, fixed memory, kept memory per in-flight micro-batch) of ``I_i \\ I_c`` per candidate."""
    time_s = (work_s[i] - work_s[cands]) / replicas
    traffic = model.has_traffic
    if not traffic and not with_memory:
        return time_s, None, None  # compute only: the bit matrices are not needed
    inside = ideals.members(np.array([i]))[0]
    prev = ideals.members(cands)
    in_b = np.zeros(len(cands))
    if (model.edge_bytes > 0).any():
        out_b, in_b = _traffic_bytes(model, inside, prev)
        if traffic:
            time_s = time_s + model.message_s(out_b, replicas)
            if model.training:
                time_s = time_s + model.message_s(in_b, replicas)
    if not with_memory:
        return time_s, None, None
    working = ((inside[None, :] & ~prev) * model.working_bytes).max(axis=1)
    kept = kept_bytes(sums.act_bytes[i] - sums.act_bytes[cands], in_b, model.recompute)
    return time_s, sums.param_bytes[i] - sums.param_bytes[cands] + working / replicas, kept / replicas


# one head's kept pairs: (prev, time_s, computes, fixed_bytes, kept_bytes)
_Part = tuple[npt.NDArray[np.int32], FloatArray, BoolArray, FloatArray | None, FloatArray | None]


def _concat(parts: list[_Part], heads: list[int], with_memory: bool) -> Pairs:
    empty = np.zeros(0)
    sizes = np.array([len(p[0]) for p in parts], dtype=np.int64)
    starts = np.r_[0, np.cumsum(sizes)[:-1]].astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
    fixed = [p[3] for p in parts if p[3] is not None]
    kept = [p[4] for p in parts if p[4] is not None]
    return Pairs(np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int32),
                 np.array(heads, dtype=np.int64), starts,
                 np.concatenate([p[1] for p in parts]) if parts else empty,
                 np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, dtype=bool),
                 (np.concatenate(fixed) if fixed else empty) if with_memory else None,
                 (np.concatenate(kept) if kept else empty) if with_memory else None)


def run_dp(pairs: Pairs, n_ideals: int, work_s: FloatArray, n_stages: int, replicas: int, upper_s: float,
           capacity_bytes: FloatArray, in_flight: FloatArray, require_compute: bool = True) -> DPResult | None:
    """The recurrence of the module doc; ``None`` when no chain of ``n_stages`` stages is feasible.
    ``require_compute=False``: stages of inputs and constants only are candidates too."""
    if pairs.count == 0:
        return None
    full = n_ideals - 1
    limit = replicas * (upper_s * (1 + _TOL) + 1e-15)
    total = work_s[full]
    starts, heads = pairs.starts, pairs.heads
    counts = np.diff(np.r_[starts, pairs.count])
    table = np.full(n_ideals, np.inf)
    table[0] = 0.0
    choice: list[IntArray] = []  # choice[s-1][i] = pair chosen for T[s][i] (-1: none)
    fewer = float("inf")
    for s in range(1, n_stages + 1):
        if s > 1:
            fewer = min(fewer, float(table[full]))
        value = np.maximum(table[pairs.prev], pairs.time_s)
        if require_compute:
            value = np.where(pairs.computes, value, np.inf)
        if pairs.fixed_bytes is not None and pairs.kept_bytes is not None:
            fits = pairs.fixed_bytes + in_flight[s - 1] * pairs.kept_bytes <= capacity_bytes[s - 1]
            value = np.where(fits, value, np.inf)
        best = np.minimum.reduceat(value, starts)
        at_best = np.where(value == np.repeat(best, counts), np.arange(pairs.count), pairs.count)
        first = np.minimum.reduceat(at_best, starts)
        table = np.full(n_ideals, np.inf)
        table[heads] = best
        if np.isfinite(limit):  # (no incumbent: nothing to prune, and 0 * inf is NaN)
            reachable = (work_s <= s * limit) & (total - work_s <= (n_stages - s) * limit)
            table[~reachable] = np.inf
        pick = np.full(n_ideals, -1, dtype=np.int64)
        pick[heads] = first
        choice.append(pick)
    if not np.isfinite(table[full]):
        return None
    chain = [full]
    times: list[float] = []
    for s in range(n_stages, 0, -1):
        p = int(choice[s - 1][chain[-1]])
        times.append(float(pairs.time_s[p]))
        chain.append(int(pairs.prev[p]))
    chain.reverse()
    times.reverse()
    return DPResult(float(table[full]), chain, times, fewer)


def stage_of_chain(ideals: Ideals, chain: list[int]) -> IntArray:
    """Op -> stage index of a chain of ideals (stage ``s`` = ``chain[s+1] \\ chain[s]``)."""
    members = ideals.members(np.array(chain, dtype=np.int64))
    return np.asarray(members.shape[0] - 1 - members.sum(axis=0), dtype=np.int64)
