"""Standard Evaluation, rough estimation (Celeritas §4.2.1): per-node linear regression."""

from __future__ import annotations

import pytest

from solvers.model.errors import InvalidGraph, InvalidInput
from solvers.model.graph import Edge, KindTimes, Node, OpGraph
from solvers.model.scaling import scale_graph


def _profile(batch: int, *, noise: float = 0.0, drop_edge: bool = False) -> OpGraph:
    """Memory and edge bytes linear in the batch, parameters constant, times affine."""
    nodes = [
        Node("a", "aten.conv", 1e-3 + 2e-4 * batch + noise, 2e-3 + 4e-4 * batch, 1e6, 1e5 * batch,
             5e4 * batch + 1e3, 6e4 * batch, times={"H100": KindTimes(1e-4 * batch, 2e-4 * batch)}),
        Node("b", "aten.relu", 1e-4 * batch, 1e-4 * batch, 0.0, 2e5 * batch, 1e3, 1e3),
    ]
    edges = [] if drop_edge else [Edge("a", "b", 4e5 * batch)]
    return OpGraph.build("m", nodes, edges, profiled_batch_size=batch)


def test_linear_profiles_are_extrapolated_exactly() -> None:
    g = scale_graph([_profile(2), _profile(4), _profile(8)], [2, 4, 8], 512)
    a, b = g.nodes
    assert g.profiled_batch_size == 512
    assert a.act_bytes == pytest.approx(1e5 * 512)
    assert a.mem_fwd_bytes == pytest.approx(5e4 * 512 + 1e3)
    assert a.param_bytes == pytest.approx(1e6)
    assert a.fwd_s == pytest.approx(1e-3 + 2e-4 * 512)
    assert a.times is not None and a.times["H100"].bwd_s == pytest.approx(2e-4 * 512)
    assert b.times is None
    assert g.edges[0].bytes == pytest.approx(4e5 * 512)
    assert g.attrs["scaled_from_batch_sizes"] == [2, 4, 8]


def test_regression_averages_noise() -> None:
    """Times are only roughly linear: least squares over the profiles, clipped at zero."""
    profiles = [_profile(2, noise=1e-4), _profile(4, noise=-1e-4), _profile(6, noise=1e-4)]
    g = scale_graph(profiles, [2, 4, 6], 64)
    assert g.nodes[0].fwd_s == pytest.approx(1e-3 + 2e-4 * 64 + 1e-4 / 3, rel=1e-6)
    assert all(n.fwd_s >= 0 for n in g.nodes)


def test_single_profile_scales_proportionally() -> None:
    g = scale_graph([_profile(4)], [4], 16)
    assert g.nodes[1].act_bytes == pytest.approx(2e5 * 16)
    assert g.nodes[0].param_bytes == pytest.approx(1e6)


def test_mismatched_profiles_are_rejected() -> None:
    other = OpGraph.build("m", [Node("a", "x", 1.0), Node("c", "x", 1.0)], [])
    with pytest.raises(InvalidGraph, match=r"'b'"):
        scale_graph([_profile(2), other], [2, 4], 8)
    with pytest.raises(InvalidGraph, match="edges"):
        scale_graph([_profile(2), _profile(4, drop_edge=True)], [2, 4], 8)
    with pytest.raises(InvalidInput, match="batch_sizes"):
        scale_graph([_profile(2), _profile(4)], [2, 2], 8)
    with pytest.raises(InvalidInput, match="batch_sizes"):
        scale_graph([_profile(2)], [2, 4], 8)


def _split_profile(batch: int, recorded: bool) -> OpGraph:
    split = {"bwd_input_s": 0.001 * batch, "bwd_weight_s": 0.003 * batch} if recorded else {}
    nodes = [Node("mm", "aten.mm", 0.002 * batch, 0.004 * batch, param_bytes=64.0, **split),
             Node("relu", "aten.relu", 0.001 * batch, 0.001 * batch, bwd_input_s=0.001 * batch, bwd_weight_s=0.0)]
    return OpGraph.build("g", nodes, [Edge("mm", "relu", 8.0 * batch)], profiled_batch_size=batch)


def test_a_recorded_backward_split_is_scaled_where_every_profile_has_it() -> None:
    g = scale_graph([_split_profile(2, True), _split_profile(4, True)], [2, 4], 16)
    assert (g.nodes[0].bwd_input_s, g.nodes[0].bwd_weight_s) == pytest.approx((0.016, 0.048))
    assert (g.nodes[1].bwd_input_s, g.nodes[1].bwd_weight_s) == pytest.approx((0.016, 0.0))
    partial = scale_graph([_split_profile(2, False), _split_profile(4, True)], [2, 4], 16)
    assert partial.nodes[0].bwd_input_s is None and partial.nodes[0].bwd_weight_s is None
    assert partial.nodes[1].bwd_input_s == pytest.approx(0.016)
