"""Closed-form iteration and latency times the simulator must reproduce exactly."""

from __future__ import annotations

import pytest

from solvers.cost.comm import allreduce_s
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage, plan_from_document
from solvers.model.problem import Problem, ProblemSettings
from solvers.simulator import simulate
from tests.solvers.simulator.cases import chain_graph, line_topology

ENGINES = ["stage", "op"]


def _pipeline_plan(n_stages: int, micro_batches: int, schedule: str) -> Plan:
    stages = tuple(Stage((f"op{s}",), (f"d{s}",)) for s in range(n_stages))
    return Plan(stages, micro_batches=micro_batches, schedule=schedule)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("n_stages", "micro_batches"), [(1, 1), (1, 5), (3, 1), (4, 8), (6, 3), (5, 5)])
def test_equal_stages_no_communication(engine: str, schedule: str, n_stages: int, micro_batches: int) -> None:
    t_f, t_b = 1.25, 2.5
    problem = Problem(chain_graph(n_stages, t_f, t_b), line_topology(n_stages), "throughput",
                      ProblemSettings(micro_batches=(micro_batches,), schedule=schedule))  # type: ignore[arg-type]
    m = simulate(problem, _pipeline_plan(n_stages, micro_batches, schedule), engine=engine).metrics  # type: ignore[arg-type]
    assert m["iteration_s"] == pytest.approx((micro_batches + n_stages - 1) * (t_f + t_b), rel=1e-12)
    assert m["latency_s"] == pytest.approx(n_stages * (t_f + t_b), rel=1e-12)
    busy = micro_batches * (t_f + t_b)
    assert m["bubble_fraction"] == pytest.approx(1 - busy / m["iteration_s"], rel=1e-12)
    assert m["stage_times_s"] == pytest.approx([t_f + t_b] * n_stages)


@pytest.mark.parametrize("engine", ENGINES)
def test_single_device_runs_everything_in_sequence(engine: str) -> None:
    graph = chain_graph(5, 0.5, 1.0)
    problem = Problem(graph, line_topology(2), "throughput", ProblemSettings(micro_batches=(3,)))
    plan = Plan((Stage(tuple(graph.ids), ("d1",)),), micro_batches=3)
    m = simulate(problem, plan, engine=engine).metrics  # type: ignore[arg-type]
    assert m["iteration_s"] == pytest.approx(3 * 5 * 1.5)
    assert m["busy_s"] == {"d1": pytest.approx(3 * 5 * 1.5)}
    assert m["bubble_fraction"] == pytest.approx(0.0, abs=1e-12)


def test_single_device_latency_forward_and_training() -> None:
    graph = chain_graph(4, 0.5, 1.0)
    plan = Plan((Stage(tuple(graph.ids), ("d0",)),))
    fwd = simulate(Problem(graph, line_topology(1), "latency"), plan).metrics
    train = simulate(Problem(graph, line_topology(1), "latency", ProblemSettings(pass_="training")), plan).metrics
    assert fwd["latency_s"] == pytest.approx(2.0)
    assert fwd["objective_s"] == fwd["latency_s"] == fwd["iteration_s"]
    assert train["latency_s"] == pytest.approx(6.0)


@pytest.mark.parametrize("pass_", ["forward", "training"])
def test_two_device_chain_known_transfer(pass_: str) -> None:
    bw, lat, size = 1e9, 1e-3, 5e8  # transfer = 1e-3 + 0.5 s
    graph = chain_graph(2, 1.0, 2.0, edge_bytes=size)
    problem = Problem(graph, line_topology(2, bw, lat), "latency", ProblemSettings(pass_=pass_))  # type: ignore[arg-type]
    plan = Plan((Stage(("op0",), ("d0",)), Stage(("op1",), ("d1",))))
    m = simulate(problem, plan, timeline=True).metrics
    transfer = lat + size / bw
    expected = 1.0 + transfer + 1.0 + ((2.0 + transfer + 2.0) if pass_ == "training" else 0.0)
    assert m["latency_s"] == pytest.approx(expected, rel=1e-12)
    assert m["bytes_per_channel"]["d0->d1"] == size
    if pass_ == "training":
        assert m["bytes_per_channel"]["d1->d0"] == size


@pytest.mark.parametrize("engine", ENGINES)
def test_two_stage_pipeline_with_transfer(engine: str) -> None:
    bw, size, mb = 1e9, 2.5e8, 3  # transfer 0.25 s < stage time: no queueing
    problem = Problem(chain_graph(2, 1.0, 2.0, edge_bytes=size), line_topology(2, bw), "throughput",
                      ProblemSettings(micro_batches=(mb,), schedule="gpipe"))
    m = simulate(problem, _pipeline_plan(2, mb, "gpipe"), engine=engine).metrics  # type: ignore[arg-type]
    # stage 1 forwards end at 1.25 + 1 + m; its backwards run back to back from 1.25 + 3;
    # stage 0's last backward waits for the last gradient (+0.25) and then runs 2 s.
    assert m["iteration_s"] == pytest.approx(1.25 + 3 + 3 * 2 + 0.25 + 2.0)
    assert m["bytes_per_channel"] == {"d0->d1": mb * size, "d1->d0": mb * size}


