"""The shared cost model (DESIGN §4): compute, communication, traffic, memory."""

from __future__ import annotations

import numpy as np
import pytest

from solvers.cost.comm import (
    GRADIENT_BUCKET_BYTES,
    allreduce_s,
    gradient_allreduce_s,
    gradient_buckets,
    group_transfer_s,
    transfer_pairs,
    transfer_s,
)
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import capacity_bytes, device_memory_bytes, in_flight_micro_batches, stage_memory_bytes
from solvers.cost.traffic import group_input_bytes, group_traffic_bytes
from solvers.model.graph import Edge, KindTimes, Node, OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology


def _topology() -> Topology:
    devices = [Device("a", "V100", "h0", 100.0, 1.0), Device("b", "V100", "h0", 100.0, 2.0),
               Device("c", "A100", "h1", 100.0, 1.0)]
    links = [Link("a", "b", 10.0, 1.0), Link("b", "c", 5.0, 0.5)]
    return Topology.from_links("t", devices, links)


def _graph() -> OpGraph:
    nodes = [Node("x", "op", 4.0, 8.0, param_bytes=10.0, act_bytes=3.0, mem_fwd_bytes=7.0, mem_bwd_bytes=2.0,
                  times={"A100": KindTimes(1.0, 1.5)}),
             Node("y", "op", 2.0, 2.0, param_bytes=6.0, act_bytes=5.0, mem_fwd_bytes=1.0, mem_bwd_bytes=9.0),
             Node("z", "op", 6.0, 3.0, act_bytes=1.0)]
    edges = [Edge("x", "y", 20.0), Edge("x", "z", 30.0), Edge("y", "z", 4.0)]
    return OpGraph.build("g", nodes, edges)


def test_compute_scales_by_speed_and_uses_overrides() -> None:
    cm = ComputeModel(_graph(), _topology())
    assert cm.fwd_s(0).tolist() == [4.0, 2.0, 6.0]
    assert cm.bwd_s(1).tolist() == [4.0, 1.0, 1.5]
    assert cm.fwd_s(2).tolist() == [1.0, 2.0, 6.0]  # x overridden on the A100, others unscaled (speed 1)
    # group of a (speed 1) and b (speed 2): slowest replica / 2
    assert cm.group_fwd_s([0, 1]).tolist() == [2.0, 1.0, 3.0]
    fastest_f, fastest_b = cm.fastest_fwd_bwd_s()
    assert fastest_f.tolist() == [1.0, 1.0, 3.0] and fastest_b.tolist() == [1.5, 1.0, 1.5]


def test_transfer_uses_widest_path_and_postal_model() -> None:
    topo = _topology()
    assert transfer_s(topo, 0, 1, 20.0) == pytest.approx(1.0 + 2.0)
    assert transfer_s(topo, 0, 2, 20.0) == pytest.approx(1.5 + 4.0)  # a -> b -> c: bottleneck 5, latency 1.5
    assert transfer_s(topo, 0, 0, 20.0) == 0.0 and transfer_s(topo, 0, 1, 0.0) == 0.0


def test_transfer_pairs() -> None:
    assert transfer_pairs([0, 1], [2, 3], 8.0) == [(0, 2, 4.0), (1, 3, 4.0)]
    assert transfer_pairs([0], [2, 3], 8.0) == [(0, 2, 4.0), (0, 3, 4.0)]
    assert transfer_pairs([0, 1], [1], 8.0) == [(0, 1, 4.0)]  # the same-device pair is dropped
    assert group_transfer_s(_topology(), [0], [1, 2], 20.0) == pytest.approx(max(1.0 + 1.0, 1.5 + 2.0))


def test_allreduce_eq9() -> None:
    topo = _topology()
    # ring a -> b -> c -> a: hops a->b (10, 1), b->c (5, 0.5), c->a (5, 1.5)
    assert allreduce_s(topo, [0, 1, 2], 30.0) == pytest.approx(2 * 2 / 3 * 30.0 / 5.0 + 2 * 2 * 1.5)
    assert allreduce_s(topo, [1], 30.0) == 0.0 and allreduce_s(topo, [0, 1], 0.0) == 0.0


def test_gradient_allreduce_pays_the_ring_latency_once_per_bucket() -> None:
    topo = _topology()
    b = GRADIENT_BUCKET_BYTES
    assert [gradient_buckets(x) for x in (1.0, b, b + 1, 3.5 * b)] == [1, 1, 2, 4]
    # up to one bucket: the one all-reduce of Eq. 9
    assert gradient_allreduce_s(topo, [0, 1, 2], 30.0) == allreduce_s(topo, [0, 1, 2], 30.0)
    # four buckets: the same bytes, three more ring latencies 2 max lat
    four = gradient_allreduce_s(topo, [0, 1, 2], 3.5 * b)
    assert four == pytest.approx(allreduce_s(topo, [0, 1, 2], 3.5 * b) + 3 * 2 * 2 * 1.5)
    assert gradient_allreduce_s(topo, [1], 3.5 * b) == 0.0


def test_traffic_sends_a_tensor_once_per_group_at_its_largest_size() -> None:
    g = _graph()
    group = np.array([0, 1, 1])  # x alone; y, z together
    assert group_traffic_bytes(g, group) == {(0, 1): 30.0}
    assert group_input_bytes(g, group).tolist() == [0.0, 30.0]
    split = np.array([0, 1, 2])
    assert group_traffic_bytes(g, split) == {(0, 1): 20.0, (0, 2): 30.0, (1, 2): 4.0}
    assert group_traffic_bytes(g, np.zeros(3, dtype=np.int64)) == {}


def test_stage_memory_with_and_without_recompute() -> None:
    problem = Problem(_graph(), _topology(), "throughput", ProblemSettings(optimizer_bytes_per_param_byte=3.0))
    ops = np.array([0, 1])
    # params 16 * 4 = 64; 2 in flight * (activations 8 + received inputs 5) = 26; working max 9; / R = 2
    assert stage_memory_bytes(problem, ops, 2, 2, 5.0) == pytest.approx(64 + (26 + 9) / 2)
    assert stage_memory_bytes(problem, ops, 2, 2, 5.0, recompute=True) == pytest.approx(64 + (10 + 9) / 2)
    assert in_flight_micro_batches("gpipe", 4, 1, 8) == 8
    assert in_flight_micro_batches("1f1b", 4, 1, 8) == 3
    assert in_flight_micro_batches("1f1b", 4, 0, 2) == 2


def test_device_memory_and_capacity() -> None:
    forward = Problem(_graph(), _topology(), "latency")
    training = Problem(_graph(), _topology(), "latency", ProblemSettings(pass_="training"))
    ops = np.array([0, 2])
    assert device_memory_bytes(forward, ops) == pytest.approx(10 + 4 + 7)
    assert device_memory_bytes(training, ops) == pytest.approx(40 + 4 + 7)
    capped = Problem(_graph(), _topology(), "throughput",
                     ProblemSettings(memory_headroom=0.25, stage_memory_caps_bytes={1: 50.0}))
    assert capacity_bytes(capped, 0) == 75.0
    assert capacity_bytes(capped, 0, stage=1) == 50.0


def test_capacity_leaves_the_process_base_out() -> None:
    devices = [Device("a", "V100", "h0", 100.0, base_memory_bytes=20.0)]
    topo = Topology.from_links("t", devices, [])
    problem = Problem(_graph(), topo, "throughput", ProblemSettings(memory_headroom=0.25))
    assert capacity_bytes(problem, 0) == pytest.approx((100.0 - 20.0) * 0.75)
