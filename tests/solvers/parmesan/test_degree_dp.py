"""The DP with a tensor-parallel degree per stage (Eq. 2's device dimension) equals brute force."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solvers.cost.memory import kept_bytes
from solvers.parmesan.clustering import ClusterGraph, build_cluster_graph
from solvers.parmesan.degree_dp import run_degree_dp
from solvers.parmesan.dp import build_transitions, run_dp, stage_base_s, with_cluster_costs
from solvers.partition.costs import StageBytes, reference_costs, stage_capacity_bytes, stage_memory_vec
from solvers.partition.fronted import enumerate_fronted
from tests.solvers.parmesan.strategies import dag_seeds, problem_of, random_dag, random_topology
from tests.strategies import examples


def _degree_graphs(cg: ClusterGraph, seed: int) -> dict[int, ClusterGraph]:
    """Degree 1 and two more: each cluster's work and bytes scaled at random (some clusters split, some not)."""
    rng = np.random.default_rng(seed)
    out = {1: cg}
    for t in (2, 4):
        split = rng.random(cg.k) < 0.6
        shrink = np.where(split, 1.0 / t, 1.0)
        work = cg.work_s * np.where(split, 1.0 / t, 1.0) + np.where(split, rng.uniform(0, 5e-4, cg.k), 0.0)
        out[t] = dataclasses.replace(cg, work_s=work, param_bytes=cg.param_bytes * shrink,
                                     act_bytes=cg.act_bytes * shrink, working_bytes=cg.working_bytes * shrink)
    return out


def _stage_s(problem, graphs, mask, t, s, n_stages, replicas, micro_batches) -> float:  # type: ignore[no-untyped-def]
    """Eq. 3 at degree ``t`` over ``replicas``, ``inf`` when the stage does not fit (the DP's memory rule)."""
    cg = graphs[t]
    entering = ~mask[cg.src] & mask[cg.dst]
    candidate = StageBytes(np.array([cg.param_bytes[mask].sum()]),
                           np.array([kept_bytes(float(cg.act_bytes[mask].sum()), float(cg.bytes[entering].sum()),
                                                problem.settings.recomputes)]),
                           np.array([cg.working_bytes[mask].max()]))
    mem = float(stage_memory_vec(problem, candidate, replicas, n_stages, s, micro_batches)[0])
    return stage_base_s(cg, mask) / replicas if mem <= stage_capacity_bytes(problem, s) else float("inf")


def _brute_force(problem, graphs, n_stages, replicas, units, micro_batches) -> float:  # type: ignore[no-untyped-def]
    """Every assignment of clusters to stages that follows the edges, every stage non-empty, and every
    degree per stage within the units."""
    cg = graphs[1]
    best = np.inf
    for labels in itertools.product(range(n_stages), repeat=cg.k):
        lab = np.array(labels)
        if (lab[cg.src] > lab[cg.dst]).any() or len(set(labels)) < n_stages:
            continue
        for degrees in itertools.product(sorted(graphs), repeat=n_stages):
            if sum(degrees) > units:
                continue
            worst = max(_stage_s(problem, graphs, lab == s, t, s, n_stages, replicas, micro_batches)
                        for s, t in enumerate(degrees))
            best = min(best, worst)
    return float(best)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=dag_seeds, n_ops=st.integers(2, 6), n_stages=st.integers(1, 3), replicas=st.integers(1, 2),
       units=st.integers(1, 8), memory_gib=st.sampled_from([0.012, 16.0]))
def test_degree_dp_equals_brute_force(seed: int, n_ops: int, n_stages: int, replicas: int, units: int,
                                      memory_gib: float) -> None:
    graph = random_dag(seed, n_ops, 0.4)
    problem = problem_of(graph, random_topology(seed, 4, memory_gib * 2**30))
    cg = build_cluster_graph(problem, reference_costs(problem), np.arange(graph.n_ops))
    sets = enumerate_fronted(cg.k, cg.src, cg.dst, 10_000)
    assert sets is not None
    tr = build_transitions(cg, sets, 10**7)
    assert tr is not None
    graphs = _degree_graphs(cg, seed)
    by_degree = {t: tr if t == 1 else with_cluster_costs(tr, g) for t, g in graphs.items()}
    found = run_degree_dp(problem, by_degree, n_stages, replicas, 4, units)
    expected = _brute_force(problem, graphs, n_stages, replicas, units, 4)
    if not np.isfinite(expected):
        assert found is None
        return
    assert found is not None
    assert found.objective_s == pytest.approx(expected, rel=1e-9)
    # the stages cover every cluster once, follow the edges, use the units and realise the value
    assert np.stack(found.stages).sum(axis=0).tolist() == [1] * cg.k
    stage_of = np.argmax(np.stack(found.stages), axis=0)
    assert (stage_of[cg.src] <= stage_of[cg.dst]).all() and sum(found.degrees) <= units
    again = [_stage_s(problem, graphs, m, t, s, n_stages, replicas, 4)
             for s, (m, t) in enumerate(zip(found.stages, found.degrees, strict=True))]
    assert max(again) == pytest.approx(found.objective_s, rel=1e-9)
    assert again == pytest.approx(found.stage_s, rel=1e-9)


@settings(max_examples=examples(15), deadline=None)
@given(seed=dag_seeds, n_ops=st.integers(2, 12), n_stages=st.integers(1, 4))
def test_degree_one_alone_is_the_dp_of_eq_13(seed: int, n_ops: int, n_stages: int) -> None:
    """With degree 1 only and one unit per stage the recurrence is Eq. 13's: the same optimum."""
    problem = problem_of(random_dag(seed, n_ops, 0.3), random_topology(seed, 4))
    cg = build_cluster_graph(problem, reference_costs(problem), np.arange(n_ops))
    sets = enumerate_fronted(cg.k, cg.src, cg.dst, 10_000)
    assert sets is not None
    tr = build_transitions(cg, sets, 10**7)
    assert tr is not None
    one = run_dp(problem, tr, n_stages, 2, 4)
    found = run_degree_dp(problem, {1: tr}, n_stages, 2, 4, n_stages)
    assert (one is None) == (found is None)
    if one is not None and found is not None:
        assert found.objective_s == one.objective_s and found.degrees == [1] * n_stages


def test_with_cluster_costs_of_the_same_graph_is_the_same_pairs() -> None:
    problem = problem_of(random_dag(5, 9, 0.3), random_topology(5, 2))
    cg = build_cluster_graph(problem, reference_costs(problem), np.arange(9))
    sets = enumerate_fronted(cg.k, cg.src, cg.dst, 10_000)
    assert sets is not None
    tr = build_transitions(cg, sets, 10**7)
    assert tr is not None
    again = with_cluster_costs(tr, cg)
    for field in ("base_s", "param_bytes", "act_bytes", "working_bytes", "input_bytes", "comm_s"):
        assert np.array_equal(getattr(again, field), getattr(tr, field)), field


def test_too_few_units_or_a_deadline_give_none() -> None:
    problem = problem_of(random_dag(2, 6, 0.3), random_topology(2, 4))
    cg = build_cluster_graph(problem, reference_costs(problem), np.arange(6))
    sets = enumerate_fronted(cg.k, cg.src, cg.dst, 10_000)
    assert sets is not None
    tr = build_transitions(cg, sets, 10**7)
    assert tr is not None
    assert run_degree_dp(problem, {1: tr}, 3, 1, 4, 2) is None  # three stages need three units
    assert run_degree_dp(problem, {1: tr}, 2, 1, 4, 4, deadline=0.0) is None
    assert run_degree_dp(problem, {1: tr}, 2, 1, 4, 4) is not None
