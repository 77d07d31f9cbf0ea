"""The ``parmesan`` back-end end to end: valid plans, settings and pins honoured, budgets, statuses."""

from __future__ import annotations

import time

import pytest

from solvers.generate import generate_graph, generate_topology
from solvers.model.errors import InvalidProblem
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.runnable import idle_stages
from solvers.simulator import simulate
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.solvers import contract_fixtures as fx


def test_fixed_stages_and_replicas_are_honoured() -> None:
    problem = fx.throughput_problem().with_settings(stages=2, replicas=2, schedule="1f1b")  # the solver's own stages
    plan = solve(problem, "parmesan", time_limit_s=10)
    resolve_plan(problem, plan)
    assert [len(s.devices) for s in plan.stages] == [2, 2]
    assert plan.status == "feasible"
    assert plan.claimed_objective_s == pytest.approx(simulate(problem, plan).metrics["objective_s"], rel=1e-9)
    assert plan.stats["mapping_lower_bound_s"] <= plan.stats["mapping_objective_s"] * (1 + 1e-9)


@pytest.mark.parametrize("mapping", ["parmesan", "consecutive", "p2p"])
def test_mappers_combine_with_the_partition(mapping: str) -> None:
    problem = fx.throughput_problem().with_settings(stages=2, replicas=2, schedule="1f1b")  # the mapper's groups
    plan = solve(problem, "parmesan", {"mapping": mapping}, time_limit_s=10)
    resolve_plan(problem, plan)
    if mapping == "consecutive":
        assert [list(s.devices) for s in plan.stages] == [["h0g0", "h0g1"], ["h1g0", "h1g1"]]
    if mapping == "p2p":
        assert [list(s.devices) for s in plan.stages] == [["h0g0", "h1g0"], ["h0g1", "h1g1"]]


def test_parmesan_mapping_not_worse_than_cs_on_a_hierarchy() -> None:
    graph = generate_graph("cnn", blocks="2,2,2,2", micro_batch=16)
    topo = generate_topology("hierarchical", nodes=2, gpus_per_node=4)
    problem = Problem(graph, topo, "throughput", ProblemSettings(stages=4, replicas=2, recompute=True,
                                                                 schedule="1f1b"))  # the claims of the solver's own plans
    ours = solve(problem, "parmesan", {"instantiation": "both"}, time_limit_s=20)
    cs = solve(problem, "parmesan", {"mapping": "consecutive"}, time_limit_s=20)
    assert ours.stats["stages"] == 4
    assert ours.claimed_objective_s <= cs.claimed_objective_s * 1.05


def test_stage_pins_are_honoured_and_device_pins_rejected() -> None:
    problem = fx.throughput_problem().with_settings(stages=3, replicas=1, pinned={"l1.a": 2, "in": 0})
    plan = solve(problem, "parmesan", time_limit_s=10)
    rp = resolve_plan(problem, plan)
    assert rp.stage_of[problem.graph.index["l1.a"]] == 2
    with pytest.raises(InvalidProblem, match="device pins"):
        solve(fx.throughput_problem().with_settings(pinned={"in": "h0g0"}), "parmesan")


def test_infeasible_when_nothing_fits() -> None:
    plan = solve(fx.infeasible_problem("throughput"), "parmesan", time_limit_s=10)
    assert plan.status == "infeasible" and plan.stages == ()


def test_fronted_budget_coarsens_instead_of_hanging() -> None:
    # 14 independent branches: 2^14 fronted sets on the raw graph
    nodes = [Node("src", "op", 1e-4)] + [Node(f"b{i}", "op", 1e-3 * (1 + i % 3)) for i in range(14)]
    nodes.append(Node("sink", "op", 1e-4))
    edges = [Edge("src", f"b{i}", 1e5) for i in range(14)] + [Edge(f"b{i}", "sink", 1e5) for i in range(14)]
    graph = OpGraph.build("fan", nodes, edges)
    problem = Problem(graph, fx.two_node_topology(), "throughput", ProblemSettings(stages=2, replicas=1))
    started = time.monotonic()
    plan = solve(problem, "parmesan", {"clusters": 16, "max_fronted_sets": 200}, time_limit_s=10)
    assert time.monotonic() - started < 10
    resolve_plan(problem, plan)
    first = plan.stats["clusterings"][0]
    assert first["fronted_budget_exceeded"] >= 1 and first["fronted_sets"] <= 200
    assert plan.notes


