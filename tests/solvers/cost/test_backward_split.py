"""The input-gradient / weight-gradient split of backward times (zero-bubble schedules)."""

from __future__ import annotations

import numpy as np

from solvers.cost.backward_split import split_backward_s, weight_grad_fraction
from solvers.model.graph import Edge, Node, OpGraph


def test_ops_with_parameters_split_evenly_and_the_others_have_no_weight_gradient() -> None:
    graph = OpGraph.build("g", [Node("mm", "aten.mm", 1.0, 2.0, param_bytes=64.0), Node("relu", "aten.relu", 0.5, 0.5)],
                          [Edge("mm", "relu", 8.0)])
    assert weight_grad_fraction(graph).tolist() == [0.5, 0.0]
    inp, wgt = split_backward_s(graph, graph.bwd_s)
    assert inp.tolist() == [1.0, 0.5] and wgt.tolist() == [1.0, 0.0]
    np.testing.assert_array_equal(inp + wgt, graph.bwd_s)
