"""Block-level partitioning (RaNNC §III-B): blocks are convex, ordered, within memory, k respected."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.generate import generate_graph
from solvers.model.graph import OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.rannc.atomic import atomic_subcomponents
from solvers.rannc.blocks import BlockPartition, partition_blocks
from solvers.rannc.coarsen import level_aggregates
from tests.strategies import dag_graphs, examples


def _topology(memory_bytes: float) -> Topology:
    devices = [Device("g0", "V100", "h0", memory_bytes), Device("g1", "V100", "h0", memory_bytes)]
    return Topology.from_links("pair", devices, [Link("g0", "g1", 1e10, 1e-6)])


def _check(problem: Problem, bp: BlockPartition, n_atomic: int) -> None:
    ag = bp.graph
    block_of = np.full(n_atomic, -1)
    for j, atoms in enumerate(bp.blocks):
        assert (block_of[atoms] == -1).all(), "blocks overlap"
        block_of[atoms] = j
    assert (block_of >= 0).all(), "an atomic subcomponent is in no block"
    # every edge between atomic subcomponents goes forward in the block order: blocks are convex
    assert (block_of[ag.edge_src] <= block_of[ag.edge_dst]).all()
    # op level: the earliest block holding each op respects every dependency
    g = problem.graph
    first = np.full(g.n_ops, -1)
    for j, ops in enumerate(bp.block_ops):
        fresh = ops[first[ops] < 0]
        first[fresh] = j
    assert (first >= 0).all()
    assert (first[g.edge_src] <= first[g.edge_dst]).all()
    # a block of several atomic subcomponents fits the device memory
    _, param, act, work = level_aggregates(ag, block_of, bp.k)
    for j, atoms in enumerate(bp.blocks):
        if len(atoms) > 1:
            assert ag.fits(param[j], act[j], work[j])


def _cut(bp: BlockPartition) -> float:
    ag = bp.graph
    block_of = np.empty(ag.n, dtype=np.int64)
    for j, atoms in enumerate(bp.blocks):
        block_of[atoms] = j
    return float(ag.edge_bytes[block_of[ag.edge_src] != block_of[ag.edge_dst]].sum())


@settings(max_examples=examples(60), deadline=None)
@given(st.data())
def test_blocks_are_convex_ordered_and_fit(data: st.DataObject) -> None:
    base = data.draw(dag_graphs(min_ops=1, max_ops=25, edge_p=0.25))
    flags = data.draw(st.lists(st.booleans(), min_size=base.n_ops, max_size=base.n_ops))
    g = OpGraph.build("g", [replace(n, constant=f and i % 3 == 0) for i, (n, f) in
                            enumerate(zip(base.nodes, flags, strict=True))], list(base.edges))
    memory = data.draw(st.sampled_from([1e7, 3e7, 1e18]))
    problem = Problem(g, _topology(memory), "throughput", ProblemSettings())
    atoms = atomic_subcomponents(g)
    k = data.draw(st.integers(1, 8))
    recompute = data.draw(st.booleans())
    bp = partition_blocks(problem, atoms, k, recompute_possible=recompute, refine=True)
    _check(problem, bp, atoms.n_atomic)
    plain = partition_blocks(problem, atoms, k, recompute_possible=recompute, refine=False)
    _check(problem, plain, atoms.n_atomic)
    if bp.coarsened_groups <= k:  # no compaction: uncoarsening never adds traffic between blocks
        assert _cut(bp) <= _cut(plain) * (1 + 1e-9)
    if memory == 1e18:
        assert bp.k == min(k, atoms.n_atomic)  # k is reachable without memory pressure
    else:
        assert bp.k >= min(k, atoms.n_atomic)


def test_transformer_blocks_reach_k_and_refine() -> None:
    g = generate_graph("transformer", layers=8, hidden=256, heads=4, seq_len=128, granularity="head")
    problem = Problem(g, _topology(32 * 2**30), "throughput", ProblemSettings())
    atoms = atomic_subcomponents(g)
    bp = partition_blocks(problem, atoms, 16, recompute_possible=False)
    _check(problem, bp, atoms.n_atomic)
    assert bp.k == 16 and bp.levels >= 3
    comp = np.asarray([bp.graph.comp_s[b].sum() for b in bp.blocks])
    # the lightest groups merge first: the median block is no lighter than a tenth of the mean
    assert float(np.median(comp)) >= 0.1 * comp.mean()
    assert bp.moves > 0


def test_memory_stops_merging() -> None:
    g = generate_graph("transformer", layers=4, hidden=256, heads=4, seq_len=128)
    atoms = atomic_subcomponents(g)
    per_layer_bytes = float(g.param_bytes.sum()) / 4 * 4  # params + optimizer state of one layer
    problem = Problem(g, _topology(per_layer_bytes), "throughput", ProblemSettings())
    bp = partition_blocks(problem, atoms, 1, recompute_possible=True)
    _check(problem, bp, atoms.n_atomic)
    assert bp.k > 1  # one block cannot hold the whole model
