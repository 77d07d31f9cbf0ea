"""Operator clustering (§IV-B): convex hyper-operators, memory cap, K reached, pins kept apart."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.model.graph import OpGraph
from solvers.parmesan.clustering import cluster_ops
from solvers.partition.costs import reference_costs
from tests.solvers.parmesan.strategies import dag_seeds, problem_of, random_dag, random_topology
from tests.strategies import examples


def _convex(graph: OpGraph, members: set[int]) -> bool:
    """No path leaves the set and comes back."""
    outside = [w for v in members for w in graph.succ[v] if w not in members]
    seen: set[int] = set()
    while outside:
        w = outside.pop()
        if w in seen:
            continue
        seen.add(w)
        for x in graph.succ[w]:
            if x in members:
                return False
            outside.append(x)
    return True


@settings(max_examples=examples(30), deadline=None)
@given(seed=dag_seeds, n_ops=st.integers(4, 40), k=st.integers(1, 10), alpha=st.sampled_from([0.01, 1.0, 100.0]))
def test_clusters_are_convex_and_reach_k(seed: int, n_ops: int, k: int, alpha: float) -> None:
    graph = random_dag(seed, n_ops, 0.2)
    problem = problem_of(graph, random_topology(seed, 2))
    cg, stats = cluster_ops(problem, reference_costs(problem), k, alpha, float("inf"))
    assert cg.k >= min(k, n_ops)
    members = cg.members()
    assert sorted(np.concatenate(members).tolist()) == list(range(n_ops))
    for m in members:
        assert _convex(graph, set(m.tolist()))
    # clusters are numbered topologically
    assert (cg.src < cg.dst).all()
    assert stats["merges"] == n_ops - cg.k


def test_memory_cap_and_pins_limit_merges() -> None:
    graph = random_dag(4, 12, 0.3)
    problem = problem_of(graph, random_topology(4, 2))
    costs = reference_costs(problem)
    cap = float(graph.param_bytes.max()) * 4 * 1.5  # (1 + 3 optimizer bytes) x params of about one op
    cg, stats = cluster_ops(problem, costs, 1, 1.0, cap)
    assert (cg.param_bytes * 4 <= cap).all() or cg.k == 12
    assert stats["rejected_memory"] > 0
    pins = {0: 0, 11: 1}
    cg, _ = cluster_ops(problem, costs, 1, 1.0, float("inf"), pins)
    assert cg.cluster_of[0] != cg.cluster_of[11]
    assert cg.stage_pin[int(cg.cluster_of[0])] == 0 and cg.stage_pin[int(cg.cluster_of[11])] == 1


@settings(max_examples=examples(15), deadline=None)
@given(seed=dag_seeds, n_ops=st.integers(6, 40), k=st.integers(2, 6))
def test_truncated_and_further_coarsened_clusters_stay_convex(seed: int, n_ops: int, k: int) -> None:
    from solvers.parmesan.clustering import coarsen_further

    graph = random_dag(seed, n_ops, 0.2)
    problem = problem_of(graph, random_topology(seed, 2))
    costs = reference_costs(problem)
    cg, stats = cluster_ops(problem, costs, k, 1.0, float("inf"), deadline=0.0)  # deadline already passed
    if n_ops > k and len(graph.edges):
        assert stats["truncated"] == 1 and cg.k <= 2 * k + 1
    for m in cg.members():
        assert _convex(graph, set(m.tolist()))
    finer, _ = cluster_ops(problem, costs, n_ops, 1.0, float("inf"))
    coarse, _ = coarsen_further(problem, costs, finer, k, 1.0, float("inf"))
    assert coarse.k >= min(k, n_ops) and coarse.k <= finer.k
    for m in coarse.members():
        assert _convex(graph, set(m.tolist()))
