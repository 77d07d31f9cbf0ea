"""The ``rannc`` solver end to end: valid plans, settings honoured, profiler hook, allocation, budget."""

from __future__ import annotations

import time

import numpy as np
import pytest

from solvers.base import Budget, no_progress
from solvers.generate import generate_graph, generate_topology
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan
from solvers.model.problem import Problem, ProblemSettings
from solvers.rannc.allocate import allocate_devices, node_layout
from solvers.rannc.profile import CostModelProfiler, StageCandidate, StageProfile
from solvers.rannc.solver import RanncOptions, RanncSolver
from solvers.runnable import idle_stages
from solvers.simulator import simulate
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.solvers import contract_fixtures as fx


def _bert(layers: int = 8) -> Problem:
    g = generate_graph("transformer", layers=layers, hidden=512, heads=8, seq_len=128, micro_batch=4)
    topo = generate_topology("hierarchical", nodes=2, gpus_per_node=4, memory_gib=16.0)
    return Problem(g, topo, "throughput", ProblemSettings(micro_batches=(4, 8)))


def _check(problem: Problem, plan_stats: dict, plan) -> None:  # type: ignore[no-untyped-def,type-arg]
    resolve_plan(problem, plan)
    assert plan.claimed_objective_s == pytest.approx(simulate(problem, plan).metrics["objective_s"], rel=1e-9)
    assert plan_stats["blocks"] <= 32


def test_plan_is_valid_and_claim_is_simulated() -> None:
    problem = _bert()
    plan = solve(problem, "rannc", {"search": "exhaustive"})
    assert plan.status == "feasible"
    _check(problem, dict(plan.stats), plan)
    assert sum(len(s.devices) for s in plan.stages) == problem.topology.n_devices
    assert plan.micro_batches in (4, 8)


def test_stages_and_replicas_settings_are_respected() -> None:
    problem = _bert().with_settings(stages=4, replicas=2)
    plan = solve(problem, "rannc")
    assert len(plan.stages) == 4 and all(len(s.devices) == 2 for s in plan.stages)
    problem = _bert().with_settings(stages=3)
    plan = solve(problem, "rannc")
    assert len(plan.stages) == 3
    _check(problem, dict(plan.stats), plan)


def test_power_of_two_micro_batches_and_auto_recompute() -> None:
    problem = _bert().with_settings(stages=2, schedule="1f1b")  # RaNNC's own plan
    plan = solve(problem, "rannc", {"micro_batches": "powers_of_two", "max_micro_batches": 16, "recompute": "auto"})
    assert plan.micro_batches in (1, 2, 4, 8, 16)
    assert plan.recompute is True  # RaNNC recomputes activations as soon as S > 1
    # S = 2 is fixed: each node count per copy (1 and 2) tries it with five micro-batch counts
    assert plan.stats["dp_calls"] == 20  # Algorithm 1 with the all-reduce and with the paper's h


def test_exhaustive_is_no_worse_than_the_paper_search() -> None:
    problem = _bert()
    paper = solve(problem, "rannc")
    full = solve(problem, "rannc", {"search": "exhaustive"})
    assert full.claimed_objective_s / full.micro_batches <= paper.claimed_objective_s / paper.micro_batches + 1e-12


def test_infeasible_when_nothing_fits() -> None:
    plan = solve(fx.infeasible_problem("throughput"), "rannc")
    assert plan.status == "infeasible" and not plan.stages


class _Recorder:
    """A measured-profile stand-in: the cost model, counting calls."""

    def __init__(self, problem: Problem) -> None:
        self.inner = CostModelProfiler(problem, recompute=False)
        self.calls = 0

    def __call__(self, stage: StageCandidate) -> StageProfile:
        self.calls += 1
        assert stage.samples_per_replica == pytest.approx(8 / stage.replicas)
        return self.inner(stage)


def test_profiler_hook_replaces_the_cost_model() -> None:
    problem = fx.throughput_problem()
    recorder = _Recorder(problem)
    plan = RanncSolver(profiler=recorder).solve(problem, RanncOptions(), Budget(10.0), no_progress)
    assert recorder.calls > 0 and plan.status == "feasible"


def test_allocation_keeps_each_pipeline_copy_inside_its_nodes() -> None:
    topo = generate_topology("hierarchical", nodes=4, gpus_per_node=8)
    layout = node_layout(topo)
    stages = allocate_devices(layout, nodes_per_copy=1, copies=4, replicas=[3, 5])
    assert [len(s) for s in stages] == [12, 20]
    for j in range(4):  # copy j: replicas 3j..3j+2 of stage 0 and 5j..5j+4 of stage 1 on one host
        hosts = {topo.devices[d].node for d in stages[0][3 * j:3 * j + 3] + stages[1][5 * j:5 * j + 5]}
        assert len(hosts) == 1
    two = allocate_devices(layout, nodes_per_copy=2, copies=2, replicas=[6, 10])
    assert len({d for s in two for d in s}) == 32


