"""Graphviz DOT export, compared with golden files in tests/data/ (regenerate: PLACER_REGEN_GOLDEN=1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from solvers.model.dot import to_dot
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.model.topology import Device, Link, Topology
from solvers.validity import resolve_plan

GOLDEN = Path(__file__).resolve().parents[2] / "data"


def small_graph() -> OpGraph:
    nodes = [Node("embed", "aten.embedding", 2e-4), Node("qkv", "aten.addmm", 1.5e-3, 3e-3),
             Node('odd "name"', "aten.softmax", 4e-6), Node("out", "aten.mm", 1.25)]
    edges = [Edge("embed", "qkv", 3 * 2**20), Edge("qkv", 'odd "name"', 512.0), Edge('odd "name"', "out", 0.0),
             Edge("embed", "out", 5 * 2**30)]
    return OpGraph.build("tiny model", nodes, edges)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("PLACER_REGEN_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_graph_without_plan_matches_golden() -> None:
    check_golden("tiny.dot", to_dot(small_graph()))


def test_graph_with_plan_has_one_cluster_per_stage() -> None:
    g = small_graph()
    topo = Topology.from_links("t", [Device("gpu0"), Device("gpu1"), Device("gpu2")],
                               [Link("gpu0", "gpu1", 1e9), Link("gpu1", "gpu2", 1e9)])
    plan = Plan(stages=(Stage(("qkv", "embed"), ("gpu0",)), Stage(('odd "name"', "out"), ("gpu1", "gpu2"))))
    rows = OpGraph.build(g.name, list(g.nodes), list(g.edges), profiled_batch_size=2)  # two replicas split it
    text = to_dot(g, resolve_plan(Problem(rows, topo), plan))
    assert text.count("subgraph cluster_") == 2
    assert 'label="stage 1: gpu1, gpu2"' in text
    check_golden("tiny_plan.dot", text)


@pytest.mark.parametrize("name", ["tiny.dot", "tiny_plan.dot"])
def test_golden_files_are_well_formed(name: str) -> None:
    text = (GOLDEN / name).read_text()
    assert text.startswith('digraph "tiny model" {') and text.rstrip().endswith("}")
    assert text.count("{") == text.count("}")
    assert '\\"name\\"' in text  # quotes inside ids are escaped
