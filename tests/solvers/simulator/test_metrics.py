"""The metrics dictionary: keys, units, memory from the cost model, engine selection."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings

from solvers.cost.memory import device_memory_bytes, stage_memory_bytes
from solvers.model.errors import InvalidPlan
from solvers.model.graph import Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Topology
from solvers.simulator import SimulationResult, TimelineEntry, simulate
from solvers.validity import resolve_plan
from tests.solvers.simulator.cases import chain_graph, line_topology
from tests.strategies import examples, latency_cases, throughput_cases

KEYS = {"engine", "objective_s", "iteration_s", "throughput_samples_per_s", "samples_per_iteration",
        "time_per_sample_s", "latency_s", "stage_times_s",
        "bottleneck_stage_s", "bubble_fraction", "peak_memory_bytes", "busy_s", "bytes_per_channel",
        "lower_bound_s", "efficiency", "micro_batches", "schedule", "virtual_stages", "calibration"}


def _throughput() -> tuple[Problem, Plan]:
    nodes = [Node(f"op{i}", "x", 1.0, 2.0, param_bytes=1e6, act_bytes=2e6, mem_fwd_bytes=3e5) for i in range(4)]
    graph = OpGraph.build("g", nodes, [], profiled_batch_size=8)
    problem = Problem(graph, line_topology(3), "throughput", ProblemSettings(micro_batches=(4,)))
    plan = Plan((Stage(("op0", "op1"), ("d0",)), Stage(("op2", "op3"), ("d1", "d2"))), micro_batches=4)
    return problem, plan


def _latency_plan() -> Plan:
    """The ops of :func:`_throughput` op by op: two on d0, two on d1."""
    return Plan((Stage(("op0", "op1"), ("d0",)), Stage(("op2", "op3"), ("d1",))))


def test_keys_units_and_json() -> None:
    problem, plan = _throughput()
    result = simulate(problem, plan)
    assert isinstance(result, SimulationResult) and result.timeline is None
    m = result.metrics
    assert set(m) == KEYS
    json.dumps(m, allow_nan=False)
    assert m["objective_s"] == m["iteration_s"]
    assert m["throughput_samples_per_s"] == pytest.approx(4 * 8 / m["iteration_s"])
    assert m["samples_per_iteration"] == 4 * 8 and m["time_per_sample_s"] == pytest.approx(m["iteration_s"] / 32)
    assert m["bottleneck_stage_s"] == max(m["stage_times_s"])
    assert m["stage_times_s"] == pytest.approx([6.0, 3.0])
    assert m["busy_s"] == pytest.approx({"d0": 24.0, "d1": 12.0, "d2": 12.0})
    assert m["bubble_fraction"] == pytest.approx(1 - 48.0 / (3 * m["iteration_s"]))
    assert m["efficiency"] == pytest.approx(m["lower_bound_s"] / m["objective_s"])
    assert m["micro_batches"] == 4 and m["schedule"] == "1f1b"


def test_peak_memory_comes_from_the_cost_model() -> None:
    problem, plan = _throughput()
    rp = resolve_plan(problem, plan)
    m = simulate(problem, rp).metrics
    s0 = stage_memory_bytes(problem, rp.stage_ops[0], 1, 2, 0.0)
    s1 = stage_memory_bytes(problem, rp.stage_ops[1], 2, 1, 0.0)
    assert m["peak_memory_bytes"] == {"d0": s0, "d1": s1, "d2": s1}
    latency = Problem(problem.graph, problem.topology, "latency")
    lm = simulate(latency, _latency_plan()).metrics
    assert lm["peak_memory_bytes"]["d1"] == device_memory_bytes(latency, rp.stage_ops[1])


def test_plan_over_memory_is_rejected() -> None:
    graph = chain_graph(2, param_bytes=1e16)
    problem = Problem(graph, line_topology(1), "throughput")
    with pytest.raises(InvalidPlan, match="GiB"):
        simulate(problem, Plan((Stage(tuple(graph.ids), ("d0",)),)))


def test_engine_selection() -> None:
    problem, plan = _throughput()
    assert simulate(problem, plan).metrics["engine"] == "stage"
    assert simulate(problem, plan, engine="op").metrics["engine"] == "op"
    latency = Problem(problem.graph, problem.topology, "latency")
    assert simulate(latency, _latency_plan()).metrics["engine"] == "op"
    with pytest.raises(InvalidPlan, match="engine 'stage'"):
        simulate(latency, _latency_plan(), engine="stage")
    with pytest.raises(InvalidPlan, match="engine: must be one of"):
        simulate(problem, plan, engine="fast")  # type: ignore[arg-type]


def test_timeline_entries() -> None:
    problem, plan = _throughput()
    timeline = simulate(problem, plan, timeline=True).timeline
    assert timeline is not None and all(isinstance(e, TimelineEntry) for e in timeline)
    assert {e.resource for e in timeline} == {"d0", "d1", "d2"}
    on_d1 = [e.task for e in timeline if e.resource == "d1"]
    assert len(on_d1) == 9 and on_d1[-1] == "allreduce"  # 4 forwards, 4 backwards, the all-reduce
    assert all(e.end_s >= e.start_s for e in timeline)
    first = timeline[0]
    assert first.to_dict() == {"resource": first.resource, "task": first.task, "start_s": first.start_s,
                               "end_s": first.end_s, "kind": "F", "stage": 0, "chunk": 0, "rank": 0, "micro_batch": 0}
    assert [(e.kind, e.stage, e.chunk, e.rank, e.micro_batch) for e in timeline if e.resource == "d1"][-1] == (
        "allreduce", None, None, 1, None)


def test_latency_plan_objective_is_latency() -> None:
    problem, plan = _throughput()
    latency = Problem(problem.graph, problem.topology, "latency", ProblemSettings(pass_="training"))
    m = simulate(latency, _latency_plan()).metrics
    assert m["objective_s"] == m["latency_s"] == m["iteration_s"]
    assert m["objective_s"] == pytest.approx(2 * (1.0 + 2.0))  # two independent ops per device, no all-reduce
    assert m["bytes_per_channel"] == {}
    with pytest.raises(InvalidPlan, match=r"stages\[1\].devices: a latency plan places each op on one device"):
        simulate(latency, plan.with_(micro_batches=1))  # stage 1 on two replicas: a throughput construct


@settings(max_examples=examples(40), deadline=None)
@given(throughput_cases())
def test_simulation_is_deterministic_and_json(case: tuple[Problem, Plan]) -> None:
    problem, plan = case
    first = simulate(problem, plan, timeline=True)
    again = simulate(problem, plan, timeline=True)
    assert first == again
    assert set(first.metrics) == KEYS
    json.dumps(first.metrics, allow_nan=False)


@settings(max_examples=examples(60), deadline=None)
@given(latency_cases())
def test_latency_metrics_sane(case: tuple[Problem, Plan]) -> None:
    problem, plan = case
    m = simulate(problem, plan).metrics
    assert set(m) == KEYS
    busy = max(m["busy_s"].values())
    assert m["latency_s"] >= busy * (1 - 1e-12)
    assert 0.0 <= m["bubble_fraction"] <= 1.0
    assert simulate(problem, plan).metrics == m


def _with_base(topology: Topology, base_bytes: float, memory_bytes: float | None = None) -> Topology:
    devices = [replace(d, base_memory_bytes=base_bytes, memory_bytes=memory_bytes or d.memory_bytes)
               for d in topology.devices]
    return Topology.from_links(topology.name, devices, list(topology.links or ()))


def test_base_memory_is_added_to_every_used_device_peak() -> None:
    problem, plan = _throughput()
    bare = simulate(problem, plan).metrics["peak_memory_bytes"]
    based = Problem(problem.graph, _with_base(problem.topology, 3e8), "throughput", problem.settings)
    got = simulate(based, plan).metrics["peak_memory_bytes"]
    assert got == pytest.approx({d: v + 3e8 for d, v in bare.items()})


def test_a_plan_that_fits_only_without_the_base_is_refused() -> None:
    problem, plan = _throughput()
    need = max(simulate(problem, plan).metrics["peak_memory_bytes"].values())
    roomy = Problem(problem.graph, _with_base(problem.topology, 0.0, need * 1.5), "throughput", problem.settings)
    simulate(roomy, plan)  # fits with half its need to spare
    tight = Problem(problem.graph, _with_base(problem.topology, need, need * 1.5), "throughput", problem.settings)
    with pytest.raises(InvalidPlan, match=r"stages\[0\].*'d0'"):
        simulate(tight, plan)
