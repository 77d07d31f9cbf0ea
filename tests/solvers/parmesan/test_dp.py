"""DP over fronted subgraphs (Eq. 2 / 13) equals brute force over all convex S-stage partitions."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solvers.model.graph import OpGraph
from solvers.parmesan.clustering import ClusterGraph, build_cluster_graph
from solvers.parmesan.dp import build_transitions, run_dp, stage_base_s
from solvers.partition.costs import reference_costs
from solvers.partition.fronted import enumerate_fronted
from tests.solvers.parmesan.strategies import dag_seeds, problem_of, random_dag, random_topology
from tests.strategies import examples


def _identity_clusters(problem) -> ClusterGraph:  # type: ignore[no-untyped-def]
    costs = reference_costs(problem)
    return build_cluster_graph(problem, costs, np.arange(problem.graph.n_ops))


def _brute_force(cg: ClusterGraph, n_stages: int, replicas: int) -> float:
    """Every assignment of nodes to stages 0..S-1 that follows the edges, all stages non-empty."""
    best = np.inf
    for labels in itertools.product(range(n_stages), repeat=cg.k):
        lab = np.array(labels)
        if (lab[cg.src] > lab[cg.dst]).any() or len(set(labels)) < n_stages:
            continue
        worst = max(stage_base_s(cg, lab == s) / replicas for s in range(n_stages))
        best = min(best, worst)
    return float(best)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=dag_seeds, n_ops=st.integers(3, 8), n_stages=st.integers(1, 3), edge_prob=st.sampled_from([0.15, 0.4]))
def test_dp_equals_brute_force(seed: int, n_ops: int, n_stages: int, edge_prob: float) -> None:
    graph = random_dag(seed, n_ops, edge_prob)
    problem = problem_of(graph, random_topology(seed, 4))
    cg = _identity_clusters(problem)
    sets = enumerate_fronted(cg.k, cg.src, cg.dst, 10_000)
    assert sets is not None
    tr = build_transitions(cg, sets, 10**7)
    assert tr is not None
    result = run_dp(problem, tr, n_stages, 2, 4)
    expected = _brute_force(cg, n_stages, 2)
    if not np.isfinite(expected):
        assert result is None
        return
    assert result is not None
    assert result.objective_s == pytest.approx(expected, rel=1e-9)
    # the stages realise the value and cover every node once, in an order that follows the edges
    stage_of = np.argmax(np.stack(result.stages), axis=0)
    assert np.stack(result.stages).sum(axis=0).tolist() == [1] * cg.k
    assert (stage_of[cg.src] <= stage_of[cg.dst]).all()
    assert max(stage_base_s(cg, m) / 2 for m in result.stages) == pytest.approx(result.objective_s, rel=1e-9)


def test_ten_ops_several_orders() -> None:
    graph = random_dag(3, 10, 0.2)
    assert _count_orders(graph) > 1
    problem = problem_of(graph, random_topology(3, 4))
    cg = _identity_clusters(problem)
    sets = enumerate_fronted(cg.k, cg.src, cg.dst, 10_000)
    assert sets is not None and len(sets) > cg.k + 1  # more fronted sets than a unique order gives
    tr = build_transitions(cg, sets, 10**7)
    assert tr is not None
    result = run_dp(problem, tr, 2, 1, 4)
    assert result is not None
    assert result.objective_s == pytest.approx(_brute_force(cg, 2, 1), rel=1e-9)


def test_fronted_budget_reports_overflow() -> None:
    graph = random_dag(1, 12, 0.0)  # no edges: 2^12 fronted sets
    problem = problem_of(graph, random_topology(1, 2))
    cg = _identity_clusters(problem)
    assert enumerate_fronted(cg.k, cg.src, cg.dst, 1000) is None
    sets = enumerate_fronted(cg.k, cg.src, cg.dst, 5000)
    assert sets is not None and len(sets) == 2**12


def _count_orders(graph: OpGraph) -> int:
    n = graph.n_ops
    count = 0
    for perm in itertools.permutations(range(n)):
        pos = np.empty(n, dtype=int)
        pos[list(perm)] = np.arange(n)
        if (pos[graph.edge_src] < pos[graph.edge_dst]).all():
            count += 1
            if count > 1:
                return count
    return count


@settings(max_examples=examples(15), deadline=None)
@given(seed=dag_seeds, n_ops=st.integers(3, 7), n_stages=st.integers(1, 3))
def test_dp_with_allreduce_term_equals_brute_force(seed: int, n_ops: int, n_stages: int) -> None:
    graph = random_dag(seed, n_ops, 0.3)
    problem = problem_of(graph, random_topology(seed, 4))
    cg = _identity_clusters(problem)
    sets = enumerate_fronted(cg.k, cg.src, cg.dst, 10_000)
    assert sets is not None
    tr = build_transitions(cg, sets, 10**7)
    assert tr is not None
    per_byte, fixed = 1e-9, 1e-4
    result = run_dp(problem, tr, n_stages, 2, 4, (per_byte, fixed))
    best = np.inf
    for labels in itertools.product(range(n_stages), repeat=cg.k):
        lab = np.array(labels)
        if (lab[cg.src] > lab[cg.dst]).any() or len(set(labels)) < n_stages:
            continue
        worst = 0.0
        for s in range(n_stages):
            params = float(cg.param_bytes[lab == s].sum())
            worst = max(worst, stage_base_s(cg, lab == s) / 2 + (per_byte * params + fixed if params > 0 else 0.0))
        best = min(best, worst)
    assert result is not None and result.objective_s == pytest.approx(best, rel=1e-9)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=dag_seeds, n_ops=st.integers(2, 90), edge_prob=st.sampled_from([0.05, 0.3, 0.8]))
def test_transition_quantities_match_their_definitions(seed: int, n_ops: int, edge_prob: float) -> None:
    """Per DP pair (f, f'), the stage U = f - f' gets Eq. 3's numerator, the bytes entering U and
    its largest working memory as their definitions give them (``build_transitions`` derives
    them from the edges leaving f and f' and from bit-packed sets; more than 64 clusters span
    several words)."""
    problem = problem_of(random_dag(seed, n_ops, edge_prob), random_topology(seed, 2))
    cg = _identity_clusters(problem)
    rng = np.random.default_rng(seed)  # varied working memory, with ties
    cg = dataclasses.replace(cg, working_bytes=rng.integers(0, 5, cg.k).astype(np.float64) * 1e5)
    sets = enumerate_fronted(cg.k, cg.src, cg.dst, 400)
    if sets is None:
        return
    tr = build_transitions(cg, sets, 100_000)
    assert tr is not None
    owner = np.repeat(np.arange(len(sets)), np.diff(tr.start))
    for p in range(0, tr.n_pairs, max(1, tr.n_pairs // 200)):
        inside = sets[owner[p]] & ~sets[tr.prev[p]]
        entering = ~inside[cg.src] & inside[cg.dst]
        assert tr.base_s[p] == pytest.approx(stage_base_s(cg, inside), rel=1e-12, abs=1e-15)
        assert tr.input_bytes[p] == pytest.approx(float(cg.bytes[entering].sum()), rel=1e-12, abs=1e-9)
        assert tr.working_bytes[p] == cg.working_bytes[inside].max()
