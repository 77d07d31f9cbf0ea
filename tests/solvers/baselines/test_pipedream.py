"""The ``pipedream`` baseline: its DP against brute force, the hierarchical flow, mappers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.baselines._pipedream_dp import LayerChain, flat_dp, hierarchical_dp, layer_chain
from solvers.generate import generate_graph, generate_topology
from solvers.model.errors import InvalidProblem
from solvers.model.problem import Problem, ProblemSettings
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.solvers import contract_fixtures as fx
from tests.strategies import examples


def _chain(seed: int, n: int) -> LayerChain:
    rng = np.random.default_rng(seed)
    return LayerChain(np.arange(n), rng.uniform(1e-3, 1e-2, n), rng.uniform(0, 1e8, n), np.zeros(n),
                      np.zeros(n), rng.uniform(1e6, 1e8, n))


def _brute_single_level(chain: LayerChain, m: int, bw: float) -> float:
    """Every split of the chain into contiguous stages and every replica split summing to m."""
    n = chain.n_layers
    best = np.inf
    for k in range(1, min(n, m) + 1):
        for cuts in itertools.combinations(range(n - 1), k - 1):
            bounds = [0, *[c + 1 for c in cuts], n]
            for reps in itertools.product(range(1, m + 1), repeat=k):
                if sum(reps) != m:
                    continue
                worst = 0.0
                for s in range(k):
                    i, j = bounds[s], bounds[s + 1]
                    t = max(chain.work_s[i:j].sum(), 2 * (reps[s] - 1) * chain.param_bytes[i:j].sum() / bw) / reps[s]
                    worst = max(worst, t)
                    if s:
                        worst = max(worst, 2 * chain.cut_bytes[i - 1] / bw)
                best = min(best, worst)
    return float(best)


@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 6), m=st.integers(1, 4))
def test_single_level_dp_equals_brute_force(seed: int, n: int, m: int) -> None:
    chain = _chain(seed, n)
    value, groups = hierarchical_dp(chain, (m, 1e10), None)
    assert value == pytest.approx(_brute_single_level(chain, m, 1e10), rel=1e-9)
    (_, stages), = groups
    assert sum(r for _, _, r in stages) <= m
    assert [s[0] for s in stages] == [0] + [s[1] + 1 for s in stages[:-1]] and stages[-1][1] == n - 1


def test_flat_dp_equals_brute_force() -> None:
    chain = _chain(3, 7)
    n = chain.n_layers
    cost = np.array([[chain.work_s[i:j + 1].sum() if j >= i else np.inf for j in range(n)] for i in range(n)])
    cut = 2 * chain.cut_bytes / 1e10
    for k in (1, 2, 3, 4):
        value, lasts = flat_dp(chain, k, [cost] * k, [cut] * k)  # type: ignore[misc]
        brute = min(max(max(cost[a][b - 1] for a, b in zip([0, *[c + 1 for c in cs]], [c + 1 for c in cs] + [n])),
                        max((cut[c] for c in cs), default=0.0))
                    for cs in itertools.combinations(range(n - 1), k - 1))
        assert value == pytest.approx(brute, rel=1e-12)
        assert len(lasts) == k and lasts[-1] == n - 1


def test_layer_chain_respects_layers_and_limit() -> None:
    graph = generate_graph("transformer", layers=4, hidden=256, heads=4, seq_len=64)
    problem = Problem(graph, fx.two_node_topology(), "throughput", ProblemSettings())
    chain = layer_chain(problem, 1000)
    order = graph.topo_order
    assert (np.diff(chain.layer_of[order]) >= 0).all()  # contiguous along the order
    assert chain.n_layers == len({graph.nodes[int(v)].layer for v in order}) or chain.n_layers > 4
    small = layer_chain(problem, 5)
    assert small.n_layers <= 5
    assert chain.cut_bytes[-1] == 0.0


def test_hierarchical_plan_on_two_hosts() -> None:
    graph = generate_graph("cnn", blocks="2,2,2,2", micro_batch=16)
    topo = generate_topology("hierarchical", nodes=2, gpus_per_node=4)
    problem = Problem(graph, topo, "throughput", ProblemSettings(recompute=True))
    plan = solve(problem, "pipedream", time_limit_s=20)
    resolve_plan(problem, plan)
    assert plan.stats["mode"] == "hierarchical"
    assert sum(len(s.devices) for s in plan.stages) <= 8


@pytest.mark.parametrize("mapping", ["consecutive", "p2p", "parmesan"])
def test_fixed_stages_with_each_mapper(mapping: str) -> None:
    problem = fx.throughput_problem().with_settings(stages=2, replicas=2, schedule="1f1b")  # the solver's own stages
    plan = solve(problem, "pipedream", {"mapping": mapping}, time_limit_s=10)
    resolve_plan(problem, plan)
    assert [len(s.devices) for s in plan.stages] == [2, 2]
    assert plan.stats["mode"] == "flat"


def test_pins_rejected_and_infeasible_reported() -> None:
    with pytest.raises(InvalidProblem, match="pins"):
        solve(fx.throughput_problem().with_settings(pinned={"in": 0}), "pipedream")
    plan = solve(fx.infeasible_problem("throughput"), "pipedream", time_limit_s=10)
    assert plan.status == "infeasible"


def test_even_guard_keeps_even_where_pipedream_is_behind_and_off_runs_pipedream_alone() -> None:
    """On the 60-layer diamond chain PipeDream's DP is 0.08 % behind even's split (docs/baselines.md), both
    under 1F1B (the schedule fixed: under ``auto`` each plan goes on to the schedule search, which the
    guard's comparison of the two splits precedes)."""
    problem = fx.larger_problem("throughput").with_settings(schedule="1f1b")
    even = solve(problem, "even")
    guarded = solve(problem, "pipedream", time_limit_s=10)
    alone = solve(problem, "pipedream", {"even_guard": False}, time_limit_s=10)
    assert even.metrics is not None and guarded.metrics is not None and alone.metrics is not None
    assert alone.metrics["objective_s"] > even.metrics["objective_s"] * (1 + 1e-4)
    assert "partition_source" not in alone.stats
    assert guarded.metrics["objective_s"] == pytest.approx(even.metrics["objective_s"], rel=1e-12)
    assert guarded.stats["partition_source"] == "even" and guarded.stats["pipedream_objective_s"] == pytest.approx(
        alone.metrics["objective_s"], rel=1e-9)
    assert any("even_guard" in note for note in guarded.notes)
    kept = solve(fx.throughput_problem(), "pipedream", time_limit_s=10)
    assert kept.stats["partition_source"] in ("pipedream", "even") and kept.stats["even_objective_s"] is not None
