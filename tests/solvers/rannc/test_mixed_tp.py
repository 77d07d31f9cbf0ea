"""``rannc`` with a tensor-parallel degree per stage: Algorithm 2 with Algorithm 1 choosing each stage's (t, r)."""

from __future__ import annotations

import pytest

from bench.bench_tp_search import megatron_gpt, with_megatron_names
from solvers import generate_graph, generate_topology, solve
from solvers.base import Budget
from solvers.model.plan import Plan
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.rannc.allocate import node_layout, tp_layout
from solvers.rannc.atomic import atomic_subcomponents
from solvers.rannc.blocks import partition_blocks
from solvers.rannc.mixed_search import MixedStageSearch
from solvers.rannc.profile import CostModelProfiler
from solvers.rannc.solver import RanncOptions, RanncSolver, micro_batch_candidates
from solvers.runnable import runnable_notes
from solvers.simulator import simulate
from solvers.validity import resolve_plan


def six_gpus(memory_bytes: float) -> Topology:
    """One host of six H100, every pair joined at 300 GB/s."""
    devices = [Device(f"g{i}", "H100", "h0", memory_bytes) for i in range(6)]
    links = [Link(a.id, b.id, 300e9, 1e-6) for k, a in enumerate(devices) for b in devices[k + 1:]]
    return Topology.from_links("six", devices, links)


def gpt(rows: int) -> Problem:
    """The GPT of bench/bench_tp_search.py (8 layers, hidden 2048) with micro-batches of ``rows`` rows."""
    graph = generate_graph("transformer", layers=8, causal=True, hidden=2048, heads=16, seq_len=1024,
                           micro_batch=rows, vocab=50257, device="H100")
    return Problem(with_megatron_names(graph, "gpt-8"), six_gpus(80e9), "throughput")


def plan_on(problem: Problem, solver: str, memory_bytes: float, micro_batches: int, **kw: object) -> Plan:
    settings = ProblemSettings(micro_batches=(micro_batches,), schedule="1f1b", **kw)  # type: ignore[arg-type]
    return solve(Problem(problem.graph, six_gpus(memory_bytes), "throughput", settings), solver, time_limit_s=30)


def test_pipedreams_six_gpu_case_keeps_rannc_single_degree_plan() -> None:
    """pipedream's case (tests/solvers/baselines/test_pipedream_tp.py: micro-batches of 4 rows, 80 GB): its mixed
    plan (34.5 ms) beats its single-degree plans because its stages share one replica count.  RaNNC's stages
    each have their own, and 2 then 4 replicas of ``t = 1`` use all six at 32.0 ms; the degree-per-stage
    search runs, its DP gives every stage ``t = 1`` (no mixed plan to simulate) and the plan stays."""
    problem = Problem(megatron_gpt(8), six_gpus(80e9), "throughput")
    rannc = plan_on(problem, "rannc", 80e9, 4)
    pipedream = plan_on(problem, "pipedream", 80e9, 4)
    assert rannc.stats["tp_per_stage"] == {"searched": True, "dp_calls": 4, "plans_simulated": 0, "kept": False}
    assert rannc.stats["tp"] == 1 and [len(s.devices) for s in rannc.stages] == [2, 4]
    assert isinstance(pipedream.stats["tp"], list)
    assert rannc.metrics["objective_s"] < 0.95 * pipedream.metrics["objective_s"]
    assert rannc.metrics["objective_s"] == pytest.approx(31.98e-3, rel=1e-3)


def test_stages_of_different_degrees_beat_every_single_degree() -> None:
    """Six GPUs of 3 GB, micro-batches of 2 rows, 16 an iteration: memory binds, a stage takes 1 or 2 replicas
    (2 rows), a single degree gives 1, 2 (3 groups of 2) or no plan (4 does not divide a host of 6).  A stage
    of the embedding and first layers split over 2, then two stages of 2 replicas of ``t = 1``, beat both."""
    problem = gpt(2)
    mixed = plan_on(problem, "rannc", 3e9, 16)
    assert mixed.stats["tp"] == [2, 1, 1] and mixed.stats["tp_per_stage"]["kept"]
    assert [(len(s.devices), s.tp) for s in mixed.stages] == [(2, 2), (2, 1), (2, 1)]
    assert sum(len(s.devices) for s in mixed.stages) == 6
    singles = [plan_on(problem, "rannc", 3e9, 16, max_tp=1), plan_on(problem, "rannc", 3e9, 16, tp=2)]
    assert plan_on(problem, "rannc", 3e9, 16, tp=4).status == "infeasible"
    for single in singles:
        assert single.stages and len({s.tp for s in single.stages}) == 1
        assert mixed.metrics["objective_s"] < 0.97 * single.metrics["objective_s"]
    full = Problem(problem.graph, six_gpus(3e9), "throughput", ProblemSettings(micro_batches=(16,), schedule="1f1b"))
    resolve_plan(full, mixed)
    assert runnable_notes(full.graph, mixed) == []
    assert simulate(full, mixed).metrics["objective_s"] == pytest.approx(mixed.claimed_objective_s, rel=1e-9)


