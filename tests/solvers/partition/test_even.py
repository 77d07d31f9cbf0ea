from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.generate import generate_topology
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.partition.even import balanced_chunks, even_plan
from solvers.runnable import idle_stages
from tests.strategies import examples


def brute_force_bottleneck(weights: list[float], k: int) -> float:
    n = len(weights)
    best = float("inf")
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = [0, *cuts, n]
        best = min(best, max(sum(weights[a:b]) for a, b in itertools.pairwise(bounds)))
    return best


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.floats(0.0, 10.0), min_size=1, max_size=9), st.integers(1, 6))
def test_balanced_chunks_is_optimal_and_exact(weights: list[float], k: int) -> None:
    arr = np.asarray(weights, dtype=np.float64)
    chunks = balanced_chunks(arr, k)
    kk = min(k, len(weights))
    assert len(chunks) == kk
    assert chunks[0][0] == 0 and chunks[-1][1] == len(weights)
    assert all(a < b for a, b in chunks)
    assert all(b == c for (_, b), (c, _) in itertools.pairwise(chunks))
    got = max(float(arr[a:b].sum()) for a, b in chunks)
    assert got <= brute_force_bottleneck(weights, kk) * (1 + 1e-9) + 1e-12


def test_the_even_split_gives_every_stage_an_op_that_computes() -> None:
    """The plain cut of the heaviest chunk takes the input and the mask (zero work) off alone; the even split
    moves each of them to the next op that computes (a stage of inputs and constants is no stage: the
    launcher refuses it), where the graph has an op that computes for every stage."""
    nodes = [Node("x", "input", 0.0), Node("mask", "aten.ones.default", 0.0, constant=True),
             Node("h1", "aten.linear.default", 5.0, 5.0), Node("h2", "aten.linear.default", 2.5, 2.5),
             Node("h3", "aten.linear.default", 1e-3, 1e-3)]
    edges = [Edge("x", "h1", 64.0), Edge("h1", "h2", 64.0), Edge("h2", "h3", 64.0), Edge("mask", "h3", 64.0)]
    graph = OpGraph.build("mask-late", nodes, edges, 4)
    topo = generate_topology("hierarchical", nodes=1, gpus_per_node=4)
    plan = even_plan(Problem(graph, topo, settings=ProblemSettings(micro_batches=(2,))), 3, 1, 2)
    assert [s.ops for s in plan.stages] == [("x", "mask", "h1"), ("h2",), ("h3",)]
    assert idle_stages(graph, plan) == []
    # four stages of three ops that compute: the plain cut is kept (and the plan is then refused as not runnable)
    four = even_plan(Problem(graph, topo, settings=ProblemSettings(micro_batches=(2,))), 4, 1, 2)
    assert len(four.stages) == 4 and idle_stages(graph, four) != []