def test_time_limit_is_honoured_on_a_large_graph() -> None:
    graph = generate_graph("transformer", layers=8, hidden=512, heads=8, seq_len=128, granularity="head")
    topo = generate_topology("uniform_dist", devices=16, seed=1)
    problem = Problem(graph, topo, "throughput", ProblemSettings(micro_batches=(4, 8)))
    started, cpu_started = time.monotonic(), time.process_time()
    plan = solve(problem, "parmesan", {"epsilon_rel": 1e-9}, time_limit_s=3)
    # CPU, not wall clock: on a loaded machine the wall clock stretches by the load, while a solver
    # that ignored its limit would spend far more CPU than the limit (1 s margin for the final
    # simulation and the safety net's last baseline, which stops after its first candidate)
    assert time.process_time() - cpu_started < 4.0
    assert time.monotonic() - started < 30.0
    resolve_plan(problem, plan)
    assert plan.status == "feasible"


def test_allreduce_term_as_a_candidate() -> None:
    problem = fx.throughput_problem().with_settings(stages=2, replicas=2)
    plan = solve(problem, "parmesan", {"allreduce_in_partition": "candidate"}, time_limit_s=10)
    resolve_plan(problem, plan)
    assert plan.stats["allreduce_in_partition"] in (True, False)
    distinct = [c for c in plan.stats["clusterings"] if c["same_as_alpha"] is None]
    assert plan.stats["candidates"] == 2 * len(distinct)  # each distinct clustering, with and without the term


def mask_late_graph() -> OpGraph:
    """A constant (a mask built from shapes) that only the last op reads, beside an embedding and a head."""
    nodes = [Node("x", "input", 0.0), Node("mask", "aten.ones.default", 1e-3, constant=True),
             Node("embed", "aten.embedding.default", 1e-3, 1e-3, param_bytes=1e9),
             Node("head", "aten.linear.default", 1e-3, 1e-3, param_bytes=1e9)]
    edges = [Edge("x", "embed", 64.0), Edge("mask", "head", 64.0), Edge("embed", "head", 1e9)]
    return OpGraph.build("mask-late", nodes, edges, 4)


def test_parmesan_gives_every_stage_work() -> None:
    """A constant (a mask built from shapes) read only by the last op: a stage holding it alone
    runs it beside the rest and simulates faster, but the runtime cannot run a stage without
    compute (solvers.runnable). The search skips such candidates instead of returning an
    infeasible plan; a tiny BERT on two CPUs came back infeasible this way."""
    graph = mask_late_graph()
    problem = Problem(graph, generate_topology("hierarchical", nodes=1, gpus_per_node=2),
                      settings=ProblemSettings(micro_batches=(2,)))
    plan = solve(problem, "parmesan", time_limit_s=10)
    assert plan.status != "infeasible", plan.notes
    assert idle_stages(graph, plan) == []


def test_parmesan_falls_back_to_a_runnable_baseline_when_every_partition_idles_a_stage() -> None:
    """Two stages fixed, and every DP partition leaves a stage with constants only: the search
    keeps its best such candidate, and the safety net's runnable plan replaces it, instead of
    answering infeasible with a note about memory."""
    graph = mask_late_graph()
    problem = Problem(graph, generate_topology("hierarchical", nodes=1, gpus_per_node=2),
                      settings=ProblemSettings(micro_batches=(2,), stages=2, schedule="1f1b"))
    plan = solve(problem, "parmesan", time_limit_s=10)
    assert plan.status != "infeasible", plan.notes
    assert len(plan.stages) == 2 and idle_stages(graph, plan) == []
    assert plan.stats["partition_source"] != "parmesan" and plan.stats["idle_stage_candidates"] > 0
