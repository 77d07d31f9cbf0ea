"""Tensor-parallel stages in the cost model and both throughput engines: closed forms on a 2-layer MLP."""

from __future__ import annotations

import itertools

import pytest

from solvers.calibration.apply import apply_calibration
from solvers.calibration.document import calibration_from_document
from solvers.cost.comm import allreduce_s
from solvers.model.errors import InvalidInput, InvalidPlan
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.simulator import simulate

ENGINES = ["stage", "op"]
BW, LAT = 1e9, 1e-5  # every link of the test topologies
X, H, Y = 4e6, 16e6, 4e6  # bytes: MLP input, hidden, output
P1, P2, PO = 3e6, 5e6, 1e6  # parameter bytes: fc1, fc2, the replicated head
A1, AA, A2, AO = 2e6, 8e6, 2e6, 1e6  # activation bytes kept


def mlp_graph(norm: bool = False) -> OpGraph:
    """``x -> [ln] -> fc1 -> act -> fc2 -> head``: a column/row pair between replicated ops."""
    nodes = [Node("x", "input", 0.0)]
    if norm:
        nodes.append(Node("ln", "aten.layer_norm.default", 0.25, 0.5, 1e3, 1e6, layer="mlp.ln",
                          attrs={"module": "LayerNorm"}))
    nodes += [
        Node("fc1", "aten.linear.default", 1.0, 2.0, P1, A1, layer="mlp.fc1", attrs={"module": "Linear"}),
        Node("act", "aten.gelu.default", 0.5, 1.0, 0.0, AA, layer="mlp.act", attrs={"module": "GELU"}),
        Node("fc2", "aten.linear.default", 1.5, 3.0, P2, A2, layer="mlp.fc2", attrs={"module": "Linear"}),
        Node("head", "aten.add.Tensor", 0.75, 0.25, PO, AO, layer="head"),
    ]
    ids = [n.id for n in nodes]
    sizes = {"fc1": X, "act": H, "fc2": H, "head": Y, "ln": X}
    edges = [Edge(a, b, sizes[b]) for a, b in itertools.pairwise(ids)]
    return OpGraph.build("mlp", nodes, edges, profiled_batch_size=12)


def topology(n: int, efficiency: float | None = None) -> Topology:
    devices = [Device(f"d{i}", "GPU", "h0", 1e12) for i in range(n)]
    links = [Link(f"d{i}", f"d{j}", BW, LAT) for i in range(n) for j in range(i + 1, n)]
    attrs = {"calibration": {"tp_efficiency": {"GPU": efficiency}}} if efficiency is not None else None
    return Topology.from_links("full", devices, links, attrs)


def allreduce_2(size: float) -> float:
    """Ring all-reduce over two devices: ``2 (1/2) B / bw + 2 lat``."""
    return size / BW + 2 * LAT


def problem(graph: OpGraph, topo: Topology, mb: int = 1) -> Problem:
    return Problem(graph, topo, "throughput", ProblemSettings(micro_batches=(mb,), optimizer_bytes_per_param_byte=2))


@pytest.mark.parametrize("engine", ENGINES)
def test_one_stage_tp2_is_compute_over_t_plus_two_allreduces(engine: str) -> None:
    graph = mlp_graph()
    plan = Plan((Stage(tuple(graph.ids), ("d0", "d1"), tp=2),))
    m = simulate(problem(graph, topology(2)), plan, engine=engine).metrics  # type: ignore[arg-type]
    fwd = (1.0 + 0.5 + 1.5) / 2 + 0.75 + allreduce_2(Y)  # fc2's output all-reduced (Megatron g)
    bwd = (2.0 + 1.0 + 3.0) / 2 + 0.25 + allreduce_2(X)  # fc1's input gradient all-reduced (Megatron f)
    assert m["iteration_s"] == pytest.approx(fwd + bwd, rel=1e-12)
    assert m["stage_times_s"] == pytest.approx([fwd + bwd], rel=1e-12)
    assert m["busy_s"] == {d: pytest.approx((1 + 0.5 + 1.5 + 2 + 1 + 3) / 2 + 0.75 + 0.25) for d in ("d0", "d1")}
    assert m["bytes_per_channel"] == {"d0->d1": pytest.approx(X + Y), "d1->d0": pytest.approx(X + Y)}
    params = ((P1 + P2) / 2 + PO) * 3  # weights, gradients, optimizer state: 1 + 2 bytes per byte
    acts = (A1 + AA + A2) / 2 + AO
    assert m["peak_memory_bytes"] == {d: pytest.approx(params + acts) for d in ("d0", "d1")}