def test_time_limit_is_honoured() -> None:
    g = generate_graph("transformer", layers=24, hidden=1024, heads=16, granularity="head")
    problem = Problem(g, generate_topology("dgx1", boxes=4), "throughput", ProblemSettings(micro_batches=(8,)))
    started = time.perf_counter()
    plan = solve(problem, "rannc", {"search": "exhaustive"}, time_limit_s=2.0)
    assert time.perf_counter() - started < 3.0
    assert plan.status == "feasible"
    resolve_plan(problem, plan)


@pytest.mark.parametrize("kind", ["dgx1", "mesh2d", "torus3d", "random_blk_1", "moirai_inter"])
def test_any_topology(kind: str) -> None:
    topo = generate_topology(kind)
    g = generate_graph("transformer", layers=4, hidden=256, heads=4, seq_len=128)
    problem = Problem(g, topo, "throughput", ProblemSettings(micro_batches=(4,)))
    plan = solve(problem, "rannc", {"search": "exhaustive", "blocks": 8}, time_limit_s=5.0)
    assert plan.status == "feasible"
    resolve_plan(problem, plan)
    assert sum(len(s.devices) for s in plan.stages) <= topo.n_devices


def test_cloned_constant_ops_land_in_their_earliest_stage() -> None:
    from solvers.model.graph import Edge, Node, OpGraph

    nodes = [Node("x", "input", 1e-3, 2e-3, act_bytes=1e6), Node("w", "parameter", 0.0, param_bytes=4e6),
             Node("wt", "aten.t", 1e-4, 1e-4)]
    edges = [Edge("w", "wt", 4e6)]
    prev = "x"
    for i in range(6):
        nodes.append(Node(f"mm{i}", "aten.mm", 2e-3, 4e-3, act_bytes=1e6))
        edges += [Edge(prev, f"mm{i}", 1e6), Edge("wt", f"mm{i}", 4e6)]  # one tied weight for every layer
        prev = f"mm{i}"
    g = OpGraph.build("tied", nodes, edges, profiled_batch_size=4)
    problem = Problem(g, fx.two_node_topology(), "throughput", ProblemSettings(micro_batches=(4,), stages=3))
    plan = solve(problem, "rannc")
    assert plan.stats["cloned_ops"] == 2 and plan.stats["clones"] == 2 * 5
    assert {"w", "wt"} <= set(plan.stages[0].ops)
    resolve_plan(problem, plan)


def test_unequal_hosts_form_one_node_and_channel_estimate() -> None:
    from solvers.model.topology import Device, Link, Topology
    from solvers.rannc.profile import intra_node_channel

    devices = [Device("a0", node="a"), Device("a1", node="a"), Device("b0", node="b")]
    links = [Link("a0", "a1", 50e9, 1e-6), Link("a1", "b0", 5e9, 1e-5)]
    topo = Topology.from_links("uneven", devices, links)
    layout = node_layout(topo)
    assert layout.n_nodes == 1 and sorted(layout.nodes[0]) == [0, 1, 2]
    assert intra_node_channel(topo) == (50e9, 1e-6)  # the channel inside host "a" (footnote 3)


def test_micro_batch_candidates() -> None:
    from solvers.rannc.solver import micro_batch_candidates

    problem = fx.throughput_problem().with_settings(micro_batches=(8, 2, 8))
    assert micro_batch_candidates(problem, RanncOptions()) == [2, 8]
    assert micro_batch_candidates(problem, RanncOptions(micro_batches="powers_of_two", max_micro_batches=8)) == [
        1, 2, 4, 8]


def test_allreduce_table_is_the_simulators_ring_on_the_allocated_devices() -> None:
    """The DP's all-reduce of a stage on positions d' .. d-1 is comm.allreduce_s on the devices
    allocate_devices gives that stage, in the same (copy-major) order the simulator uses."""
    from solvers.base import Budget
    from solvers.cost.comm import allreduce_s
    from solvers.rannc.atomic import atomic_subcomponents
    from solvers.rannc.blocks import partition_blocks
    from solvers.rannc.search import SearchPoint, StageSearch

    problem = _bert(4)
    topo = problem.topology
    blocks = partition_blocks(problem, atomic_subcomponents(problem.graph), 8, recompute_possible=False,
                              refine=True, budget=Budget(None))
    layout = node_layout(topo)
    search = StageSearch(problem, blocks, layout, {f: CostModelProfiler(problem, f) for f in (False, True)},
                         lambda s: False, [4], True)
    for nodes, copies in ((1, 2), (2, 1)):
        D = 4 * nodes
        table = search.allreduce_table(SearchPoint(nodes, copies, 2, 4, D, None), False)
        params = float(table.param_bytes[0, blocks.k])
        for lo in range(D):
            for hi in range(lo + 1, D + 1):
                sizes = [lo, hi - lo, D - hi]
                devs = allocate_devices(layout, nodes, copies, [r for r in sizes if r > 0])[1 if lo else 0]
                got = float(table.seconds(np.asarray([0]), blocks.k, np.asarray([lo]), np.asarray([hi]))[0, 0, 0]) * 4
                assert got == pytest.approx(allreduce_s(topo, devs, params), rel=1e-9, abs=1e-15)


