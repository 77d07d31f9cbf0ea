"""Warnings about a graph's times on a topology, and the advice after a measured run."""

from __future__ import annotations

from dataclasses import replace

from solvers.advice import (
    ROOFLINE_TIMES,
    TIMES_FROM_ABSENT_KIND,
    next_steps,
    problem_warnings,
)
from solvers.generate import generate_graph, generate_topology
from solvers.model.graph import KindTimes, OpGraph

TOPOLOGY = generate_topology("hierarchical", nodes=1, gpus_per_node=2)  # kind H100


def graph_with(attrs: dict[str, object], times_kind: str | None = None) -> OpGraph:
    g = generate_graph("random_dag", n_ops=6, seed=2)
    nodes = g.nodes
    if times_kind is not None:
        nodes = [replace(n, times={times_kind: KindTimes(n.fwd_s, n.bwd_s)}) for n in g.nodes]
    return OpGraph.build(g.name, nodes, g.edges, g.profiled_batch_size, attrs)


def codes(graph: OpGraph) -> list[str]:
    return [w.code for w in problem_warnings(graph, TOPOLOGY)]


def test_times_from_a_kind_the_topology_lacks() -> None:
    profiled_on_cpu = {"profile": {"device_kind": "cpu"}, "estimate": {"device_kind": "cpu", "rule": "roofline"}}
    assert codes(graph_with(profiled_on_cpu, "cpu")) == [TIMES_FROM_ABSENT_KIND]
    message = problem_warnings(graph_with(profiled_on_cpu, "cpu"), TOPOLOGY)[0].message
    assert "'cpu'" in message and "H100" in message and "placer profile --device cuda on a H100" in message
    assert codes(graph_with({"profile": {"device_kind": "H100"}}, "H100")) == []  # profiled on the target
    assert codes(graph_with({"profile": {"device_kind": "cpu"}}, "H100")) == []  # has times for the target kind


def test_times_for_a_gpu_on_a_cpu_topology_advise_profiling_on_the_cpu() -> None:
    estimated_for_h100 = {"estimate": {"device_kind": "H100", "rule": "roofline"}}
    cpus = replace(TOPOLOGY, devices=tuple(replace(d, kind="cpu") for d in TOPOLOGY.devices))  # as measured
    message = problem_warnings(graph_with(estimated_for_h100), cpus)[0].message
    assert "placer profile --device cpu)" in message and "cuda" not in message


def test_roofline_estimates() -> None:
    assert codes(graph_with({"estimate": {"device_kind": "H100", "rule": "roofline"}})) == [ROOFLINE_TIMES]
    assert codes(graph_with({"estimate": {"device_kind": "TitanV", "rule": "roofline"}})) == [TIMES_FROM_ABSENT_KIND,
                                                                                             ROOFLINE_TIMES]


def test_a_graph_that_says_nothing_of_its_times_gets_no_warning() -> None:
    assert codes(generate_graph("transformer", layers=2)) == []


def test_next_steps_profile_calibrate_replan_or_nothing() -> None:
    roofline = problem_warnings(graph_with({"estimate": {"device_kind": "TitanV", "rule": "roofline"}}), TOPOLOGY)
    assert next_steps(65.0, [200.0, 180.0], roofline)[0].startswith("profile:")
    assert next_steps(1.1, [0.95, 1.15])[0].startswith("none:")
    assert next_steps(3.5, [3.4, 3.6])[0].startswith("calibrate:") and "3.5x" in next_steps(3.5, [3.4, 3.6])[0]
    assert next_steps(2.0, [1.0, 4.0])[0].startswith("re-plan:")