@pytest.mark.parametrize("engine", ENGINES)
def test_tp2_with_two_replicas_allreduces_each_shard(engine: str) -> None:
    graph = mlp_graph()
    topo = topology(4)
    plan = Plan((Stage(tuple(graph.ids), ("d0", "d1", "d2", "d3"), tp=2),), micro_batches=2)
    m = simulate(problem(graph, topo, 2), plan, engine=engine).metrics  # type: ignore[arg-type]
    fwd = ((1.0 + 0.5 + 1.5) / 2 + 0.75) / 2 + allreduce_2(Y / 2)  # each replica takes half a micro-batch
    bwd = ((2.0 + 1.0 + 3.0) / 2 + 0.25) / 2 + allreduce_2(X / 2)
    shard = (P1 + P2) / 2 + PO
    dp = allreduce_s(topo, [0, 2], shard)
    assert dp == pytest.approx(allreduce_2(shard))
    assert m["iteration_s"] == pytest.approx(2 * (fwd + bwd) + dp, rel=1e-12)
    traffic = m["bytes_per_channel"]
    assert traffic["d0->d1"] == pytest.approx(2 * (X + Y) / 2)  # tensor-parallel ring, both micro-batches
    assert traffic["d0->d2"] == pytest.approx(shard)  # shard 0's data-parallel ring: 2 (R-1)/R P
    assert traffic["d1->d3"] == pytest.approx(shard)
    assert "d0->d3" not in traffic


@pytest.mark.parametrize("engine", ENGINES)
def test_sequence_parallel_splits_the_norm_and_swaps_the_allreduce(engine: str) -> None:
    graph = mlp_graph(norm=True)
    half = lambda size: size / 2 / BW + LAT  # noqa: E731 - ring all-gather or reduce-scatter over two devices
    for sp in (False, True):
        plan = Plan((Stage(tuple(graph.ids), ("d0", "d1"), tp=2),), sequence_parallel=sp)
        m = simulate(problem(graph, topology(2)), plan, engine=engine).metrics  # type: ignore[arg-type]
        ln_f, ln_b = (0.25 / 2, 0.5 / 2) if sp else (0.25, 0.5)
        if sp:  # all-gather of fc1's input and reduce-scatter of fc2's output, each way
            comm = 2 * (half(X) + half(Y))
        else:
            comm = allreduce_2(Y) + allreduce_2(X)
        compute = ln_f + ln_b + (1.0 + 0.5 + 1.5 + 2.0 + 1.0 + 3.0) / 2 + 0.75 + 0.25
        assert m["iteration_s"] == pytest.approx(compute + comm, rel=1e-12)


@pytest.mark.parametrize("engine", ENGINES)
def test_calibrated_efficiency_slows_the_split_ops(engine: str) -> None:
    graph = mlp_graph()
    plan = Plan((Stage(tuple(graph.ids), ("d0", "d1"), tp=2),))
    m = simulate(problem(graph, topology(2, efficiency=0.8)), plan, engine=engine).metrics  # type: ignore[arg-type]
    split = (1.0 + 0.5 + 1.5 + 2.0 + 1.0 + 3.0) / (2 * 0.8)
    assert m["iteration_s"] == pytest.approx(split + 0.75 + 0.25 + allreduce_2(Y) + allreduce_2(X), rel=1e-12)


def test_tp_efficiency_comes_from_a_calibration_document() -> None:
    graph = mlp_graph()
    cal = calibration_from_document({"format": "placer.calibration/v1", "tp_efficiency": {"GPU": 0.8}})
    assert cal.to_document()["tp_efficiency"] == {"GPU": 0.8}
    assert "tp_efficiency" not in calibration_from_document({"format": "placer.calibration/v1"}).to_document()
    g, topo = apply_calibration(graph, topology(2), cal)
    plan = Plan((Stage(tuple(graph.ids), ("d0", "d1"), tp=2),))
    direct = simulate(problem(graph, topology(2, efficiency=0.8)), plan).metrics["iteration_s"]
    assert simulate(problem(g, topo), plan).metrics["iteration_s"] == pytest.approx(direct, rel=1e-12)
    with pytest.raises(InvalidInput) as info:
        calibration_from_document({"format": "placer.calibration/v1", "tp_efficiency": {"GPU": 1.5}})
    assert info.value.field == "tp_efficiency.GPU"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("sp", [False, True])
