"""Algorithm 1 (RaNNC §III-C) with a tensor-parallel degree per stage.

:func:`.stage_dp.form_stage_dp` gives every stage a replica count of one kind of unit (devices,
or groups of one degree ``t``).  Here stage ``s`` chooses its degree ``t`` and its replica count
``r`` together and takes ``t x r`` of the devices the DP tracks (docs/tensor-parallel.md,
"Search"): ``V[s, b, d]`` is the paper's value over ``s`` stages holding blocks ``1..b`` on the
first ``d`` device positions of a pipeline copy, and a stage of degree ``t`` on positions
``d' .. d - 1`` is profiled by the degree-``t`` tables at ``r = (d - d') / t`` groups.

Groups are the degree's groups of RaNNC's node layout (:func:`.allocate.tp_layout`: each node's
locality chain cut into runs of ``t``), so a stage of degree ``t`` starts at a position ``d'``
that ``t`` divides: its groups are then runs of that layout, group position ``d' / t`` onwards,
which is where the degree's profile (slowest device and ring over those runs) and its all-reduce
table (rank 0 of each group) were taken.  The rest is :func:`.stage_dp.form_stage_dp`'s: the
memory check per stage (and its relaxation, :func:`.stage_dp.fewest_devices`, which refuses a
call no split can fit before the DP runs), every stage holding a block that computes, one (max
forward, max backward) pair per cell, no device left idle unless ``idle_ok`` (fixed replica counts).  No
``d_min`` pruning: with aligned starts more devices can hurt.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solvers.arrays import BoolArray, FloatArray
from solvers.rannc.stage_dp import AllReduceTable, StageSolution, StageTables, fewest_devices, fitting_counts


@dataclass(frozen=True)
class DegreeTables:
    """One degree's candidate stages: ``tables`` indexed ``[r, b', b]`` with ``r`` in groups of the
    degree per copy, ``allowed[r]`` (a stage may have ``r`` groups per copy), and the all-reduce over
    group positions (``None``: not charged)."""

    tables: StageTables
    allowed: BoolArray
    allreduce: AllReduceTable | None


@dataclass(frozen=True)
class MixedSolution(StageSolution):
    """A :class:`~.stage_dp.StageSolution` whose ``replicas[i]`` counts groups of ``degrees[i]`` devices
    per copy (stage ``i`` takes ``degrees[i] * replicas[i]`` device positions)."""

    degrees: tuple[int, ...]


def form_mixed_stage_dp(degrees: dict[int, DegreeTables], n_stages: int, n_devices: int, cap_bytes: FloatArray,
                        in_flight: FloatArray, computes: BoolArray | None = None,
                        idle_ok: bool = False) -> MixedSolution | None:
    """Stages, their degrees and replica counts minimising max forward + max backward (module doc).

    ``degrees[t]``: the tables of stages of degree ``t``; ``cap_bytes[s]`` / ``in_flight[s]``: usable
    memory and micro-batches in flight of stage ``s``; ``computes[j]``: block ``j + 1`` computes;
    ``idle_ok``: the stages may leave devices of the copy unused.  ``None`` when infeasible.
    """
    S, D = n_stages, n_devices
    K = next(iter(degrees.values())).tables.n_blocks
    low = min(degrees)
    working = np.r_[0, np.cumsum(np.ones(K, dtype=bool) if computes is None else computes)]
    if S < 1 or S > K or S * low > D or working[K] < S:
        return None

    def need(s: int) -> FloatArray:  # [b', b]: the fewest device positions stage s may take (aligned starts left out)
        out = np.full((K + 1, K + 1), np.inf)
        for t, deg in degrees.items():
            out = np.minimum(out, t * fitting_counts(deg.tables, (D - (S - 1) * low) // t, deg.allowed,
                                                     cap_bytes[s], in_flight[s]))
        return out

    if fewest_devices(need, S, working) > D:
        return None  # no stage sequence fits in memory on D positions: the DP below would find nothing
    # V[s, b, d]: best max-fwd + max-bwd of s stages holding blocks 1..b on positions 0..d-1 (inf: none)
    V = np.full((S + 1, K + 1, D + 1), np.inf)
    V[0, 0, 0] = 0.0
    # TF / TB[s, b, d]: the max forward / backward stage time of the solution stored in V
    TF, TB = np.zeros_like(V), np.zeros_like(V)
    # CB / CD / CT[s, b, d]: b', d' and the degree of the best last stage (for backtracking)
    CB, CD, CT = (np.full((S + 1, K + 1, D + 1), -1, dtype=np.int64) for _ in range(3))
    for s in range(1, S + 1):
        d_hi = D - (S - s) * low  # the later stages need a position each at the least
        b_values = range(s, K - S + s + 1) if s < S else range(K, K + 1)
        for t in sorted(degrees):  # ascending: a tie keeps the lower degree
            deg = degrees[t]
            dp = np.arange(0, d_hi - t + 1, t)  # d' candidates: starts that t divides
            ds = np.arange(t, d_hi + 1, t)  # d candidates
            if s == S and not idle_ok:
                ds = ds[ds == D]
            if len(ds) == 0 or len(dp) == 0:
                continue
            r_all = (ds[None, :] - dp[:, None]) // t  # [d', d] groups of stage s
            r = np.clip(r_all, 0, deg.tables.max_replicas)
            fits = (r_all >= 1) & (r_all <= deg.tables.max_replicas) & deg.allowed[r]  # [d', d]
            if deg.allreduce is not None:  # [d', d] seconds per parameter byte and fixed, at group positions
                grid = np.ix_(dp // t, ds // t)
                per_byte, fixed = deg.allreduce.per_byte_s[grid], deg.allreduce.fixed_s[grid]
            for b in b_values:
                bp = np.arange(s - 1, b)  # b' candidates
                at = (r[None], bp[:, None, None], b)  # -> [b', d', d]
                f, bw = deg.tables.fwd_s[at], deg.tables.bwd_s[at]
                if deg.allreduce is not None:
                    params = deg.allreduce.param_bytes[bp, b][:, None, None]
                    bw = bw + np.where(params > 0, params * per_byte[None] + fixed[None], 0.0)
                mem = deg.tables.mem_fixed_bytes[at] + in_flight[s - 1] * deg.tables.mem_kept_bytes[at]
                cell = np.ix_(bp, dp)
                prev = V[s - 1][cell][:, :, None]
                tf = np.maximum(TF[s - 1][cell][:, :, None], f)
                tb = np.maximum(TB[s - 1][cell][:, :, None], bw)
                v = tf + tb
                ok = (fits[None] & np.isfinite(prev) & (mem <= cap_bytes[s - 1]) & np.isfinite(v)
                      & (working[b] > working[bp])[:, None, None])
                # per d, the first minimum in (b', d') row-major order
                flat = np.where(ok, v, np.inf).transpose(2, 0, 1).reshape(len(ds), -1)
                best = flat.argmin(axis=1)
                vals = flat[np.arange(len(ds)), best]
                better = np.flatnonzero(vals < V[s, b, ds])
                if len(better) == 0:
                    continue
                i, j = np.unravel_index(best[better], (len(bp), len(dp)))
                dk = ds[better]
                V[s, b, dk] = vals[better]
                TF[s, b, dk], TB[s, b, dk] = tf[i, j, better], tb[i, j, better]
                CB[s, b, dk], CD[s, b, dk], CT[s, b, dk] = bp[i], dp[j], t
    end = int(np.argmin(V[S, K])) if idle_ok else D
    if not np.isfinite(V[S, K, end]):
        return None
    bounds: list[int] = []
    reps: list[int] = []
    degs: list[int] = []
    at_b, at_d = K, end
    for s in range(S, 0, -1):
        prev_b, prev_d, t = int(CB[s, at_b, at_d]), int(CD[s, at_b, at_d]), int(CT[s, at_b, at_d])
        bounds.append(at_b)
        reps.append((at_d - prev_d) // t)
        degs.append(t)
        at_b, at_d = prev_b, prev_d
    return MixedSolution(tuple(reversed(bounds)), tuple(reversed(reps)), float(V[S, K, end]), float(TF[S, K, end]),
                         float(TB[S, K, end]), tuple(reversed(degs)))


def evaluate_mixed(degrees: dict[int, DegreeTables], bounds: tuple[int, ...], replicas: tuple[int, ...],
                   stage_degrees: tuple[int, ...]) -> MixedSolution:
    """The DP's value of given stages, groups per copy and degrees, each degree's all-reduce included
    (:func:`.stage_dp.evaluate_stages` with a degree per stage)."""
    lo, d0, fwd, bwd = 0, 0, 0.0, 0.0
    for hi, r, t in zip(bounds, replicas, stage_degrees, strict=True):
        deg = degrees[t]
        b = float(deg.tables.bwd_s[r, lo, hi])
        if deg.allreduce is not None:
            b += float(deg.allreduce.seconds(np.asarray([lo]), hi, np.asarray([d0 // t]),
                                             np.asarray([d0 // t + r]))[0, 0, 0])
        fwd, bwd = max(fwd, float(deg.tables.fwd_s[r, lo, hi])), max(bwd, b)
        lo, d0 = hi, d0 + t * r
    return MixedSolution(bounds, replicas, fwd + bwd, fwd, bwd, stage_degrees)
