"""GCOF (Algorithm 1, Fig. 7) and the node-budget coarsening: partitions, acyclic, rules honoured."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.model.errors import InvalidOptions
from solvers.model.graph import Edge, Node, OpGraph
from solvers.moirai.coarsen_budget import coarsen_to_budget
from solvers.moirai.gcof import Grouping, gcof, identity_grouping
from solvers.moirai.rules import FusionRules, canonical_type
from tests.strategies import examples

TYPES = ["aten.convolution", "aten.batch_norm", "aten.relu", "aten.add", "aten.mm", "aten.gelu"]


def _graph(spec: list[tuple[str, str]], edges: list[tuple[str, str]]) -> OpGraph:
    return OpGraph.build("g", [Node(i, op, 1e-3) for i, op in spec], [Edge(a, b, 1.0) for a, b in edges])


def _sets(graph: OpGraph, grouping: Grouping) -> set[frozenset[str]]:
    return {frozenset(graph.nodes[v].id for v in ops) for ops in grouping.groups}


def _is_partition_and_acyclic(graph: OpGraph, grouping: Grouping) -> bool:
    unit = grouping.unit_of(graph.n_ops)
    if sorted(v for ops in grouping.groups for v in ops) != list(range(graph.n_ops)):
        return False
    succ: dict[int, set[int]] = {u: set() for u in range(grouping.n_units)}
    for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), strict=True):
        if unit[s] != unit[d]:
            succ[unit[s]].add(unit[d])
    indeg = {u: 0 for u in succ}
    for u in succ:
        for w in succ[u]:
            indeg[w] += 1
    ready = [u for u, d in indeg.items() if d == 0]
    seen = 0
    while ready:
        u = ready.pop()
        seen += 1
        for w in succ[u]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    return seen == grouping.n_units


def test_figure_7() -> None:
    """Fig. 7: multi-output add is not fused; a bound add∘relu joins conv∘bn by rule 3; the other is released."""
    spec = [("a0", "aten.add"), ("r0", "aten.relu"), ("a1", "aten.add"), ("r1", "aten.relu"), ("a2", "aten.add"),
            ("r2", "aten.relu"), ("c1", "aten.convolution"), ("b1", "aten.batch_norm"),
            ("c2", "aten.convolution"), ("b2", "aten.batch_norm")]
    edges = [("a0", "r0"), ("a0", "c1"), ("r0", "a1"), ("a1", "r1"), ("r1", "a2"), ("a2", "r2"),
             ("c1", "b1"), ("b1", "c2"), ("c2", "b2"), ("b2", "a2")]
    graph = _graph(spec, edges)
    grouping = gcof(graph, FusionRules.parse(None))
    assert _sets(graph, grouping) == {frozenset(s) for s in (
        {"a0"}, {"r0"}, {"a1"}, {"r1"}, {"c1", "b1"}, {"c2", "b2", "a2", "r2"})}
    assert "conv∘bn∘add∘relu" in grouping.labels


def test_multi_output_producer_is_not_fused() -> None:
    graph = _graph([("c", "aten.convolution"), ("b", "aten.batch_norm"), ("x", "aten.relu")],
                   [("c", "b"), ("c", "x")])
    assert gcof(graph, FusionRules.parse(None)).n_units == 3


def test_rules_are_data_and_overridable() -> None:
    graph = _graph([("m", "aten.mm"), ("a", "aten.add"), ("g", "aten.gelu")], [("m", "a"), ("a", "g")])
    assert gcof(graph, FusionRules.parse(None)).n_units == 1  # mm∘add∘gelu is a default rule
    assert _sets(graph, gcof(graph, FusionRules.parse([["aten.add", "aten.gelu"]]))) == {
        frozenset({"m"}), frozenset({"a", "g"})}
    assert gcof(graph, FusionRules.parse([])).n_units == 3


def test_canonical_types_and_bad_rules() -> None:
    assert canonical_type("aten.relu.default") == "relu"
    assert canonical_type("Conv2d(3, 64, kernel_size=(7, 7))") == "conv"
    assert canonical_type("BatchNorm2d") == canonical_type("aten.batch_norm") == "bn"
    with pytest.raises(InvalidOptions, match=r"fusion_rules\[0\]"):
        FusionRules.parse([["aten.relu"]])
    with pytest.raises(InvalidOptions, match=r"fusion_rules\[1\]\[0\]"):
        FusionRules.parse([["aten.mm", "aten.add"], ["", "aten.add"]])


@st.composite
def dags(draw: st.DrawFn) -> OpGraph:
    n = draw(st.integers(2, 24))
    types = draw(st.lists(st.sampled_from(TYPES), min_size=n, max_size=n))
    edges = [(f"v{i}", f"v{j}") for i in range(n) for j in range(i + 1, min(n, i + 4))
             if draw(st.booleans())]
    return _graph([(f"v{i}", t) for i, t in enumerate(types)], edges)


@settings(max_examples=examples(60), deadline=None)
@given(dags())
def test_gcof_gives_an_acyclic_partition_of_rule_runs(graph: OpGraph) -> None:
    rules = FusionRules.parse(None)
    grouping = gcof(graph, rules)
    assert _is_partition_and_acyclic(graph, grouping)
    for ops, label in zip(grouping.groups, grouping.labels, strict=True):
        if len(ops) > 1:
            assert rules.is_rule(tuple(label.split("∘")))


@settings(max_examples=examples(60), deadline=None)
@given(dags(), st.integers(1, 10))
def test_budget_coarsening_is_acyclic_and_within_budget(graph: OpGraph, budget: int) -> None:
    grouping = coarsen_to_budget(graph, identity_grouping(graph), budget)
    assert grouping.n_units <= budget
    assert _is_partition_and_acyclic(graph, grouping)
