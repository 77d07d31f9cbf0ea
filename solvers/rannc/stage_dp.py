"""Stage-level partitioning, Algorithm 1 ``form_stage_dp`` (RaNNC §III-C).

The kernel :func:`form_stage_dp` is a pure function over profile tables.  Blocks are
1-based as in the paper: a stage ``(b', b]`` holds blocks ``B_{b'+1} .. B_b``; ``r`` is its
number of replicas in DP units (the paper's ``d - d'``; the final count is ``r x R``).

Choices where the paper is loose (docs/rannc.md): ``V_{0,b,d}`` is 0 only for ``b = d = 0``
(no stage may skip blocks or leave devices idle), and at ``s = S`` only ``b = |B|`` and
``d = D`` are computed (the other cells cannot change ``V_{S,|B|,D}``).  Placer's rule: a stage
must hold a block that computes (``computes``; :mod:`solvers.runnable`: a stage of inputs and
constants only cannot run), so a range ``(b', b]`` without one is not a candidate stage.

Placer adds one term the paper's ``h`` leaves out (docs/rannc.md, "What the DP charges"): the
data-parallel gradient all-reduce of a stage's parameters over its replicas, which the
simulator runs after the stage's last backward.  It depends on where the stage sits (``d'``
and ``d`` fix its devices, see :mod:`.allocate`), so it is an :class:`AllReduceTable` over
``(b', b)`` and ``(d', d)``, spread over the iteration's micro-batches and added to ``t^b``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from solvers.arrays import BoolArray, FloatArray, IntArray


@dataclass(frozen=True)
class StageTables:
    """Profiles of every candidate stage, indexed ``[r, b', b]`` (``0 <= b' < b <= |B|``).

    ``fwd_s`` / ``bwd_s``: execution time per micro-batch (compute + transfer of outputs /
    gradients); ``mem_fixed_bytes``: parameters with optimizer state plus working memory;
    ``mem_kept_bytes``: activations kept per in-flight micro-batch.  ``inf`` where undefined.
    """

    fwd_s: FloatArray
    bwd_s: FloatArray
    mem_fixed_bytes: FloatArray
    mem_kept_bytes: FloatArray

    @property
    def n_blocks(self) -> int:
        return int(self.fwd_s.shape[1]) - 1

    @property
    def max_replicas(self) -> int:
        return int(self.fwd_s.shape[0]) - 1


@dataclass(frozen=True)
class AllReduceTable:
    """All-reduce per micro-batch of a stage ``(b', b]`` on devices ``d' .. d - 1`` of every copy.

    ``param_bytes[b', b] * per_byte_s[d', d] + fixed_s[d', d]`` (0 where ``param_bytes`` is 0):
    the ring all-reduce of the cost model (Parmesan Eq. 9) is linear in the bytes.  Both time
    tables are already divided by the micro-batch count.
    """

    param_bytes: FloatArray
    per_byte_s: FloatArray
    fixed_s: FloatArray

    def seconds(self, bp: IntArray, b: int, dp: IntArray, d: IntArray) -> FloatArray:
        """``[len(bp), len(dp), len(d)]`` all-reduce seconds per micro-batch of the candidate stages."""
        params = self.param_bytes[bp, b][:, None, None]
        grid = np.ix_(dp, d)
        ar = params * self.per_byte_s[grid][None] + self.fixed_s[grid][None]
        return np.where(params > 0, ar, 0.0)


@dataclass(frozen=True)
class StageSolution:
    """``bounds[i]`` = ``b_{i+1}`` (last block of stage i, 1-based); ``replicas[i]`` in DP units."""

    bounds: tuple[int, ...]
    replicas: tuple[int, ...]
    value_s: float  # V_{S,|B|,D} = max forward + max backward (all-reduce share included)
    fwd_max_s: float
    bwd_max_s: float


def form_stage_dp(tables: StageTables, n_stages: int, n_devices: int, cap_bytes: FloatArray,
                  in_flight: FloatArray, allowed: BoolArray | None = None, prune: bool = True,
                  allreduce: AllReduceTable | None = None, computes: BoolArray | None = None) -> StageSolution | None:
    """Algorithm 1: stages and per-stage replica counts minimising max fwd + max bwd.

    ``cap_bytes[s]`` / ``in_flight[s]``: usable memory and micro-batches in flight of stage
    ``s`` (0-based); ``allowed[r]``: whether a stage may have ``r`` replicas; ``prune``: the
    ``d_min`` pruning of lines 30-33 (off when ``allowed`` excludes some counts);
    ``allreduce``: the gradient all-reduce per micro-batch added to a stage's backward time
    (``None``: the paper's ``h``, compute and outbound transfer only); ``computes[j]``: block
    ``j + 1`` computes, and every stage must hold one (``None``: every block computes).  ``None``
    when infeasible.
    """
    S, D, K = n_stages, n_devices, tables.n_blocks
    if S < 1 or S > K or S > D or tables.max_replicas + S - 1 < D:
        return None
    if allowed is None:
        allowed = np.ones(tables.max_replicas + 1, dtype=bool)
    # working[b] = blocks 1..b that compute: a stage (b', b] computes iff working[b] > working[b']
    working = np.r_[0, np.cumsum(np.ones(K, dtype=bool) if computes is None else computes)]
    if working[K] < S:
        return None
    if min_devices(tables, S, D, cap_bytes, in_flight, allowed, working) > D:
        return None  # no stage sequence fits in memory with D devices: the DP below would find nothing
    # d_min pruning assumes that more devices never hurt; a fixed replica count breaks that, and so
    # does a cell left empty by the stages' compute rule rather than by the devices
    prune = prune and bool(allowed[1:].all()) and bool(working[K] == K)
    # V[s, b, d]: best max-fwd + max-bwd of s stages holding blocks 1..b on d devices (inf: none)
    V = np.full((S + 1, K + 1, D + 1), np.inf)
    V[0, 0, 0] = 0.0
    # TF / TB[s, b, d]: the max forward / backward stage time of the solution stored in V
    TF = np.zeros_like(V)
    TB = np.zeros_like(V)
    # CB / CD[s, b, d]: b' and d' of the best last stage (for backtracking)
    CB = np.full((S + 1, K + 1, D + 1), -1, dtype=np.int64)
    CD = np.full((S + 1, K + 1, D + 1), -1, dtype=np.int64)
    d_min = 1
    for s in range(1, S + 1):
        b_values = range(s, K - S + s + 1) if s < S else range(K, K + 1)
        for b in b_values:
            # the paper's loop over d (descending) is vectorised: every d of this (s, b) at once
            d_hi, d_lo = (D - (S - s), max(d_min, s)) if s < S else (D, D)
            if d_hi < d_lo:
                continue
            ds = np.arange(d_hi, d_lo - 1, -1)  # d, descending
            bp = np.arange(s - 1, b)  # b' candidates
            dp = np.arange(s - 1, d_hi)  # d' candidates of the largest d; d' < d is masked below
            r_all = ds[None, :] - dp[:, None]  # [d', d] replicas of stage s
            r = np.clip(r_all, 0, None)
            at = (r[None], bp[:, None, None], b)  # -> [b', d', d]
            f = tables.fwd_s[at]
            bw = tables.bwd_s[at]
            if allreduce is not None:
                bw = bw + allreduce.seconds(bp, b, dp, ds)
            mem = tables.mem_fixed_bytes[at] + in_flight[s - 1] * tables.mem_kept_bytes[at]
            cell = np.ix_(bp, dp)
            prev = V[s - 1][cell][:, :, None]
            tf = np.maximum(TF[s - 1][cell][:, :, None], f)
            tb = np.maximum(TB[s - 1][cell][:, :, None], bw)
            v = tf + tb
            ok = (((r_all >= 1) & allowed[r])[None] & np.isfinite(prev) & (mem <= cap_bytes[s - 1]) & np.isfinite(v)
                  & (working[b] > working[bp])[:, None, None])
            has = ok.any(axis=(0, 1))
            if prune and not has.all():
                stop = int(np.argmin(has))  # the largest d without a solution: lines 30-33
                d_min = int(ds[stop]) + 1
                has[stop:] = False
            keep = np.flatnonzero(has)
            if len(keep) == 0:
                continue
            # per d, the first minimum in (b', d') row-major order, as the scalar loop finds it
            flat = np.where(ok, v, np.inf).transpose(2, 0, 1).reshape(len(ds), -1)[keep]
            best = flat.argmin(axis=1)
            i, j = np.unravel_index(best, (len(bp), len(dp)))
            dk = ds[keep]
            V[s, b, dk] = flat[np.arange(len(keep)), best]
            TF[s, b, dk], TB[s, b, dk] = tf[i, j, keep], tb[i, j, keep]
            CB[s, b, dk], CD[s, b, dk] = bp[i], dp[j]
    if not np.isfinite(V[S, K, D]):
        return None
    bounds: list[int] = []
    reps: list[int] = []
    at_b, at_d = K, D
    for s in range(S, 0, -1):
        prev_b, prev_d = int(CB[s, at_b, at_d]), int(CD[s, at_b, at_d])
        bounds.append(at_b)
        reps.append(at_d - prev_d)
        at_b, at_d = prev_b, prev_d
    return StageSolution(tuple(reversed(bounds)), tuple(reversed(reps)), float(V[S, K, D]),
                         float(TF[S, K, D]), float(TB[S, K, D]))


def min_devices(tables: StageTables, n_stages: int, n_devices: int, cap_bytes: FloatArray, in_flight: FloatArray,
                allowed: BoolArray, working: IntArray) -> float:
    """The fewest devices any ``n_stages`` stages over all blocks need to fit in memory (``inf``: none).

    A relaxation of Algorithm 1's memory check that drops its objective and keeps its rules: a
    stage ``(b', b]`` at position ``s`` needs the smallest allowed ``r`` with which it fits
    (``mem_fixed + in_flight[s] * mem_kept <= cap[s]``), and must hold a block that computes;
    the stages' counts add up.  Every solution of :func:`form_stage_dp` is such a sequence with
    at least those counts, so a result above ``D`` proves the DP infeasible, at a cost of
    ``O(S |B|^2 R)`` comparisons where the DP indexes ``O(S |B|^2 D^2)`` cells.
    """
    R = min(tables.max_replicas, n_devices - n_stages + 1)
    return fewest_devices(lambda s: fitting_counts(tables, R, allowed, cap_bytes[s], in_flight[s]), n_stages, working)


def fitting_counts(tables: StageTables, max_r: int, allowed: BoolArray, cap_bytes: float,
                   in_flight: float) -> FloatArray:
    """``[b', b]``: the smallest allowed ``r <= max_r`` with which the stage ``(b', b]`` fits (``inf``: none)."""
    R = min(max_r, tables.max_replicas, len(allowed) - 1)
    if R < 1:
        return np.full(tables.fwd_s.shape[1:], np.inf)
    ok = allowed[1: R + 1, None, None]
    fits = (tables.mem_fixed_bytes[1: R + 1] + in_flight * tables.mem_kept_bytes[1: R + 1] <= cap_bytes) & ok
    return np.where(fits.any(axis=0), 1.0 + np.argmax(fits, axis=0), np.inf)


def fewest_devices(need: Callable[[int], FloatArray], n_stages: int, working: IntArray) -> float:
    """Min over block splits into ``n_stages`` stages, each holding a block that computes, of the sum of
    ``need(s)[b', b]`` (devices stage ``s`` needs to hold ``(b', b]``); ``inf`` when no split has a finite sum."""
    K = len(working) - 1
    computes = working[None, :] > working[:, None]  # [b', b]: the range (b', b] holds a block that computes
    best = np.full(K + 1, np.inf)  # best[b]: fewest devices of the stages so far over blocks 1..b
    best[0] = 0.0
    for s in range(n_stages):  # a stage holds at least one block (computes: b > b'), so best[b] stays inf for b <= s
        best = (best[:, None] + np.where(computes, need(s), np.inf)).min(axis=0)
    return float(best[K])


def pipeline_estimate_s(solution: StageSolution, n_stages: int, micro_batches: int) -> float:
    """Iteration time the DP's value implies: ``(MB + S - 1) (max t^f + max t^b)``.

    The simulator's closed form for ``S`` equal stages (docs/simulator.md) applied to the
    bottleneck: ``MB`` micro-batches through the slowest stage plus the pipeline's fill and
    drain of ``S - 1`` steps.  The all-reduce share in ``t^b`` is counted per step.  Placer's
    addition: Algorithm 1 compares solutions of one ``S`` and ``MB``, where this factor is a
    constant; Algorithm 2 compares across them.
    """
    return (micro_batches + n_stages - 1) * solution.value_s


def evaluate_stages(tables: StageTables, bounds: tuple[int, ...], replicas: tuple[int, ...],
                    allreduce: AllReduceTable | None = None) -> StageSolution:
    """The DP's value (lines 21-23) of given stages and replica counts, all-reduce included."""
    lo, d0, fwd, bwd = 0, 0, 0.0, 0.0
    for hi, r in zip(bounds, replicas, strict=True):
        b = float(tables.bwd_s[r, lo, hi])
        if allreduce is not None:
            b += float(allreduce.seconds(np.asarray([lo]), hi, np.asarray([d0]), np.asarray([d0 + r]))[0, 0, 0])
        fwd, bwd = max(fwd, float(tables.fwd_s[r, lo, hi])), max(bwd, b)
        lo, d0 = hi, d0 + r
    return StageSolution(bounds, replicas, fwd + bwd, fwd, bwd)