def test_a_mixed_plans_groups_are_the_layouts_groups_on_two_hosts() -> None:
    """Two hosts of 8 (4-row micro-batches, 3 GB, 16 per iteration): every group of a stage of degree ``t`` is a
    group of ``tp_layout``'s cut of the node layout, the stages take every device once, each stage's replicas
    split the rows."""
    problem = gpt(4)
    devices = [Device(f"h{h}g{i}", "H100", f"h{h}", 3e9) for h in range(2) for i in range(8)]
    links = [Link(a.id, b.id, 300e9 if a.node == b.node else 25e9, 1e-6)
             for k, a in enumerate(devices) for b in devices[k + 1:]]
    topo = Topology.from_links("two-by-six", devices, links)
    full = Problem(problem.graph, topo, "throughput", ProblemSettings(micro_batches=(16,), schedule="1f1b"))
    plan = solve(full, "rannc", time_limit_s=30)
    assert isinstance(plan.stats["tp"], list) and len(set(plan.stats["tp"])) == 2
    used = [d for s in plan.stages for d in s.devices]
    assert sorted(used) == sorted(d.id for d in topo.devices)
    layout = node_layout(topo)
    for stage in plan.stages:
        assert 4 % (len(stage.devices) // stage.tp) == 0
        if stage.tp == 1:
            continue
        found = tp_layout(layout, topo, stage.tp)
        assert found is not None
        groups = {tuple(topo.devices[d].id for d in g) for g in found[1]}
        for k in range(0, len(stage.devices), stage.tp):
            assert stage.devices[k:k + stage.tp] in groups
    resolve_plan(full, plan)


def test_no_degree_per_stage_search_with_one_degree_or_a_profiler() -> None:
    problem = gpt(2)
    settings = ProblemSettings(micro_batches=(16,), schedule="1f1b", max_tp=1)
    one = solve(Problem(problem.graph, six_gpus(3e9), "throughput", settings), "rannc", time_limit_s=30)
    assert "tp_per_stage" not in one.stats and one.stats["tp"] == 1
    fixed = plan_on(problem, "rannc", 3e9, 16, tp=2)
    assert "tp_per_stage" not in fixed.stats
    full = Problem(problem.graph, six_gpus(3e9), "throughput", ProblemSettings(micro_batches=(16,), schedule="1f1b"))
    solver = RanncSolver(profiler=CostModelProfiler(full, False))
    profiled = solver.solve(full, RanncOptions(), Budget(30.0), lambda event: None)
    assert "tp_per_stage" not in profiled.stats and all(s.tp == 1 for s in profiled.stages)


def test_the_degree_per_stage_search_stops_at_the_budget() -> None:
    """A spent budget: no Algorithm 1 call once the single-degree searches hold a plan, and ``solve`` keeps its
    limit (+ 1 s) on the 4 x 8 H100 GPT of bench/bench_tp_search.py with degrees 1 to 8."""
    problem = gpt(2)
    full = Problem(problem.graph, six_gpus(3e9), "throughput", ProblemSettings(micro_batches=(16,), schedule="1f1b"))
    options = RanncOptions()
    blocks = partition_blocks(full, atomic_subcomponents(full.graph), options.blocks, recompute_possible=False,
                              refine=True, budget=Budget(None))
    layout = node_layout(full.topology)
    searches = RanncSolver()._searches(full, options, blocks, layout, lambda n_stages: False)
    assert sorted(searches) == [1, 2]
    mixed = MixedStageSearch(full, blocks, layout, searches, lambda n_stages: False,
                             micro_batch_candidates(full, options))
    spent = mixed.run(False, Budget(0.0), lambda result, fraction: None, until_found=False)
    assert spent.dp_calls == 0 and spent.plan is None
    found = mixed.run(False, Budget(0.0), lambda result, fraction: None, until_found=True)
    assert found.plan is not None and len({s.tp for s in found.plan.stages}) == 2
    topo = generate_topology("hierarchical", nodes=4, gpus_per_node=8, device="H100", intra_bandwidth_GBps=300.0,
                             inter_bandwidth_GBps=25.0)
    for limit_s in (2.0, 5.0):
        plan = solve(Problem(megatron_gpt(24), topo, settings=ProblemSettings(micro_batches=(16,))), "rannc",
                     time_limit_s=limit_s)
        assert plan.stages and plan.solve_time_s is not None and plan.solve_time_s <= limit_s + 1.0
