"""``rannc`` with tensor parallelism: Algorithm 2 per degree on the layout's groups."""

from __future__ import annotations

import pytest

from solvers import solve
from solvers.model.topology import Device, Link, Topology
from solvers.rannc.allocate import node_layout, tp_layout
from tests.solvers.exact.test_exact_tp import LAT, one_host, problem


def test_tp_wins_where_only_split_weights_fit_and_loses_on_a_slow_link() -> None:
    """The closed forms of tests/solvers/exact/test_exact_tp.py."""
    plan = solve(problem(one_host(2, 1e9, 23e6), 1), "rannc", time_limit_s=20)
    assert [(s.devices, s.tp) for s in plan.stages] == [(("d0", "d1"), 2)] and plan.stats["tp"] == 2
    fwd = 3.0 / 2 + 0.75 + 4e6 / 1e9 + 2 * LAT
    bwd = 6.0 / 2 + 0.25 + 4e6 / 1e9 + 2 * LAT
    assert plan.metrics["objective_s"] == pytest.approx(fwd + bwd, rel=1e-12)
    slow = solve(problem(one_host(2, 1e7, 1e12), 8), "rannc", time_limit_s=20)
    without = solve(problem(one_host(2, 1e7, 1e12), 8, max_tp=1), "rannc", time_limit_s=20)
    assert all(s.tp == 1 for s in slow.stages)
    assert slow.to_document()["stages"] == without.to_document()["stages"]
    fixed = solve(problem(one_host(4, 1e9, 1e12), 2, tp=2), "rannc", time_limit_s=20)
    assert fixed.stages and all(s.tp == 2 for s in fixed.stages)


def test_groups_follow_the_locality_chain_and_keep_one_kind() -> None:
    """Two NVLink pairs (0-2, 1-3) in a host of four: the chain steps along them, so groups of 2 are the pairs."""
    devices = [Device(f"g{i}", "A100", "h0", 80e9) for i in range(4)]
    fast = {(0, 2), (1, 3)}
    links = [Link(f"g{a}", f"g{b}", 300e9 if (a, b) in fast else 16e9, 1e-6) for a in range(4) for b in range(a + 1, 4)]
    topo = Topology.from_links("pairs", devices, links)
    found = tp_layout(node_layout(topo), topo, 2)
    assert found is not None and sorted(map(sorted, found[1])) == [[0, 2], [1, 3]]
    mixed = Topology.from_links("mixed", [Device("a", "A100", "h0"), Device("b", "H100", "h0")], [Link("a", "b", 1e9)])
    assert tp_layout(node_layout(mixed), mixed, 2) is None
    assert tp_layout(node_layout(topo), topo, 8) is None
