"""``exact`` over (stage, tensor-parallel degree, replicas): closed forms where tp must win and must lose,
a fixed degree, ``max_tp = 1``, and the optimum checked by brute force on a tiny instance."""

from __future__ import annotations

import itertools

import pytest

from bench.bench_tp_search import megatron_gpt
from solvers import generate_graph, generate_topology, solve
from solvers.model.errors import InvalidPlan
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.ranking import comparison_key_s
from solvers.model.topology import Device, Link, Topology
from solvers.partition.shapes import sr_candidates
from solvers.simulator import simulate
from tests.solvers.simulator.test_tensor_parallel import mlp_graph

LAT = 1e-5


def one_host(n: int, bandwidth_Bps: float, memory_bytes: float) -> Topology:
    devices = [Device(f"d{i}", "GPU", "h0", memory_bytes) for i in range(n)]
    links = [Link(f"d{i}", f"d{j}", bandwidth_Bps, LAT) for i in range(n) for j in range(i + 1, n)]
    return Topology.from_links("host", devices, links)


def problem(topo: Topology, mb: int, **settings: object) -> Problem:
    return Problem(mlp_graph(), topo, "throughput",
                   ProblemSettings(micro_batches=(mb,), optimizer_bytes_per_param_byte=2, **settings))  # type: ignore[arg-type]


def test_tp_wins_a_big_matmul_stage_on_a_fast_link() -> None:
    """The whole MLP's weights with optimizer state (27 MB) do not fit a 25 MB device, half of fc1/fc2's do:
    data parallelism cannot run, and the 2-stage pipeline runs the micro-batch serially (10 s of compute);
    one stage split two ways on a 1 GB/s link runs it in half the split compute plus two all-reduces."""
    plan = solve(problem(one_host(2, 1e9, 25e6), 1), "exact", time_limit_s=20)
    assert [(s.devices, s.tp) for s in plan.stages] == [(("d0", "d1"), 2)]
    fwd = (1.0 + 0.5 + 1.5) / 2 + 0.75 + (4e6 / 1e9 + 2 * LAT)  # fc2's output all-reduced
    bwd = (2.0 + 1.0 + 3.0) / 2 + 0.25 + (4e6 / 1e9 + 2 * LAT)  # fc1's input gradient all-reduced
    assert plan.metrics["objective_s"] == pytest.approx(fwd + bwd, rel=1e-12)
    without = solve(problem(one_host(2, 1e9, 25e6), 1, max_tp=1), "exact", time_limit_s=20)
    assert all(s.tp == 1 for s in without.stages) and len(without.stages) == 2
    assert without.metrics["objective_s"] > 10.0 > plan.metrics["objective_s"]


def test_tp_loses_on_a_slow_link() -> None:
    """On 10 MB/s with 8 micro-batches, each split micro-batch pays 2 x 0.4 s of all-reduce; data
    parallelism pays its 9 MB gradient all-reduce once (0.9 s) and halves all the compute."""
    with_tp = solve(problem(one_host(2, 1e7, 1e12), 8), "exact", time_limit_s=20)
    without = solve(problem(one_host(2, 1e7, 1e12), 8, max_tp=1), "exact", time_limit_s=20)
    assert [(s.devices, s.tp) for s in with_tp.stages] == [(("d0", "d1"), 1)]
    assert with_tp.metrics["objective_s"] == pytest.approx(8 * 10.0 / 2 + 9e6 / 1e7 + 2 * LAT, rel=1e-12)
    assert with_tp.to_document()["stages"] == without.to_document()["stages"]
    forced = solve(problem(one_host(2, 1e7, 1e12), 8, tp=2), "exact", time_limit_s=20)
    per_micro_batch = 3.0 / 2 + 0.75 + 6.0 / 2 + 0.25 + 2 * (4e6 / 1e7 + 2 * LAT)
    assert forced.metrics["objective_s"] == pytest.approx(8 * per_micro_batch, rel=1e-12)
    assert forced.metrics["objective_s"] > with_tp.metrics["objective_s"]


def test_tp_fixes_the_degree() -> None:
    plan = solve(problem(one_host(4, 1e9, 1e12), 2, tp=2), "exact", time_limit_s=20)
    assert plan.stages and all(s.tp == 2 for s in plan.stages)
    assert plan.stats["tp"] == 2


