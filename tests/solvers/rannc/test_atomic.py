"""Atomic-level partitioning (RaNNC §III-A): constant flags, one non-constant op per subcomponent, clones."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.model.graph import Edge, Node, OpGraph
from solvers.rannc.atomic import atomic_subcomponents, constant_flags
from tests.strategies import dag_graphs, examples


def _graph(nodes: list[Node], edges: list[tuple[str, str]]) -> OpGraph:
    return OpGraph.build("g", nodes, [Edge(a, b, 1e3) for a, b in edges])


def _weights_graph() -> OpGraph:
    """x -> mm1 -> mm2 -> out; w -> t (constant transpose) feeds mm1 and mm2 (tied weight)."""
    nodes = [Node("x", "input", 1.0), Node("w", "parameter", 0.0, param_bytes=8.0), Node("t", "aten.t", 0.5),
             Node("mm1", "aten.mm", 2.0), Node("mm2", "aten.mm", 2.0), Node("out", "aten.sum", 0.1)]
    return _graph(nodes, [("x", "mm1"), ("w", "t"), ("t", "mm1"), ("t", "mm2"), ("mm1", "mm2"), ("mm2", "out")])


def test_derived_flags_treat_parameter_sources_as_constant() -> None:
    g = _weights_graph()
    const = constant_flags(g)
    assert [g.nodes[i].id for i in np.flatnonzero(const)] == ["w", "t"]


def test_given_flags_win_and_propagate() -> None:
    g = _weights_graph()
    nodes = [replace(n, constant=n.id == "x") for n in g.nodes]  # flag the input as constant instead
    g2 = OpGraph.build("g", nodes, list(g.edges))
    const = constant_flags(g2)
    # w is an unflagged source, so it is the model input now; x is constant
    assert {g2.nodes[i].id for i in np.flatnonzero(~const)} == {"w", "t", "mm1", "mm2", "out"}


def test_clone_of_a_shared_constant_chain() -> None:
    g = _weights_graph()
    atoms = atomic_subcomponents(g)
    ids = [[g.nodes[int(v)].id for v in m] for m in atoms.members]
    assert ids == [["x"], ["w", "t", "mm1"], ["w", "t", "mm2"], ["out"]]
    assert atoms.n_clones == 2  # w and t each have one extra copy
    assert sorted(g.nodes[v].id for v in atoms.cloned_ops) == ["t", "w"]


def test_constant_without_non_constant_consumer_joins_the_last_subcomponent() -> None:
    nodes = [Node("x", "input", 1.0), Node("y", "aten.relu", 1.0), Node("c", "constant", 0.0),
             Node("c2", "aten.t", 0.0)]
    g = _graph(nodes, [("x", "y"), ("c", "c2")])
    atoms = atomic_subcomponents(g)
    assert [[g.nodes[int(v)].id for v in m] for m in atoms.members] == [["x"], ["y", "c", "c2"]]


def test_all_constant_graph_falls_back_to_one_op_per_subcomponent() -> None:
    nodes = [Node("a", "constant", 1.0, constant=True), Node("b", "aten.t", 1.0, constant=True)]
    atoms = atomic_subcomponents(_graph(nodes, [("a", "b")]))
    assert atoms.n_atomic == 2 and atoms.n_clones == 0


@settings(max_examples=examples(60), deadline=None)
@given(st.data())
def test_atomic_properties(data: st.DataObject) -> None:
    base = data.draw(dag_graphs(min_ops=1, max_ops=14, edge_p=0.3))
    flags = data.draw(st.lists(st.booleans(), min_size=base.n_ops, max_size=base.n_ops))
    g = OpGraph.build("g", [replace(n, constant=f) for n, f in zip(base.nodes, flags, strict=True)],
                      list(base.edges))
    atoms = atomic_subcomponents(g)
    const = atoms.constant
    # each subcomponent holds exactly one non-constant op, its anchor
    for a, members in enumerate(atoms.members):
        non_const = [int(v) for v in members if not const[v]]
        assert non_const == [int(atoms.anchor[a])]
        assert len(set(members.tolist())) == len(members)
    # the union covers every op; copies are accounted
    copies = np.zeros(g.n_ops, dtype=np.int64)
    for members in atoms.members:
        copies[members] += 1
    assert (copies >= 1).all()
    assert int((copies - 1).sum()) == atoms.n_clones
    assert copies.tolist() == [len(h) for h in atoms.homes]
    # a constant op sits with every consumer's subcomponent (folding + cloning)
    for v in range(g.n_ops):
        if const[v]:
            for u in g.succ[v]:
                assert set(atoms.homes[u]) <= set(atoms.homes[v])
    # non-constant iff reachable from an unflagged input through unflagged ops
    fallback = not const.any() and any(n.constant for n in g.nodes)
    if not fallback:
        for v in range(g.n_ops):
            if not const[v]:
                assert not g.nodes[v].constant
                assert not g.pred[v] or any(not const[u] for u in g.pred[v])
