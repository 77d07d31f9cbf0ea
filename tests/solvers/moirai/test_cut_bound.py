"""The longest path with the transfers memory forces onto it (solvers/moirai/cut_bound.py) is a lower
bound: never above the brute-force optimum over every placement and order, scored by the simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings

from solvers.generate import generate_graph, generate_topology
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Topology
from solvers.moirai.bounds import least_durations_s, task_bounds
from solvers.moirai.cut_bound import cut_bound_s, least_cuts_s, least_transfer_s, longest_path
from solvers.moirai.gcof import identity_grouping
from solvers.moirai.instance import build_instance
from tests.solvers.moirai.brute import brute_force_latency_s
from tests.solvers.moirai.test_exact import INSTANCES, _case
from tests.strategies import examples, memory_bound_latency_problems

GIB = 2.0**30


def _chain(n_ops: int, memory_gib: float, edge_bytes: list[float], n_dev: int = 2, per_node: int = 1) -> Problem:
    """``n_ops`` ops of 1 ms (2 ms backward) and 1 GiB of parameters in a chain on ``n_dev`` equal devices,
    ``per_node`` to a node; channels of 1 ms and 1 GB/s inside a node, 0.1 GB/s between nodes (1 GB/s
    with one device per node)."""
    nodes = [Node(f"v{i}", "aten.mm", 1e-3, bwd_s=2e-3, param_bytes=GIB) for i in range(n_ops)]
    edges = [Edge(f"v{i}", f"v{i + 1}", b) for i, b in enumerate(edge_bytes)]
    devices = [Device(f"d{k}", "K", f"h{k // per_node}", memory_gib * GIB) for k in range(n_dev)]
    slow = 1e9 if per_node == 1 else 1e8
    bandwidth = [[1e9 if a // per_node == b // per_node else slow for b in range(n_dev)] for a in range(n_dev)]
    topology = Topology.from_matrices("pair", devices, bandwidth, [[1e-3] * n_dev for _ in range(n_dev)])
    return Problem(OpGraph.build("chain", nodes, edges), topology, "latency", ProblemSettings())


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=memory_bound_latency_problems())
def test_cut_bound_is_at_most_the_brute_force_optimum(problem: Problem) -> None:
    best_s = brute_force_latency_s(problem)
    assume(math.isfinite(best_s))  # some placement fits
    inst = build_instance(problem, identity_grouping(problem.graph))
    assert cut_bound_s(inst) <= best_s * (1 + 1e-9)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=memory_bound_latency_problems(max_ops=5, min_devices=4, max_devices=4, node_size=2,
                                             edge_sizes=(1e6, 4e6, 3e7), memory_shares=(0.4, 0.45)))
def test_cut_bound_is_at_most_the_optimum_across_two_nodes(problem: Problem) -> None:
    """Four devices two to a node, each of 40–45 % of the graph's need: the count of nodes at work."""
    best_s = brute_force_latency_s(problem)
    assume(math.isfinite(best_s))
    inst = build_instance(problem, identity_grouping(problem.graph))
    assert cut_bound_s(inst) <= best_s * (1 + 1e-9)


@pytest.mark.parametrize("case", range(len(INSTANCES)))
def test_cut_bound_is_below_the_optima_of_the_exact_instances(case: int) -> None:
    problem, best_s = _case(case)
    inst = build_instance(problem, identity_grouping(problem.graph))
    assert cut_bound_s(inst) <= best_s * (1 + 1e-9)


def test_memory_forces_the_cheapest_cut_and_the_bound_is_the_optimum() -> None:
    """Four 1 GiB ops on two devices of 2.5 GiB: one cut, after v0 or v2 (then three ops on one
    device) is refused, so after v1; its message of 2 MB takes 1 ms + 2 ms.  The optimum is 4 ms
    of work plus that transfer, and the bound finds it; the edge of 1 MB elsewhere cannot be used."""
    problem = _chain(4, 2.5, [1e6, 2e6, 1e6])
    inst = build_instance(problem, identity_grouping(problem.graph))
    best_s = brute_force_latency_s(problem)
    assert best_s == pytest.approx(4e-3 + 3e-3, rel=1e-12)
    assert cut_bound_s(inst) == pytest.approx(best_s, rel=1e-8)
    assert task_bounds(inst) is not None and task_bounds(inst).bound_s < 0.6 * best_s  # type: ignore[union-attr]


def test_without_memory_pressure_the_bound_is_the_longest_path() -> None:
    problem = _chain(4, 8.0, [1e6, 2e6, 1e6])
    inst = build_instance(problem, identity_grouping(problem.graph))
    assert cut_bound_s(inst) == pytest.approx(4e-3, rel=1e-8)