@pytest.mark.parametrize("engine", ENGINES)
def test_allreduce_term_ends_the_iteration(engine: str) -> None:
    bw, lat, params = 1e9, 1e-3, 4e8
    graph = chain_graph(2, 1.0, 2.0, param_bytes=params / 2)
    problem = Problem(graph, line_topology(2, bw, lat), "throughput", ProblemSettings(micro_batches=(4,)))
    plan = Plan((Stage(tuple(graph.ids), ("d0", "d1")),), micro_batches=4)
    m = simulate(problem, plan, engine=engine).metrics  # type: ignore[arg-type]
    ring = allreduce_s(problem.topology, [0, 1], params)
    assert ring == pytest.approx(2 * 0.5 * params / bw + 2 * lat)
    # 4e8 bytes are 16 buckets of 25 MiB: every bucket after the first adds the ring's latency 2 lat
    assert m["iteration_s"] == pytest.approx(4 * 2 * 3.0 / 2 + ring + 15 * 2 * lat)
    assert m["latency_s"] == pytest.approx(2 * 3.0 / 2)  # one micro-batch, no all-reduce
    assert m["bytes_per_channel"] == {"d0->d1": pytest.approx(params), "d1->d0": pytest.approx(params)}


def test_contention_two_messages_on_one_channel_serialise() -> None:
    # a1 (1 s) and a2 (0 s) on d0 both feed c on d1; each message takes 2 s on channel d0->d1.
    nodes = [Node("a1", "x", 1.0), Node("a2", "x", 0.0), Node("c", "x", 0.5)]
    edges = [Edge("a1", "c", 2e9), Edge("a2", "c", 2e9)]
    graph = OpGraph.build("fan-in", nodes, edges)
    problem = Problem(graph, line_topology(2, 1e9), "latency")
    plan = Plan((Stage(("a1", "a2"), ("d0",)), Stage(("c",), ("d1",))), order={"d0": ("a1", "a2")})
    result = simulate(problem, plan, timeline=True)
    assert result.metrics["latency_s"] == pytest.approx(1.0 + 2.0 + 2.0 + 0.5)
    assert result.timeline is not None
    on_channel = sorted((e.start_s, e.end_s) for e in result.timeline if e.resource == "d0->d1")
    assert on_channel == [(1.0, 3.0), (3.0, 5.0)]


@pytest.mark.parametrize("engine", ENGINES)
def test_contention_in_a_pipeline(engine: str) -> None:
    # forward 0.5 s per stage, transfer 2 s: micro-batch m's activation arrives at 0.5 + 2 (m + 1).
    mb = 4
    problem = Problem(chain_graph(2, 0.5, 0.0, edge_bytes=2e9), line_topology(2, 1e9), "throughput",
                      ProblemSettings(micro_batches=(mb,), schedule="gpipe"))
    result = simulate(problem, _pipeline_plan(2, mb, "gpipe"), engine=engine, timeline=True)  # type: ignore[arg-type]
    assert result.timeline is not None
    starts = sorted(e.start_s for e in result.timeline if e.resource == "d1" and e.task.startswith("F"))
    assert starts == pytest.approx([0.5 + 2 * (m + 1) for m in range(mb)])


def test_hand_written_plan_document_simulates() -> None:
    graph = chain_graph(3)
    problem = Problem(graph, line_topology(2), "throughput", ProblemSettings(micro_batches=(2,)))
    plan = plan_from_document({"format": "placer.plan/v1", "micro_batches": 2, "schedule": "gpipe",
                               "stages": [{"ops": ["op0", "op1"], "devices": ["d0"]},
                                          {"ops": ["op2"], "devices": ["d1"]}]})
    m = simulate(problem, plan).metrics
    assert m["engine"] == "stage" and m["schedule"] == "gpipe" and m["micro_batches"] == 2
    # stage 0: F 2 s, B 4 s; stage 1: F 1 s, B 2 s (GPipe, MB = 2).  Stage 1: F0 [2, 3],
    # F1 [4, 5], B0 [5, 7], B1 [7, 9]; stage 0: B0 [7, 11], B1 [11, 15].
    assert m["iteration_s"] == pytest.approx(15.0)


@pytest.mark.parametrize("engine", ENGINES)
def test_empty_stage_takes_no_time(engine: str) -> None:
    problem = Problem(chain_graph(2, 1.0, 2.0), line_topology(3), "throughput",
                      ProblemSettings(micro_batches=(3,), schedule="gpipe", no_empty_stage=False))
    plan = Plan((Stage(("op0",), ("d0",)), Stage((), ("d1",)), Stage(("op1",), ("d2",))),
                micro_batches=3, schedule="gpipe")
    m = simulate(problem, plan, engine=engine).metrics  # type: ignore[arg-type]
    assert m["iteration_s"] == pytest.approx((3 + 1) * 3.0)
    assert m["busy_s"]["d1"] == 0.0
