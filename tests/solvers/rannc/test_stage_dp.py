"""Algorithm 1 (RaNNC §III-C) against brute force over block boundaries and replica splits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.rannc.stage_dp import (
    AllReduceTable,
    StageSolution,
    StageTables,
    evaluate_stages,
    form_stage_dp,
    min_devices,
    pipeline_estimate_s,
)
from tests.strategies import examples


def _tables(block_fwd: list[float], block_bwd: list[float], params: list[float], acts: list[float],
            out_bytes: list[float], max_r: int) -> StageTables:
    """Stage (b', b] with r replicas: compute / r plus a transfer of block b's output / r."""
    k = len(block_fwd)
    shape = (max_r + 1, k + 1, k + 1)
    f, b, fixed, kept = (np.full(shape, np.inf) for _ in range(4))
    for r in range(1, max_r + 1):
        for lo in range(k):
            for hi in range(lo + 1, k + 1):
                comm = out_bytes[hi - 1] / r
                f[r, lo, hi] = sum(block_fwd[lo:hi]) / r + comm
                b[r, lo, hi] = sum(block_bwd[lo:hi]) / r + comm
                fixed[r, lo, hi] = sum(params[lo:hi])
                kept[r, lo, hi] = sum(acts[lo:hi]) / r
    return StageTables(f, b, fixed, kept)


def _compositions(total: int, parts: int) -> list[tuple[int, ...]]:
    return [tuple(np.diff((0, *cuts, total)).tolist())
            for cuts in itertools.combinations(range(1, total), parts - 1)]


def _evaluate(t: StageTables, bounds: tuple[int, ...], reps: tuple[int, ...], caps: np.ndarray,
              in_flight: np.ndarray, computes: np.ndarray | None = None) -> float:
    lo, fmax, bmax = 0, 0.0, 0.0
    for s, (hi, r) in enumerate(zip(bounds, reps, strict=True)):
        if t.mem_fixed_bytes[r, lo, hi] + in_flight[s] * t.mem_kept_bytes[r, lo, hi] > caps[s]:
            return float("inf")
        if computes is not None and not computes[lo:hi].any():
            return float("inf")
        fmax, bmax = max(fmax, t.fwd_s[r, lo, hi]), max(bmax, t.bwd_s[r, lo, hi])
        lo = hi
    return fmax + bmax


def _brute(t: StageTables, S: int, D: int, caps: np.ndarray, in_flight: np.ndarray,
           computes: np.ndarray | None = None) -> float:
    best = float("inf")
    for sizes in _compositions(t.n_blocks, S):
        bounds = tuple(np.cumsum(sizes).tolist())
        for reps in _compositions(D, S):
            best = min(best, _evaluate(t, bounds, reps, caps, in_flight, computes))
    return best


@st.composite
def instances(draw: st.DrawFn, proportional: bool, memory: bool) -> tuple[StageTables, int, int, np.ndarray,
                                                                          np.ndarray]:
    k = draw(st.integers(1, 6))
    S = draw(st.integers(1, min(k, 4)))
    D = draw(st.integers(S, 6))
    vals = st.sampled_from([0.5, 1.0, 2.0, 3.0, 5.0, 8.0])
    fwd = [draw(vals) for _ in range(k)]
    bwd = [2 * x for x in fwd] if proportional else [draw(vals) for _ in range(k)]
    out = [0.0] * k if proportional else [draw(st.sampled_from([0.0, 0.5, 2.0])) for _ in range(k)]
    params = [draw(vals) for _ in range(k)]
    acts = [draw(vals) for _ in range(k)]
    cap = draw(st.sampled_from([12.0, 20.0, 40.0])) if memory else np.inf
    caps = np.full(S, cap)
    in_flight = np.asarray([S - s for s in range(S)], dtype=np.int64)
    return _tables(fwd, bwd, params, acts, out, D - S + 1), S, D, caps, in_flight


@settings(max_examples=examples(150), deadline=None)
@given(instances(proportional=True, memory=True))
def test_dp_equals_brute_force_when_backward_is_proportional(case: tuple) -> None:  # type: ignore[type-arg]
    t, S, D, caps, in_flight = case
    sol = form_stage_dp(t, S, D, caps, in_flight, prune=False)
    best = _brute(t, S, D, caps, in_flight)
    if not np.isfinite(best):
        assert sol is None
        return
    assert sol is not None
    assert sol.value_s == pytest.approx(best)
    assert _evaluate(t, sol.bounds, sol.replicas, caps, in_flight) == pytest.approx(sol.value_s)
    assert sum(sol.replicas) == D and sol.bounds[-1] == t.n_blocks


def _fewest_devices(t: StageTables, S: int, D: int, caps: np.ndarray, in_flight: np.ndarray) -> float:
    """Over every block split: the sum of each stage's smallest replica count that fits."""
    best = float("inf")
    for sizes in _compositions(t.n_blocks, S):
        lo, total = 0, 0.0
        for s, hi in enumerate(np.cumsum(sizes).tolist()):
            fits = [r for r in range(1, D - S + 2)
                    if t.mem_fixed_bytes[r, lo, hi] + in_flight[s] * t.mem_kept_bytes[r, lo, hi] <= caps[s]]
            total += fits[0] if fits else float("inf")
            lo = hi
        best = min(best, total)
    return best


@settings(max_examples=examples(150), deadline=None)
@given(instances(proportional=False, memory=True), st.sampled_from([1.0, 0.5, 0.25]))
def test_min_devices_is_the_fewest_devices_of_any_split_and_proves_infeasibility(
        case: tuple, squeeze: float) -> None:  # type: ignore[type-arg]
    t, S, D, caps, in_flight = case
    caps = caps * np.linspace(1.0, squeeze, S)  # later stages get less room: the relaxation must follow
    working = np.arange(t.n_blocks + 1)
    fewest = min_devices(t, S, D, caps, in_flight, np.ones(t.max_replicas + 1, dtype=bool), working)
    assert fewest == _fewest_devices(t, S, D, caps, in_flight)
    if fewest > D:
        assert not np.isfinite(_brute(t, S, D, caps, in_flight))
        assert form_stage_dp(t, S, D, caps, in_flight, prune=False) is None


@settings(max_examples=examples(100), deadline=None)
@given(instances(proportional=True, memory=False))
def test_d_min_pruning_is_exact_without_memory_pressure(case: tuple) -> None:  # type: ignore[type-arg]
    t, S, D, caps, in_flight = case
    pruned = form_stage_dp(t, S, D, caps, in_flight, prune=True)
    assert pruned is not None
    assert pruned.value_s == pytest.approx(_brute(t, S, D, caps, in_flight))


@settings(max_examples=examples(150), deadline=None)
@given(instances(proportional=False, memory=True), st.booleans())
def test_dp_is_feasible_and_bounded_by_brute_force(case: tuple, prune: bool) -> None:  # type: ignore[type-arg]
    """Separate forward / backward maxima: the DP keeps one pair per cell, so it may miss the optimum."""
    t, S, D, caps, in_flight = case
    sol = form_stage_dp(t, S, D, caps, in_flight, prune=prune)
    best = _brute(t, S, D, caps, in_flight)
    if not prune:
        assert (sol is None) == (not np.isfinite(best))
    if sol is not None:
        assert isinstance(sol, StageSolution)
        assert _evaluate(t, sol.bounds, sol.replicas, caps, in_flight) == pytest.approx(sol.value_s)
        assert sol.value_s >= best - 1e-9
        assert sol.value_s == pytest.approx(sol.fwd_max_s + sol.bwd_max_s)


@settings(max_examples=examples(150), deadline=None)
@given(instances(proportional=True, memory=True), st.data())
def test_every_stage_holds_a_block_that_computes(case: tuple, data: st.DataObject) -> None:  # type: ignore[type-arg]
    """Blocks of inputs and constants only: no stage made of them alone (solvers.runnable), and the DP
    without pruning is still the brute force's optimum over the stages that obey the rule."""
    t, S, D, caps, in_flight = case
    computes = np.asarray(data.draw(st.lists(st.booleans(), min_size=t.n_blocks, max_size=t.n_blocks)))
    best = _brute(t, S, D, caps, in_flight, computes)
    for prune in (False, True):
        sol = form_stage_dp(t, S, D, caps, in_flight, prune=prune, computes=computes)
        if not np.isfinite(best):
            assert sol is None
            continue
        if prune:  # d_min pruning is exact only without memory pressure: feasible, never below the optimum
            if sol is not None:
                assert sol.value_s >= best - 1e-9
        else:
            assert sol is not None and sol.value_s == pytest.approx(best)
        if sol is not None:
            assert _evaluate(t, sol.bounds, sol.replicas, caps, in_flight, computes) == pytest.approx(sol.value_s)


def test_d_min_pruning_may_miss_the_optimum_under_memory_pressure() -> None:
    """Found by ``make fuzz``: five blocks of forward 0.5 (backward 1.0), block 2 heavy in parameters (8.0),
    three stages on four devices, 12 bytes a stage.  The plain DP finds the optimum, 2.25 (one, one and two
    replicas); with d_min pruning (RaNNC §III-C) it gives 3.0, a feasible plan: the pruning is exact only
    where memory does not bind (test_d_min_pruning_is_exact_without_memory_pressure)."""
    t = _tables([0.5] * 5, [1.0] * 5, [0.5, 0.5, 8.0, 0.5, 0.5], [0.5, 0.5, 2.0, 1.0, 0.5], [0.0] * 5, 2)
    caps, in_flight = np.full(3, 12.0), np.asarray([3, 2, 1], dtype=np.int64)
    assert _brute(t, 3, 4, caps, in_flight) == pytest.approx(2.25)
    plain = form_stage_dp(t, 3, 4, caps, in_flight, prune=False)
    assert plain is not None and plain.value_s == pytest.approx(2.25) and plain.replicas == (1, 1, 2)
    pruned = form_stage_dp(t, 3, 4, caps, in_flight, prune=True)
    assert pruned is not None and pruned.value_s == pytest.approx(3.0)
    assert _evaluate(t, pruned.bounds, pruned.replicas, caps, in_flight) == pytest.approx(3.0)


def test_a_stage_of_a_block_without_compute_is_not_a_candidate() -> None:
    """Block 1 (an input) costs nothing and block 2 sends a large output: the least stage time cuts block 1
    off alone, which the rule forbids."""
    t = _tables([0.0, 4.0, 4.0], [0.0, 8.0, 8.0], [0.0] * 3, [0.0] * 3, [0.0, 100.0, 0.0], 1)
    free = form_stage_dp(t, 2, 2, np.full(2, np.inf), np.asarray([2, 1]))
    assert free is not None and free.bounds == (1, 3)
    ruled = form_stage_dp(t, 2, 2, np.full(2, np.inf), np.asarray([2, 1]), computes=np.array([False, True, True]))
    assert ruled is not None and ruled.bounds == (2, 3)
    assert form_stage_dp(t, 3, 3, np.full(3, np.inf), np.asarray([3, 2, 1]),
                         computes=np.array([False, True, True])) is None  # 2 blocks compute, 3 stages


def test_fixed_replica_counts_are_respected() -> None:
    t = _tables([1.0, 4.0, 1.0], [2.0, 8.0, 2.0], [0.0] * 3, [0.0] * 3, [0.0] * 3, 4)
    allowed = np.zeros(5, dtype=bool)
    allowed[2] = True
    sol = form_stage_dp(t, 2, 4, np.full(2, np.inf), np.asarray([2, 1]), allowed)
    assert sol is not None and sol.replicas == (2, 2)
    free = form_stage_dp(t, 2, 4, np.full(2, np.inf), np.asarray([2, 1]))
    assert free is not None and free.value_s <= sol.value_s


def test_infeasible_memory_returns_none() -> None:
    t = _tables([1.0, 1.0], [1.0, 1.0], [10.0, 10.0], [0.0, 0.0], [0.0, 0.0], 2)
    assert form_stage_dp(t, 2, 2, np.full(2, 5.0), np.asarray([2, 1])) is None
    assert form_stage_dp(t, 3, 3, np.full(3, 50.0), np.asarray([3, 2, 1])) is None  # more stages than blocks


def _ar_table(params: list[float], per_byte: float, D: int) -> AllReduceTable:
    """All-reduce ``per_byte`` seconds per parameter byte on any ring of two or more devices."""
    k = len(params)
    p = np.zeros((k + 1, k + 1))
    for lo in range(k):
        for hi in range(lo + 1, k + 1):
            p[lo, hi] = sum(params[lo:hi])
    sizes = np.arange(D + 1)[None, :] - np.arange(D + 1)[:, None]
    return AllReduceTable(p, np.where(sizes > 1, per_byte, 0.0), np.where(sizes > 1, 0.01, 0.0))


def test_allreduce_moves_replicas_away_from_the_parameters() -> None:
    """Block 2 holds every parameter: replicating it pays their all-reduce in its backward time."""
    t = _tables([1.0, 1.2], [2.0, 2.4], [0.0, 10.0], [0.0, 0.0], [0.0, 0.0], 2)
    caps, in_flight = np.full(2, np.inf), np.asarray([2, 1])
    plain = form_stage_dp(t, 2, 3, caps, in_flight, prune=False)
    assert plain is not None and plain.replicas == (1, 2)
    sol = form_stage_dp(t, 2, 3, caps, in_flight, prune=False, allreduce=_ar_table([0.0, 10.0], 0.2, 3))
    assert sol is not None and sol.replicas == (2, 1)
    assert sol.value_s == pytest.approx(1.2 + 2.4)  # block 2 alone, no ring: no all-reduce
    assert pipeline_estimate_s(sol, 2, 4) == pytest.approx(5 * sol.value_s)


@settings(max_examples=examples(100), deadline=None)
@given(instances(proportional=True, memory=True), st.sampled_from([0.0, 0.1, 1.0]))
def test_dp_value_with_allreduce_is_its_own_solution_and_bounded_by_brute_force(
        case: tuple, per_byte: float) -> None:  # type: ignore[type-arg]
    t, S, D, caps, in_flight = case
    params = [float(t.mem_fixed_bytes[1, b, b + 1]) for b in range(t.n_blocks)]
    ar = _ar_table(params, per_byte, D)
    bwd = t.bwd_s  # the all-reduce depends on d' and d: brute force over explicit device positions
    sol = form_stage_dp(t, S, D, caps, in_flight, prune=False, allreduce=ar)
    best = float("inf")
    for sizes in _compositions(t.n_blocks, S):
        bounds = tuple(np.cumsum(sizes).tolist())
        for reps in _compositions(D, S):
            lo, d0, fmax, bmax, fits = 0, 0, 0.0, 0.0, True
            for s, (hi, r) in enumerate(zip(bounds, reps, strict=True)):
                fits &= bool(t.mem_fixed_bytes[r, lo, hi] + in_flight[s] * t.mem_kept_bytes[r, lo, hi] <= caps[s])
                extra = float(ar.seconds(np.asarray([lo]), hi, np.asarray([d0]), np.asarray([d0 + r]))[0, 0, 0])
                fmax, bmax = max(fmax, t.fwd_s[r, lo, hi]), max(bmax, bwd[r, lo, hi] + extra)
                lo, d0 = hi, d0 + r
            if fits:
                best = min(best, fmax + bmax)
            if fits and sol is not None and (bounds, reps) == (sol.bounds, sol.replicas):
                assert fmax + bmax == pytest.approx(sol.value_s)
    assert (sol is None) == (not np.isfinite(best))
    if sol is not None:
        assert sol.value_s >= best - 1e-9
        assert evaluate_stages(t, sol.bounds, sol.replicas, ar).value_s == pytest.approx(sol.value_s)
        paper = form_stage_dp(t, S, D, caps, in_flight, prune=False)
        assert paper is not None  # the same memory check: the paper's h finds a solution as well
        assert evaluate_stages(t, paper.bounds, paper.replicas).value_s == pytest.approx(paper.value_s)
