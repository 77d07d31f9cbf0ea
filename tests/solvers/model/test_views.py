"""Views hold no bytes of their own: :func:`solvers.model.graph.aliases_input` and what the op-level runner keeps."""

from __future__ import annotations

import numpy as np
import pytest

from solvers.model.graph import OpGraph, aliases_input
from solvers.model.graph_records import Edge, Node


@pytest.mark.parametrize(("op", "view"), [
    ("aten.view.default", True), ("aten.transpose.int", True), ("getitem", True), ("aten.split.Tensor", True),
    ("aten._unsafe_view.default", True), ("prims.squeeze.default", True), ("aten.expand.default", True),
    ("aten.reshape.default", False), ("aten.contiguous.default", False), ("aten.addmm.default", False),
    ("aten.viewer.default", False), ("Linear", False), ("", False),
])
def test_a_view_is_named_by_its_aten_target(op: str, view: bool) -> None:
    assert aliases_input(op) is view


def test_a_view_allocates_no_output_bytes() -> None:
    nodes = [Node("mm", "aten.mm.default", 1e-3, act_bytes=400.0), Node("v", "aten.view.default", 0.0),
             Node("t", "aten.t.default", 0.0), Node("relu", "aten.relu.default", 1e-4, act_bytes=100.0)]
    edges = [Edge("mm", "v", 400.0), Edge("v", "t", 400.0), Edge("t", "relu", 400.0), Edge("mm", "relu", 100.0)]
    g = OpGraph.build("views", nodes, edges)
    assert g.output_bytes.tolist() == [400.0, 400.0, 400.0, 0.0]
    assert g.allocated_output_bytes.tolist() == [400.0, 0.0, 0.0, 0.0]
    assert np.all(g.allocated_output_bytes <= g.output_bytes)
