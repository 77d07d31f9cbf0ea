"""The max-load DP over ideals with a device dimension: a tensor-parallel degree per stage.

Tarnawski et al.'s recurrence (NeurIPS 2020, §4; :mod:`solvers.exact.dp`) with PipeDream's worker
count as a third index (Narayanan et al., SOSP'19, §3.1, ``A(j, m)``).  For ``S`` stages of ``R``
replicas, a stage of degree ``t`` takes ``t`` *units* of ``R`` devices (``R`` groups of ``t``), at
most ``U = D // R`` units in all; ``t_t(U)`` is the stage time of :mod:`solvers.exact.stage_model` in
degree ``t``'s model (``+inf`` where the stage does not fit memory at its index in that model, or holds
no op that computes)::

    T[0][∅][u] = 0,   T[0][I][u] = +inf for I ≠ ∅                            (every u)
    T[s][I][u] = min over ideals I' ⊊ I and degrees t <= u of
                 max(T[s-1][I'][u - t], t_t(I \\ I'))                          s = 1 .. S

``T[s][I][u]`` = the smallest bottleneck of ``s`` stages covering exactly ideal ``I`` on at most
``u`` units; the answer is ``T[S][V][U]``, stages and degrees read back from the argmins (ties: the
lower degree, then the smallest pair index).  The pairs of each degree are :func:`solvers.exact.dp.
build_pairs`' for that degree's model, with the same incumbent window; ``T[s][I]`` is kept only where
``I``'s work, in the least model over the degrees, fits ``s`` stages under the cap and the rest fits
the ``S - s`` stages left (the reachability rule of :mod:`solvers.exact.dp`, on a work no stage of
any degree undercuts).  Cost: ``O(S · Σ_t P_t · U)`` for ``P_t`` pairs of degree ``t``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solvers.arrays import FloatArray, IntArray
from solvers.exact.dp import Pairs

_TOL = 1e-9
_BLOCK_CELLS = 1 << 21  # table cells per array operation (16 MiB of float64)


@dataclass(frozen=True)
class MixedResult:
    """The optimum ``bottleneck_s``, its chain of ideals (``∅ = chain[0] ⊂ ... ⊂ V``), each stage's
    degree and time in its degree's model; ``fewer_stages_s`` = the least bottleneck of fewer
    non-empty stages covering every op on at most ``U`` units (a relaxation's bound needs it)."""

    bottleneck_s: float
    chain: list[int]
    degrees: list[int]
    stage_times_s: list[float]
    fewer_stages_s: float = float("inf")


def run_mixed_dp(pairs: Mapping[int, Pairs], n_ideals: int, work_s: FloatArray, n_stages: int, replicas: int,
                 units: int, upper_s: float, capacity_bytes: FloatArray, in_flight: FloatArray,
                 require_compute: bool = True, deadline: float = float("inf")) -> MixedResult | None:
    """The recurrence of the module doc over ``pairs[t]`` (degree ``t``'s pairs); ``work_s[i]`` = the
    least work over the degrees summed over ideal ``i``.  ``None`` when no chain of ``n_stages`` stages
    fits ``units``, or once ``deadline`` (monotonic clock) has passed."""
    degrees = sorted(t for t, p in pairs.items() if t <= units and p.count)
    if not degrees:
        return None
    offsets = dict(zip(degrees, np.cumsum([0, *(pairs[t].count for t in degrees[:-1])]).tolist(), strict=True))
    full, smallest = n_ideals - 1, degrees[0]
    limit = replicas * (upper_s * (1 + _TOL) + 1e-15)
    table = np.full((n_ideals, units + 1), np.inf)  # table[I, u] = T[s][I][u] of the module doc
    table[0] = 0.0
    # choice[s-1] = (lo, pick): pick[I, u - lo] = the pair (offset by its degree's) chosen for T[s][I][u], -1: none
    choice: list[tuple[int, npt.NDArray[np.int32]]] = []
    fewer = float("inf")
    for s in range(1, n_stages + 1):
        if s > 1:
            fewer = min(fewer, float(table[full, units]))
        hi = units - (n_stages - s) * smallest  # the stages left need at least this many units
        nxt = np.full_like(table, np.inf)
        pick = np.full(table.shape, -1, dtype=np.int32)
        for t in degrees:
            if time.monotonic() > deadline:
                return None
            p = pairs[t]
            ok = p.computes if require_compute else np.ones(p.count, dtype=bool)
            if p.fixed_bytes is not None and p.kept_bytes is not None:
                ok = ok & (p.fixed_bytes + in_flight[s - 1] * p.kept_bytes <= capacity_bytes[s - 1])
            _relax(table, nxt, pick, p, t, hi, ok, offsets[t])
        if np.isfinite(limit):
            reachable = (work_s <= s * limit) & (work_s[full] - work_s <= (n_stages - s) * limit)
            nxt[~reachable] = np.inf
        lo = s * smallest
        choice.append((lo, pick[:, lo:hi + 1].copy()))
        table = nxt
    if not np.isfinite(table[full, units]):
        return None
    chain, degs, times, u = [full], [], [], units
    for s in range(n_stages, 0, -1):
        lo, pk = choice[s - 1]
        q = int(pk[chain[-1], u - lo])
        t = max(d for d in degrees if offsets[d] <= q and pairs[d].count)  # the degree whose pairs hold q
        local = q - offsets[t]
        degs.append(t)
        times.append(float(pairs[t].time_s[local]))
        chain.append(int(pairs[t].prev[local]))
        u -= t
    chain.reverse()
    degs.reverse()
    times.reverse()
    return MixedResult(float(table[full, units]), chain, degs, times, fewer)


def _relax(table: FloatArray, nxt: FloatArray, pick: npt.NDArray[np.int32], p: Pairs, t: int, hi: int,
           ok: npt.NDArray[np.bool_], offset: int) -> None:
    """``nxt[I, u] = min(nxt[I, u], max(table[I', u - t], time(I', I)))`` over degree ``t``'s pairs and
    ``u = t .. hi``, recording the pair in ``pick``; in blocks of whole head groups."""
    width = hi - t + 1
    if width <= 0:
        return
    n_groups = len(p.heads)
    ends = np.r_[p.starts[1:], p.count].astype(np.int64)
    per = max(1, _BLOCK_CELLS // width)  # pairs per block
    g = 0
    while g < n_groups:
        h = min(n_groups, max(g + 1, int(np.searchsorted(p.starts, p.starts[g] + per, side="left"))))
        a, b = int(p.starts[g]), int(ends[h - 1])
        value = np.maximum(table[p.prev[a:b], :width], p.time_s[a:b, None])
        value[~ok[a:b]] = np.inf
        local = (p.starts[g:h] - a).astype(np.int64)
        best = np.minimum.reduceat(value, local, axis=0)
        at_best = np.where(value == np.repeat(best, ends[g:h] - p.starts[g:h], axis=0),
                           np.arange(a, b)[:, None], p.count)
        first = np.minimum.reduceat(at_best, local, axis=0) + offset
        rows: IntArray = p.heads[g:h]
        cur = nxt[rows, t:hi + 1]
        chosen = pick[rows, t:hi + 1]
        better = best < cur
        cur[better] = best[better]
        chosen[better] = first[better]
        nxt[rows, t:hi + 1] = cur
        pick[rows, t:hi + 1] = chosen
        g = h