def test_stage_boundary_sends_full_or_sharded_activation(engine: str, sp: bool) -> None:
    graph = mlp_graph()
    first, second = ("x", "fc1", "act", "fc2"), ("head",)
    plan = Plan((Stage(first, ("d0", "d1"), tp=2), Stage(second, ("d2", "d3"), tp=2)), sequence_parallel=sp)
    m = simulate(problem(graph, topology(4)), plan, engine=engine).metrics  # type: ignore[arg-type]
    traffic = m["bytes_per_channel"]
    sent = Y / 2 if sp else Y  # rank i to rank i: the sequence shard, or the whole activation
    assert traffic["d0->d2"] == pytest.approx(sent)
    assert traffic["d1->d3"] == pytest.approx(sent)
    assert traffic["d2->d0"] == pytest.approx(sent)  # the gradient back
    assert "d0->d3" not in traffic


def test_stage_boundary_between_different_degrees() -> None:
    graph = mlp_graph()
    plan = Plan((Stage(("x", "fc1", "act", "fc2"), ("d0", "d1"), tp=2), Stage(("head",), ("d2",))))
    m = simulate(problem(graph, topology(3)), plan, engine="stage").metrics
    assert m["bytes_per_channel"]["d0->d2"] == pytest.approx(Y)  # rank 0 sends the full activation
    assert "d1->d2" not in m["bytes_per_channel"]
    sp = simulate(problem(graph, topology(3)), plan.with_(sequence_parallel=True), engine="stage").metrics
    assert sp["bytes_per_channel"]["d0->d2"] == pytest.approx(Y / 2)  # each rank its shard
    assert sp["bytes_per_channel"]["d1->d2"] == pytest.approx(Y / 2)


def test_engines_agree_on_a_two_stage_tensor_parallel_pipeline() -> None:
    graph = mlp_graph(norm=True)
    plan = Plan((Stage(("x", "ln", "fc1", "act"), ("d0", "d1", "d2", "d3"), tp=2),
                 Stage(("fc2", "head"), ("d4", "d5"), tp=2)), micro_batches=4, sequence_parallel=True)
    prob = problem(graph, topology(6), 4)
    stage, op = (simulate(prob, plan, engine=e).metrics for e in ENGINES)  # type: ignore[arg-type]
    assert stage["iteration_s"] == pytest.approx(op["iteration_s"], rel=1e-9)
    assert stage["bytes_per_channel"] == pytest.approx(op["bytes_per_channel"])


def test_tp1_plan_is_scored_as_before() -> None:
    graph = mlp_graph()
    prob = problem(graph, topology(2), 2)
    plain = Plan((Stage(tuple(graph.ids), ("d0", "d1")),), micro_batches=2)
    explicit = Plan((Stage(tuple(graph.ids), ("d0", "d1"), tp=1),), micro_batches=2)
    assert simulate(prob, plain).metrics == simulate(prob, explicit).metrics
    assert plain.to_document() == explicit.to_document()


def test_latency_plan_on_a_tensor_parallel_group_is_refused() -> None:
    graph = mlp_graph()
    prob = Problem(graph, topology(2), "latency", ProblemSettings(pass_="forward"))  # type: ignore[call-arg]
    plan = Plan((Stage(tuple(graph.ids), ("d0", "d1"), tp=2),))
    with pytest.raises(InvalidPlan, match=r"stages\[0\].devices: a latency plan places each op on one device, "
                                          r"but stage 0 runs on 2 devices \('d0', 'd1'\) as tensor-parallel groups"):
        simulate(prob, plan)  # op by op: the bounds of the latency models hold for every plan admitted
    m = simulate(prob, plan.with_(stages=(Stage(tuple(graph.ids), ("d0",)),))).metrics
    assert m["engine"] == "op" and m["latency_s"] == pytest.approx(1.0 + 0.5 + 1.5 + 0.75, rel=1e-12)
