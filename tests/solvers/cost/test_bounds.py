"""Lower bounds: exact values on small cases, and never above a simulated objective."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from solvers.cost.bounds import critical_path_bound_s, fastest_group_s, lower_bound_s
from solvers.cost.compute import ComputeModel
from solvers.model.graph import Edge, KindTimes, Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.simulator import simulate
from tests.strategies import examples, latency_cases, throughput_cases


def _topology(speeds: list[float], kinds: list[str] | None = None) -> Topology:
    devices = [Device(f"d{i}", kinds[i] if kinds else "GPU", "h0", 1e15, s) for i, s in enumerate(speeds)]
    links = [Link(f"d{i}", f"d{i + 1}", 1e9) for i in range(len(speeds) - 1)]
    return Topology.from_links("t", devices, links)


def _diamond() -> OpGraph:
    nodes = [Node("a", "x", 1.0, 2.0), Node("b", "x", 4.0, 1.0), Node("c", "x", 1.0, 1.0), Node("d", "x", 2.0, 2.0)]
    edges = [Edge("a", "b"), Edge("a", "c"), Edge("b", "d"), Edge("c", "d")]
    return OpGraph.build("diamond", nodes, edges)


def test_throughput_work_bound_uses_total_speed() -> None:
    problem = Problem(_diamond(), _topology([1.0, 2.0, 1.0]), "throughput", ProblemSettings(micro_batches=(3,)))
    total = 3.0 + 5.0 + 2.0 + 4.0
    assert lower_bound_s(problem) == pytest.approx(3 * total / 4.0)
    assert lower_bound_s(problem, 5) == pytest.approx(5 * total / 4.0)
    assert lower_bound_s(problem, 5, recompute=True) == pytest.approx(5 * (total + 8.0) / 4.0)


def test_overrides_use_fastest_device_per_op() -> None:
    nodes = [Node("a", "x", 2.0, 2.0, times={"fast": KindTimes(0.5, 0.5)}), Node("b", "x", 1.0, 1.0)]
    graph = OpGraph.build("g", nodes, [Edge("a", "b")])
    problem = Problem(graph, _topology([1.0, 1.0], ["slow", "fast"]), "throughput", ProblemSettings(micro_batches=(2,)))
    # op a: fastest 1.0 (override on "fast"); op b: 2.0 everywhere; D = 2
    assert lower_bound_s(problem) == pytest.approx(2 * (1.0 + 2.0) / 2)


def test_latency_bound_is_critical_path_or_work() -> None:
    graph = _diamond()
    one = Problem(graph, _topology([1.0]), "latency")
    assert lower_bound_s(one) == pytest.approx(8.0)  # work on one device = 1 + 4 + 1 + 2
    two = Problem(graph, _topology([1.0, 1.0]), "latency", ProblemSettings(pass_="training"))
    # work: 14 / 2 = 7; critical path a-b-d, each op's fwd + bwd on one device: 3 + 5 + 4 = 12
    assert lower_bound_s(two) == pytest.approx(12.0)
    compute = ComputeModel(graph, two.topology)
    assert critical_path_bound_s(two, compute, True, False) == pytest.approx(12.0)
    plan = Plan((Stage(tuple(graph.ids), ("d0",)),))
    assert simulate(two, plan).metrics["latency_s"] == pytest.approx(14.0)  # one device: the work, 14
    # throughput plans may replicate: there the path's ops are halved by 2 replicas, (3 + 5 + 4) / 2 = 6
    pipelined = Problem(graph, two.topology, "throughput", ProblemSettings(micro_batches=(1,)))
    assert critical_path_bound_s(pipelined, compute, True, False) == pytest.approx(6.0)


def test_latency_critical_path_takes_each_op_on_its_fastest_device() -> None:
    graph = OpGraph.build("one", [Node("a", "x", 6.0)], [])
    problem = Problem(graph, _topology([3.0, 1.0, 1.0]), "latency")
    # work: 6 / 5; a on the speed-3 device alone: 2.0 (three replicas would also give 2.0, two 3.0)
    assert lower_bound_s(problem) == pytest.approx(2.0)
    uniform = Problem(graph, _topology([1.0, 1.0, 1.0]), "latency")
    assert lower_bound_s(uniform) == pytest.approx(6.0)  # no group of replicas to split it three ways
    plan = Plan((Stage(("a",), ("d1",)),))
    assert simulate(uniform, plan).metrics["efficiency"] == pytest.approx(1.0)


def test_fastest_group_time_mixes_speeds() -> None:
    graph = OpGraph.build("one", [Node("a", "x", 6.0)], [])
    problem = Problem(graph, _topology([3.0, 1.0, 1.0]), "latency")
    compute = ComputeModel(graph, problem.topology)
    # alone on the speed-3 device: 2.0; with 3 replicas: max(2, 6, 6) / 3 = 2.0; with 2: 6/2 = 3
    assert fastest_group_s(problem, compute, False, False).tolist() == pytest.approx([2.0])
    uniform = Problem(graph, _topology([1.0, 1.0, 1.0]), "latency")
    assert fastest_group_s(uniform, ComputeModel(graph, uniform.topology), False, False).tolist() == [2.0]


def test_bound_is_tight_for_one_stage_per_device_without_communication() -> None:
    graph = OpGraph.build("pair", [Node("a", "x", 1.0, 1.0), Node("b", "x", 1.0, 1.0)], [])
    problem = Problem(graph, _topology([1.0, 1.0]), "throughput", ProblemSettings(micro_batches=(4,)))
    plan = Plan((Stage(("a",), ("d0",)), Stage(("b",), ("d1",))), micro_batches=4)
    m = simulate(problem, plan).metrics
    assert m["lower_bound_s"] == pytest.approx(m["iteration_s"]) and m["efficiency"] == pytest.approx(1.0)


@settings(max_examples=examples(120), deadline=None)
@given(throughput_cases())
def test_bound_below_simulated_throughput(case: tuple[Problem, Plan]) -> None:
    problem, plan = case
    m = simulate(problem, plan).metrics
    assert m["lower_bound_s"] <= m["objective_s"] * (1 + 1e-9) + 1e-12
    assert 0.0 <= m["efficiency"] <= 1.0 + 1e-9


@settings(max_examples=examples(120), deadline=None)
@given(latency_cases())
def test_bound_below_simulated_latency(case: tuple[Problem, Plan]) -> None:
    problem, plan = case
    m = simulate(problem, plan).metrics
    assert m["lower_bound_s"] <= m["objective_s"] * (1 + 1e-9) + 1e-12


def test_critical_path_counts_for_throughput_with_mixed_speeds() -> None:
    graph = OpGraph.build("chain", [Node(f"op{i}", "x", 1.0, 2.0) for i in range(3)],
                          [Edge("op0", "op1"), Edge("op1", "op2")])
    problem = Problem(graph, _topology([3.0, 1.0, 1.0]), "throughput", ProblemSettings(micro_batches=(1,)))
    # work: 9 / 5; critical path: fastest group for w = 3 is the speed-3 device alone (or all three): 1.0 each
    assert lower_bound_s(problem) == pytest.approx(3.0)
    plan = Plan((Stage(tuple(graph.ids), ("d0",)),), micro_batches=1)
    assert simulate(problem, plan).metrics["iteration_s"] == pytest.approx(3.0)


def test_a_calibrated_step_overhead_is_in_the_bound() -> None:
    """Every training iteration on a calibrated topology ends with the step overhead (the optimizer
    step, zeroing gradients, the barrier: at least ``step_fixed_s``), so the bound holds it too;
    without it a tiny GPT-2 calibrated on two CPUs reported an efficiency of 27 %."""
    plain = _topology([1.0, 1.0])
    calibrated = Topology.from_links("t", plain.devices, plain.links or (), {"calibration": {"step_fixed_s": 5.0}})
    graph = _diamond()
    settings = ProblemSettings(micro_batches=(2,))
    before = lower_bound_s(Problem(graph, plain, settings=settings))
    problem = Problem(graph, calibrated, settings=settings)
    assert lower_bound_s(problem) == pytest.approx(before + 5.0)
    plan = Plan((Stage(("a", "b"), ("d0",)), Stage(("c", "d"), ("d1",))), micro_batches=2)
    metrics = simulate(problem, plan).metrics
    assert metrics["lower_bound_s"] <= metrics["objective_s"] * (1 + 1e-9)
    forward = Problem(graph, calibrated, objective="latency", settings=ProblemSettings(pass_="forward"))
    assert lower_bound_s(forward) == lower_bound_s(Problem(graph, plain, objective="latency",
                                                           settings=ProblemSettings(pass_="forward")))