def test_a_path_needing_two_nodes_pays_one_slow_transfer() -> None:
    """Six 1 GiB ops, four 2.5 GiB devices two to a node: the chain needs three devices (two cuts of
    1 ms + 1 MB / 1 GB/s) on two nodes, so one cut crosses them (1 ms + 1 MB / 0.1 GB/s): 6 + 2 + 11 ms,
    the brute-force optimum.  Cuts alone at the quickest channel give 6 + 2 + 2 ms."""
    problem = _chain(6, 2.5, [1e6] * 5, n_dev=4, per_node=2)
    inst = build_instance(problem, identity_grouping(problem.graph))
    best_s = brute_force_latency_s(problem)
    assert best_s == pytest.approx(19e-3, rel=1e-12)
    assert cut_bound_s(inst) == pytest.approx(best_s, rel=1e-8)
    path = longest_path(inst, least_durations_s(inst))
    units = [inst.task_unit[t] for t in path]
    assert least_cuts_s(units, least_transfer_s(inst, np.full(5, 1e6)).tolist(), inst) == pytest.approx(4e-3)


def test_least_cuts_takes_the_cheapest_edge_inside_each_window() -> None:
    """Six 1 GiB units, 2.5 GiB devices: runs of at most two units, so one cut in every two consecutive
    edges: the cheapest such set of costs 5, 1, 5, 1, 5 is the two 1s; of 1, 9, 9, 1, 9 the second and
    fourth edges (9 + 1), not the two 1s (they leave a run of three units)."""
    problem = _chain(6, 2.5, [0.0] * 5, n_dev=3)
    inst = build_instance(problem, identity_grouping(problem.graph))
    assert least_cuts_s(list(range(6)), [5.0, 1.0, 5.0, 1.0, 5.0], inst) == pytest.approx(2.0)
    assert least_cuts_s(list(range(6)), [1.0, 9.0, 9.0, 1.0, 9.0], inst) == pytest.approx(10.0)


def test_a_unit_met_twice_on_the_path_is_held_once() -> None:
    """A training path meets each unit forward and backward: the run ``F(v1) B(v1)`` holds v1 once."""
    problem = _chain(2, 1.5, [1e6])
    training = Problem(problem.graph, problem.topology, "latency", ProblemSettings(pass_="training",
                                                                                  optimizer_bytes_per_param_byte=0.0))
    inst = build_instance(training, identity_grouping(training.graph))
    path = longest_path(inst, least_durations_s(inst))
    assert [inst.task_unit[t] for t in path] == [0, 1, 1, 0]
    # one cut forward and one backward, each 1 ms + 1 MB / 1 GB/s
    assert cut_bound_s(inst) == pytest.approx(float(least_durations_s(inst).sum()) + 2 * 2e-3, rel=1e-8)


def test_least_transfer_is_the_quickest_channel_per_size() -> None:
    """A low-latency narrow channel wins for small messages, a wide one for large; 0 bytes cost 0."""
    devices = [Device(f"d{k}", "K", f"h{k}", GIB) for k in range(3)]
    bandwidth = [[1e12, 1e8, 1e10], [1e8, 1e12, 1e8], [1e10, 1e8, 1e12]]
    latency = [[0.0, 1e-6, 1e-3], [1e-6, 0.0, 1e-6], [1e-3, 1e-6, 0.0]]
    topology = Topology.from_matrices("mixed", devices, bandwidth, latency)
    graph = OpGraph.build("one", [Node("v", "aten.mm", 1e-3)], [])
    inst = build_instance(Problem(graph, topology, "latency"), identity_grouping(graph))
    sizes = np.array([0.0, 1e3, 1e8])
    assert least_transfer_s(inst, sizes).tolist() == pytest.approx([0.0, 1e-6 + 1e3 / 1e8, 1e-3 + 1e8 / 1e10])


def test_transformer_too_large_for_one_device_gets_its_cuts() -> None:
    """415 layers (4,987 ops) need 95 GB of the 4 x 8 topology's 80 GiB devices: the path must be cut
    once, 0.58 ms on the quickest channel (docs/benchmarks.md, "auto's gap stop")."""
    topology = generate_topology("hierarchical", nodes=4, gpus_per_node=8)
    problem = Problem(generate_graph("transformer", layers=415), topology, "latency")
    inst = build_instance(problem, identity_grouping(problem.graph))
    path_s = float(least_durations_s(inst)[longest_path(inst, least_durations_s(inst))].sum())
    assert cut_bound_s(inst) == pytest.approx(path_s + 5.7695e-4, rel=1e-6)