def test_max_tp_1_searches_the_shapes_of_before() -> None:
    """``max_tp = 1``: the (S, R) list of the device count only, and the plan with tp where tp cannot help."""
    graph = generate_graph("transformer", layers=4, causal=True)  # its LM head splits by vocabulary
    topo = generate_topology("hierarchical", nodes=2, gpus_per_node=4)
    base = Problem(graph, topo, settings=ProblemSettings(micro_batches=(8,), max_tp=1))
    plan = solve(base, "exact", time_limit_s=30)
    assert plan.stats["configs"] == len(sr_candidates(base, graph.n_ops))
    searched = solve(Problem(graph, topo, settings=ProblemSettings(micro_batches=(8,))), "exact", time_limit_s=30)
    assert searched.stats["configs"] > plan.stats["configs"]
    # shapes whose trivial bound (MB x max(w / R, W / (S R))) cannot beat the incumbent are skipped, the proof kept
    assert searched.stats["tp_configs_pruned"] > 0 and searched.stats["exact"]
    assert searched.to_document()["stages"] == plan.to_document()["stages"]  # a tie keeps the plan without tp


@pytest.mark.parametrize(("bandwidth_Bps", "memory_bytes", "mb"), [
    (1e9, 23e6, 1), (1e9, 23e6, 4), (1e8, 23e6, 2), (1e9, 16e6, 2), (1e9, 1e12, 2), (1e7, 1e12, 4)])
def test_optimum_over_stage_tp_replicas_by_brute_force(bandwidth_Bps: float, memory_bytes: float, mb: int) -> None:
    """Every contiguous split of the 5-op chain into S stages of R groups of t devices (S t R = 4, the
    consecutive mapping): none simulates faster per sample than ``exact``'s plan."""
    p = problem(one_host(4, bandwidth_Bps, memory_bytes), mb)
    plan = solve(p, "exact", time_limit_s=30)
    ids = list(p.graph.ids)
    keys = []
    for t in (1, 2, 4):
        groups = 4 // t
        for s in (k for k in range(1, groups + 1) if groups % k == 0):
            r = groups // s
            for cuts in itertools.combinations(range(1, len(ids)), s - 1):
                b = (0, *cuts, len(ids))
                stages = tuple(Stage(tuple(ids[b[i]:b[i + 1]]), tuple(f"d{d}" for d in range(i * r * t, (i + 1) * r * t)), t)
                               for i in range(s))
                try:
                    metrics = simulate(p, Plan(stages, micro_batches=mb)).metrics
                except InvalidPlan:  # a split that does not fit memory
                    continue
                keys.append(comparison_key_s(metrics, "throughput", None))
    assert keys
    assert (plan.stages[0].tp > 1) == (memory_bytes < 27e6)  # whole weights with optimizer state: 27 MB
    assert comparison_key_s(plan.metrics, "throughput", None) == pytest.approx(min(keys), rel=1e-12)


def mlp_with_light_ops() -> OpGraph:
    """:func:`mlp_graph` with twelve zero-work index ops feeding its head (past a 100-ideal budget)."""
    g = mlp_graph()
    return OpGraph.build("mlp-light", [*g.nodes, *(Node(f"c{i}", "aten.arange.default", 0.0) for i in range(12))],
                         [*g.edges, *(Edge(f"c{i}", "head", 8.0) for i in range(12))],
                         profiled_batch_size=g.profiled_batch_size)


def test_tp_on_the_relaxation_without_light_ops() -> None:
    """Twelve zero-work index ops feeding the head blow the ideals past the budget: the DP runs on the
    relaxation without them (docs/exact.md), its split model taken from the whole graph's ops, and
    finds the plan of the graph without them."""
    light = mlp_with_light_ops()
    settings = ProblemSettings(micro_batches=(2,), optimizer_bytes_per_param_byte=2)
    plan = solve(Problem(light, one_host(4, 1e9, 23e6), "throughput", settings), "exact", {"max_ideals": 100},
                 time_limit_s=30)
    assert plan.stats["relaxed_ops"] == 13 and plan.stats["tp"] == 2
    plain = solve(problem(one_host(4, 1e9, 23e6), 2), "exact", time_limit_s=30)
    assert plan.metrics["objective_s"] == pytest.approx(plain.metrics["objective_s"], rel=1e-12)
    assert [(s.tp, len(s.devices)) for s in plan.stages] == [(s.tp, len(s.devices)) for s in plain.stages]


def test_a_limit_that_runs_out_is_named_as_the_call_stated_it() -> None:
    """``solve`` gives a solver that may plan split stages two thirds of the limit (the rest is kept for the
    plan without tensor parallelism, solvers.solving.UNSPLIT_RESERVE); a note names the limit the call gave,
    not that share."""
    problem = Problem(megatron_gpt(24), generate_topology("hierarchical", nodes=4, gpus_per_node=8), "throughput",
                      ProblemSettings(micro_batches=(16,)))
    plan = solve(problem, "exact", time_limit_s=1.5)
    ran_out = [n for n in plan.notes if "s limit ran out" in n]
    assert ran_out and all("the 1.5 s limit ran out" in n for n in ran_out), plan.notes
