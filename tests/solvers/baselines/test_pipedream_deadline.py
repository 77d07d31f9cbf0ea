"""``pipedream``'s DPs against the recurrences written as plain loops (two levels, DAGs), and the
deadline: a DP cut by it returns nothing, the solver falls back and says so."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.base import Budget, no_progress
from solvers.baselines._pipedream_dp import LayerChain, _level, hierarchical_dp
from solvers.baselines._pipedream_hier import pipedream_dp, prefix_differences, solve_level
from solvers.baselines._pipedream_states import AntichainStates, antichain_states
from solvers.baselines.pipedream import PipeDreamOptions, PipeDreamSolver
from solvers.generate import generate_graph, generate_topology
from solvers.model.problem import Problem, ProblemSettings
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.strategies import examples


def _states(seed: int, n_ops: int) -> AntichainStates:
    """A random DAG's states, with random compute and parameters (the generator's DAGs have none) of
    sizes that make splits, replicas and transfers all compete."""
    graph = generate_graph("random_dag", n_ops=n_ops, width=2, seed=seed)
    states = antichain_states(graph, graph.fwd_s + graph.bwd_s, max_states=400)
    assert states is not None
    rng = np.random.default_rng(seed)
    members = states.members.astype(np.float64)
    return dataclasses.replace(states, compute_s=members @ rng.uniform(1e-3, 1e-2, graph.n_ops),
                               param_bytes=members @ rng.uniform(0, 1e6, graph.n_ops))


def _loop_level(states: AntichainStates, compute: np.ndarray, workers: int, within: int, bw: float,
                rows: range) -> np.ndarray:
    """The antichain recurrence (``_pipedream_hier`` docstring), one candidate at a time."""
    n = states.n_states
    params = prefix_differences(states.param_bytes)
    params = np.where(np.isfinite(params), params, 0.0)
    a = np.full((n + 1, n, workers), np.inf)
    for i in rows:
        for j in range(n):
            for r in range(1, workers + 1):
                if np.isfinite(compute[i, j]):
                    a[i, j, r - 1] = (compute[i, j] + 4.0 * (r - 1) * params[i, j] / (bw * r * within)) / r
    for r in range(2, workers + 1):
        for j in range(n):
            for i in (i for i in rows if i < j):
                for k in range(n):
                    if not states.ancestors[j, k] or (i >= 1 and states.ancestors[i - 1, k]):
                        continue
                    for rp in range(1, r):
                        last = (compute[k + 1, j] + 4.0 * (rp - 1) * params[k + 1, j] / (bw * rp)) / rp
                        moved = 2.0 * states.out_bytes[k] / (bw * rp)
                        if j < n - 1:
                            moved = max(moved, 2.0 * states.out_bytes[j] / (bw * rp))
                        a[i, j, r - 1] = min(a[i, j, r - 1], max(a[i, k, r - rp - 1], last, moved))
    return a


@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 10_000), n_ops=st.integers(3, 9), workers=st.integers(1, 4), top=st.booleans(),
       bw=st.sampled_from([3e8, 1e9, 3e9]))
def test_antichain_level_equals_the_loops(seed: int, n_ops: int, workers: int, top: bool, bw: float) -> None:
    states = _states(seed, n_ops)
    compute = prefix_differences(states.compute_s)
    table = solve_level(states, compute, workers, 2, bw, top)
    assert table is not None
    rows = range(1 if top else states.n_states + 1)
    expected = _loop_level(states, compute, workers, 2, bw, rows)
    assert np.array_equal(table.value[: len(rows)], expected[: len(rows)])


def _loop_chain_level(a_lower: np.ndarray, chain: LayerChain, m_k: int, bw: float) -> np.ndarray:
    """The layer-chain recurrence (``_pipedream_dp`` docstring), one candidate at a time."""
    n = chain.n_layers
    a = np.full((n, n, m_k + 1), np.inf)
    t = np.full((n, n, m_k + 1), np.inf)
    for i in range(n):
        for j in range(i, n):
            for m in range(1, m_k + 1):
                w = float(chain.param_bytes[i:j + 1].sum())
                t[i, j, m] = max(a_lower[i, j], 2.0 * (m - 1) * w / bw) / m
    for length in range(1, n + 1):
        for i in range(n - length + 1):
            j = i + length - 1
            for m in range(1, m_k + 1):
                best = t[i, j, m]
                for s in range(i, j):
                    for mp in range(1, m):
                        best = min(best, max(a[i, s, m - mp], 2.0 * chain.cut_bytes[s] / bw, t[s + 1, j, mp]))
                a[i, j, m] = best
    return a


@settings(max_examples=examples(10), deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 7), m1=st.integers(1, 4), m2=st.integers(1, 3))
def test_chain_levels_equal_the_loops(seed: int, n: int, m1: int, m2: int) -> None:
    rng = np.random.default_rng(seed)
    chain = LayerChain(np.arange(n), rng.uniform(1e-3, 1e-2, n), rng.uniform(0, 1e8, n), np.zeros(n),
                       np.zeros(n), rng.uniform(1e6, 1e8, n))
    cw = np.concatenate(([0.0], np.cumsum(chain.work_s)))
    a0 = np.where(np.triu(np.ones((n, n), dtype=bool)), cw[None, 1:] - cw[:-1, None], np.inf)
    level1 = _level(a0, chain, m1, 2e9)
    assert level1 is not None
    expected1 = _loop_chain_level(a0, chain, m1, 2e9)
    assert np.allclose(level1.a, expected1, rtol=1e-12, atol=0)
    level2 = _level(level1.a[:, :, m1], chain, m2, 1e9)
    assert level2 is not None
    assert np.allclose(level2.a, _loop_chain_level(level1.a[:, :, m1], chain, m2, 1e9), rtol=1e-12, atol=0)


def test_dps_stop_at_a_past_deadline() -> None:
    states = _states(0, 9)
    assert pipedream_dp(states, [(4, 1e10), (2, 1e9)], deadline=time.monotonic() - 1) is None
    assert pipedream_dp(states, [(4, 1e10), (2, 1e9)], deadline=time.monotonic() + 60) is not None
    n = 6
    chain = LayerChain(np.arange(n), np.ones(n), np.ones(n), np.zeros(n), np.zeros(n), np.ones(n))
    assert hierarchical_dp(chain, (4, 1e10), (2, 1e9), deadline=time.monotonic() - 1) is None
    assert hierarchical_dp(chain, (4, 1e10), (2, 1e9), deadline=time.monotonic() + 60) is not None


def _cnn_problem() -> Problem:
    return Problem(generate_graph("cnn"), generate_topology("hierarchical", nodes=2, gpus_per_node=4), "throughput",
                   ProblemSettings(recompute=True))


def test_cut_dp_falls_back_to_a_plan_and_says_so() -> None:
    problem = _cnn_problem()
    full = PipeDreamSolver().solve(problem, PipeDreamOptions(), Budget(60), no_progress)
    assert full.stats["cost_model"] == "pipedream" and full.stats["timed_out"] is False
    cut = PipeDreamSolver().solve(problem, PipeDreamOptions(), Budget(0.0), no_progress)
    assert cut.stats["timed_out"] is True and cut.status == "feasible"
    assert any("time limit" in note for note in cut.notes)
    resolve_plan(problem, cut)


@pytest.mark.parametrize("guard", [True, False])
def test_parmesan_reports_the_safety_net_time(guard: bool) -> None:
    problem = _cnn_problem()
    solved = solve(problem, "parmesan", {"baseline_guard": guard}, time_limit_s=30)
    assert ("guard_s" in solved.stats) is guard
    if guard:
        assert 0 < solved.stats["guard_s"] < 30
        assert set(solved.stats["guard_keys_s"]) == {"parmesan", "even", "pipedream-placer",
                                                            "pipedream-pipedream"}


def test_memory_caps_give_the_same_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """One m' per array operation and L_r' rebuilt at each use: the same tables as the defaults."""
    import solvers.baselines._pipedream_dp as chain_dp
    import solvers.baselines._pipedream_hier as hier

    states = _states(3, 9)
    compute = prefix_differences(states.compute_s)
    n = 7
    rng = np.random.default_rng(3)
    chain = LayerChain(np.arange(n), rng.uniform(1e-3, 1e-2, n), rng.uniform(0, 1e8, n), np.zeros(n),
                       np.zeros(n), rng.uniform(1e6, 1e8, n))
    a0 = np.where(np.triu(np.ones((n, n), dtype=bool)), 1e-2, np.inf)
    before = (solve_level(states, compute, 4, 2, 1e9, False), _level(a0, chain, 5, 1e9))
    monkeypatch.setattr(hier, "_CACHED_ELEMENTS", 0)
    monkeypatch.setattr(chain_dp, "_BLOCK_ELEMENTS", 1)
    after = (solve_level(states, compute, 4, 2, 1e9, False), _level(a0, chain, 5, 1e9))
    for old, new in zip(before, after, strict=True):
        assert old is not None and new is not None
        for x, y in zip(dataclasses.astuple(old), dataclasses.astuple(new), strict=True):
            assert np.array_equal(x, y)
