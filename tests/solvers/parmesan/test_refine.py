"""Refinement (§IV-C) never worsens the phase-1 objective and keeps stages ordered and convex."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.cost.memory import held_micro_batches, stage_memory_bytes
from solvers.cost.traffic import group_input_bytes
from solvers.parmesan.refine import Partition, StageDegrees, articulation_points, refine
from solvers.partition.costs import reference_costs, stage_capacity_bytes
from solvers.partition.shapes import StagePartition
from tests.solvers.parmesan.strategies import dag_seeds, problem_of, random_dag, random_topology
from tests.strategies import examples


@settings(max_examples=examples(30), deadline=None)
@given(seed=dag_seeds, n_ops=st.integers(4, 30), n_stages=st.integers(2, 4))
def test_refinement_never_worsens(seed: int, n_ops: int, n_stages: int) -> None:
    graph = random_dag(seed, n_ops, 0.25)
    problem = problem_of(graph, random_topology(seed, 4))
    costs = reference_costs(problem)
    # a random ordered partition: cut the topological order at random points
    rng = np.random.default_rng(seed)
    n_stages = min(n_stages, n_ops)
    cuts = np.sort(rng.choice(np.arange(1, n_ops), n_stages - 1, replace=False))
    stage_of = np.empty(n_ops, dtype=np.int64)
    stage_of[graph.topo_order] = np.searchsorted(cuts, np.arange(n_ops), side="right")
    before = Partition.of(graph, costs, stage_of, n_stages).objective_s(2)
    pinned = {int(graph.topo_order[0]): 0}
    out, stats = refine(problem, costs, StagePartition(stage_of, n_stages, 2, 4), pinned)
    after = Partition.of(graph, costs, out, n_stages).objective_s(2)
    assert after <= before * (1 + 1e-12)
    assert stats["refine_after_s"] == after
    assert (out[graph.edge_src] <= out[graph.edge_dst]).all()
    assert len(set(out.tolist())) == n_stages
    assert out[int(graph.topo_order[0])] == 0
    assert stats["refine_steps"] <= 100


def test_articulation_points_of_a_chain_with_a_diamond() -> None:
    from solvers.model.graph import Edge, Node, OpGraph

    nodes = [Node(n, "op", 1e-3) for n in "abcdef"]
    edges = [Edge("a", "b"), Edge("b", "c"), Edge("b", "d"), Edge("c", "e"), Edge("d", "e"), Edge("e", "f")]
    graph = OpGraph.build("g", nodes, edges)
    assert {graph.nodes[v].id for v in articulation_points(graph)} == {"b", "e"}


@settings(max_examples=examples(20), deadline=None)
@given(seed=dag_seeds, n_ops=st.integers(4, 24), n_stages=st.integers(2, 4))
def test_refinement_with_a_degree_per_stage_keeps_each_stage_at_its_degree(seed: int, n_ops: int,
                                                                             n_stages: int) -> None:
    """With each stage's own op times and split memory, no move raises the largest stage time at the
    stages' degrees or puts a stage over memory at its degree; with degree 1 everywhere it is the refinement
    without degrees."""
    graph = random_dag(seed, n_ops, 0.25)
    problem = problem_of(graph, random_topology(seed, 4, 0.02 * 2**30))
    costs = reference_costs(problem)
    rng = np.random.default_rng(seed)
    n_stages = min(n_stages, n_ops)
    cuts = np.sort(rng.choice(np.arange(1, n_ops), n_stages - 1, replace=False))
    stage_of = np.empty(n_ops, dtype=np.int64)
    stage_of[graph.topo_order] = np.searchsorted(cuts, np.arange(n_ops), side="right")
    start = StagePartition(stage_of, n_stages, 2, 4)
    plain = refine(problem, costs, start)
    ones = StageDegrees((1,) * n_stages, np.tile(costs.work_s, (n_stages, 1)), np.zeros(n_ops, dtype=bool))
    same = refine(problem, costs, start, degrees=ones)
    assert np.array_equal(plain[0], same[0]) and plain[1] == same[1]
    split = rng.random(n_ops) < 0.5
    degrees = tuple(int(t) for t in rng.choice([1, 2, 4], n_stages))
    work = np.stack([np.where(split, costs.work_s / t + 1e-4 * (t > 1), costs.work_s) for t in degrees])
    stage_degrees = StageDegrees(degrees, work, split)
    before = Partition.of(graph, costs, stage_of, n_stages, stage_degrees).objective_s(2)
    out, stats = refine(problem, costs, start, degrees=stage_degrees)
    after = Partition.of(graph, costs, out, n_stages, stage_degrees).objective_s(2)
    assert after <= before * (1 + 1e-12) and stats["refine_after_s"] == after
    assert (out[graph.edge_src] <= out[graph.edge_dst]).all() and len(set(out.tolist())) == n_stages
    inputs = group_input_bytes(graph, out)
    for s, t in enumerate(degrees):
        moved = set(np.flatnonzero(out == s).tolist()) != set(np.flatnonzero(stage_of == s).tolist())
        if moved:  # a stage a move touched fits memory at its degree
            k = held_micro_batches(problem, problem.settings.own_schedule, n_stages, s, 4)
            assert stage_memory_bytes(problem, np.flatnonzero(out == s), 2, k, float(inputs[s]), tp=t,
                                      split=split) <= stage_capacity_bytes(problem, s)