def test_demo_problem_is_pipelined_beyond_data_parallelism() -> None:
    """make run's demo: pure data parallelism pays an all-reduce across both hosts; the DP sees it,
    the search goes on past S = 1, and the plan beats even's split."""
    problem = fx.demo_problem()
    plan = solve(problem, "rannc")
    even = solve(problem, "even")
    assert plan.metrics is not None and even.metrics is not None
    assert plan.metrics["objective_s"] < even.metrics["objective_s"]
    assert len(plan.stages) > 1 and plan.stats["plans_simulated"] > 1
    # the DP's value carries the all-reduce: within 25 % of the simulated time per micro-batch step
    steps = plan.micro_batches + len(plan.stages) - 1
    assert plan.stats["dp_value_s"] * steps == pytest.approx(plan.metrics["objective_s"], rel=0.25)


def _mask_late_problem(stages: int) -> Problem:
    """A model input, a constant (a mask built from shapes) read only by the last op, an embedding and a
    head (tests/solvers/parmesan's graph): the input is a block of its own."""
    nodes = [Node("x", "input", 0.0), Node("mask", "aten.ones.default", 1e-3, constant=True),
             Node("embed", "aten.embedding.default", 1e-3, 1e-3, param_bytes=1e9),
             Node("head", "aten.linear.default", 1e-3, 1e-3, param_bytes=1e9)]
    edges = [Edge("x", "embed", 64.0), Edge("mask", "head", 64.0), Edge("embed", "head", 1e9)]
    return Problem(OpGraph.build("mask-late", nodes, edges, 4),
                   generate_topology("hierarchical", nodes=1, gpus_per_node=4),
                   settings=ProblemSettings(micro_batches=(2,), stages=stages, replicas=1, schedule="1f1b"))


def test_no_stage_holds_only_inputs_and_constants() -> None:
    """Stage 0 was the input alone (cheapest in the DP) and the plan came back infeasible (solvers.runnable):
    a range of blocks without one that computes is not a candidate stage."""
    problem = _mask_late_problem(2)
    plan = solve(problem, "rannc", time_limit_s=10)
    assert plan.status == "feasible", plan.notes
    assert len(plan.stages) == 2 and idle_stages(problem.graph, plan) == []
    assert plan.stats["blocks_that_compute"] == 2


def test_more_stages_than_blocks_that_compute_is_infeasible_and_says_why() -> None:
    plan = solve(_mask_late_problem(3), "rannc", time_limit_s=10)
    assert plan.status == "infeasible" and not plan.stages
    assert plan.notes[0].startswith("stages: 2 of the 3 blocks hold an op that computes (not inputs or constants), "
                                    "fewer than the 3 stages")


def test_a_stage_count_whose_replicas_cannot_split_the_rows_is_named() -> None:
    """One row per micro-batch and 3 stages on 4 devices without tensor parallelism (``max_tp`` 1): RaNNC leaves no
    device idle, so some stage would have 2 replicas of one row; the note says so (not memory), and fixing the
    replicas gives a plan.  With a degree per stage one stage takes two devices as a group of 2 instead."""
    graph = generate_graph("transformer", layers=4, causal=True, micro_batch=1)
    topo = generate_topology("hierarchical", nodes=1, gpus_per_node=4)

    def plan_with(**kw: object) -> Plan:
        settings = ProblemSettings(micro_batches=(4,), schedule="1f1b", **kw)  # type: ignore[arg-type]
        return solve(Problem(graph, topo, settings=settings), "rannc", time_limit_s=20)

    refused = plan_with(stages=3, max_tp=1)
    assert refused.status == "infeasible" and refused.notes[0].startswith("stages: 3 stages on 4 devices")
    assert "rows (1)" in refused.notes[0] and "settings.replicas" in refused.notes[0]
    assert [len(s.devices) for s in plan_with(stages=3, replicas=1, max_tp=1).stages] == [1, 1, 1]
    mixed = plan_with(stages=3)
    assert mixed.status == "feasible" and sorted(mixed.stats["tp"]) == [1, 1, 2]
    assert [len(s.devices) // s.tp for s in mixed.stages] == [1, 1, 1] and sum(len(s.devices) for s in mixed.stages) == 4
    assert plan_with(stages=2).status == "feasible"  # two copies of a two-stage pipeline
