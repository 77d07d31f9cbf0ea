"""Algorithm 1 with a tensor-parallel degree per stage against brute force over blocks, degrees and replicas."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.rannc.mixed_dp import DegreeTables, evaluate_mixed, form_mixed_stage_dp
from solvers.rannc.stage_dp import AllReduceTable
from tests.solvers.rannc.test_stage_dp import _compositions, _tables
from tests.strategies import examples

Case = tuple[dict[int, DegreeTables], int, int, np.ndarray, np.ndarray, np.ndarray, bool]


def _stages(k: int, n_stages: int, n_devices: int, degrees: list[int], idle_ok: bool
            ) -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """Every (bounds, groups per stage, degrees) whose stages start at a position their degree divides and
    use all ``n_devices`` positions (at most that many with ``idle_ok``)."""
    out = []
    for sizes in _compositions(k, n_stages):
        bounds = tuple(np.cumsum(sizes).tolist())
        for degs in itertools.product(degrees, repeat=n_stages):
            for reps in itertools.product(range(1, n_devices + 1), repeat=n_stages):
                pos, aligned = 0, True
                for t, r in zip(degs, reps, strict=True):
                    aligned &= pos % t == 0
                    pos += t * r
                if aligned and (pos == n_devices or (idle_ok and pos < n_devices)):
                    out.append((bounds, reps, degs))
    return out


def _value(case: Case, bounds: tuple[int, ...], reps: tuple[int, ...], degs: tuple[int, ...]) -> float:
    """max forward + max backward (all-reduce included) of the stages, ``inf`` where one breaks a rule."""
    degrees, _, _, caps, in_flight, computes, _ = case
    lo, pos, fmax, bmax = 0, 0, 0.0, 0.0
    for s, (hi, r, t) in enumerate(zip(bounds, reps, degs, strict=True)):
        deg = degrees[t]
        tab = deg.tables
        if r > tab.max_replicas or not deg.allowed[r] or not computes[lo:hi].any():
            return float("inf")
        if tab.mem_fixed_bytes[r, lo, hi] + in_flight[s] * tab.mem_kept_bytes[r, lo, hi] > caps[s]:
            return float("inf")
        bwd = tab.bwd_s[r, lo, hi]
        if deg.allreduce is not None:
            ar = deg.allreduce
            params = ar.param_bytes[lo, hi]
            bwd += params * ar.per_byte_s[pos // t, pos // t + r] + ar.fixed_s[pos // t, pos // t + r] if params else 0.0
        fmax, bmax = max(fmax, tab.fwd_s[r, lo, hi]), max(bmax, bwd)
        lo, pos = hi, pos + t * r
    return fmax + bmax


@st.composite
def instances(draw: st.DrawFn, proportional: bool) -> Case:
    k = draw(st.integers(1, 5))
    n_stages = draw(st.integers(1, min(k, 3)))
    n_devices = draw(st.integers(n_stages, 6))
    vals = st.sampled_from([0.5, 1.0, 2.0, 3.0, 5.0, 8.0])
    fwd = [draw(vals) for _ in range(k)]
    params = [draw(vals) for _ in range(k)]
    acts = [draw(vals) for _ in range(k)]
    degrees = {}
    for t in draw(st.sampled_from([(1, 2), (1, 2, 4), (2, 4)])):
        speedup = draw(st.sampled_from([0.6, 0.9, 1.0])) * t  # a group of t: its ops split t ways, with overhead
        f = [x / speedup for x in fwd]
        b = [2 * x for x in f] if proportional else [draw(vals) / speedup for _ in range(k)]
        out = [0.0] * k if proportional else [draw(st.sampled_from([0.0, 0.5, 2.0])) for _ in range(k)]
        units = n_devices // t
        tables = _tables(f, b, [p / t for p in params], [a / t for a in acts], out, max(1, units))
        allowed = np.asarray([r > 0 and (draw(st.booleans()) or r == 1) for r in range(tables.max_replicas + 1)])
        allreduce = None
        if not proportional:
            cp = np.r_[0.0, np.cumsum(params)] / t
            param_bytes = np.triu(cp[None, :] - cp[:, None], 1)
            per_byte = np.triu(np.full((units + 1, units + 1), draw(st.sampled_from([0.0, 0.1, 0.5]))), 1)
            fixed = np.triu(np.full((units + 1, units + 1), draw(st.sampled_from([0.0, 0.3]))), 1)
            allreduce = AllReduceTable(param_bytes, per_byte, fixed)
        degrees[t] = DegreeTables(tables, allowed, allreduce)
    cap = draw(st.sampled_from([6.0, 12.0, np.inf]))
    caps = np.full(n_stages, cap)
    in_flight = np.asarray([n_stages - s for s in range(n_stages)], dtype=np.float64)
    computes = np.asarray(draw(st.lists(st.booleans(), min_size=k, max_size=k))) | (np.arange(k) == k - 1)
    return degrees, n_stages, n_devices, caps, in_flight, computes, draw(st.booleans())


def _solve_and_brute(case: Case) -> tuple[object, float]:
    degrees, n_stages, n_devices, caps, in_flight, computes, idle_ok = case
    sol = form_mixed_stage_dp(degrees, n_stages, n_devices, caps, in_flight, computes, idle_ok)
    k = next(iter(degrees.values())).tables.n_blocks
    best = min((_value(case, *stages) for stages in _stages(k, n_stages, n_devices, sorted(degrees), idle_ok)),
               default=float("inf"))
    return sol, best


@settings(max_examples=examples(150), deadline=None)
@given(instances(proportional=True))
def test_the_degree_per_stage_dp_equals_brute_force_when_backward_is_proportional(case: Case) -> None:
    """Backward twice the forward everywhere: one (max forward, max backward) pair per cell loses nothing, so the
    DP is the optimum over every split, degree and replica count per stage (memory, rows, compute rules kept)."""
    sol, best = _solve_and_brute(case)
    if not np.isfinite(best):
        assert sol is None
        return
    assert sol is not None
    assert sol.value_s == pytest.approx(best)
    assert _value(case, sol.bounds, sol.replicas, sol.degrees) == pytest.approx(sol.value_s)
    used = sum(t * r for t, r in zip(sol.degrees, sol.replicas, strict=True))
    assert used == case[2] or (case[6] and used < case[2])


@settings(max_examples=examples(150), deadline=None)
@given(instances(proportional=False))
def test_the_degree_per_stage_dp_is_feasible_and_bounded_by_brute_force(case: Case) -> None:
    """With the all-reduce and unrelated backward times the DP is a heuristic: it finds a solution exactly when
    one exists, values it truly (as :func:`evaluate_mixed` does) and never below the optimum."""
    sol, best = _solve_and_brute(case)
    assert (sol is None) == (not np.isfinite(best))
    if sol is not None:
        assert _value(case, sol.bounds, sol.replicas, sol.degrees) == pytest.approx(sol.value_s)
        assert sol.value_s >= best - 1e-9
        again = evaluate_mixed(case[0], sol.bounds, sol.replicas, sol.degrees)
        assert again.value_s == pytest.approx(sol.value_s) and again.degrees == sol.degrees


def test_a_stage_of_degree_two_starts_where_two_divides_the_position() -> None:
    """Three one-block stages; block 2 fits the memory only split two ways.  On four positions it would take
    positions 1-2, which straddle two groups of the layout: no solution.  On six it starts at position 2."""
    fwd = [1.0, 1.0, 1.0]

    def degrees(n_devices: int) -> dict[int, DegreeTables]:
        out = {}
        for t in (1, 2):
            tables = _tables([x / t for x in fwd], [2 * x / t for x in fwd], [0.0, 10.0 / t, 0.0], [0.0] * 3,
                             [0.0] * 3, n_devices // t)
            out[t] = DegreeTables(tables, np.ones(tables.max_replicas + 1, dtype=bool), None)
        return out

    caps, in_flight = np.full(3, 6.0), np.ones(3)
    assert form_mixed_stage_dp(degrees(4), 3, 4, caps, in_flight) is None
    sol = form_mixed_stage_dp(degrees(6), 3, 6, caps, in_flight)
    assert sol is not None and sol.degrees == (1, 2, 1) and sol.replicas == (2, 1, 2)
    assert sol.value_s == pytest.approx(0.5 + 1.0)
