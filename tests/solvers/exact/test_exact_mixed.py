"""``exact`` with a tensor-parallel degree per stage: the DP with a device dimension against brute force,
the six-GPU case where stages of two degrees beat every single degree, the plan's runnability, the time
limit, and the reasons of an infeasible problem."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bench.bench_tp_search import megatron_gpt
from solvers import generate_topology, solve
from solvers.base import Budget, ProgressEvent
from solvers.exact.dp import build_pairs, ideal_sums
from solvers.exact.ideals import enumerate_ideals
from solvers.exact.mixed import MixedSpace, PairCache, least_work_s, mixed_partitions
from solvers.exact.mixed_dp import run_mixed_dp
from solvers.exact.mixed_pairs import shared_pairs
from solvers.exact.space import ideal_space
from solvers.exact.stage_model import (
    StageModel,
    any_group_stage_model,
    in_flight,
    partition_memory_bytes,
    partition_times_s,
    stage_capacities_bytes,
    stage_model,
)
from solvers.mapping.apply import plan_on_devices
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Link, Topology
from solvers.partition.tp import allocate_mixed_groups
from solvers.runnable import runnable_notes
from solvers.simulator import simulate
from solvers.validity import resolve_plan
from tests.solvers.exact.test_exact import _contiguous_partitions
from tests.solvers.exact.test_exact_tp import mlp_with_light_ops, one_host
from tests.solvers.partition.test_tp_search import hosts
from tests.solvers.simulator.test_tensor_parallel import mlp_graph
from tests.strategies import examples, partition_problems

DEGREES = (1, 2, 4)


def _degree_models(problem: Problem, factors: list[tuple[float, float]]) -> dict[int, StageModel]:
    """Degree 1's model and, per further degree, its work and memory scaled op by op (``factors[v]``)."""
    base = stage_model(problem)
    out = {1: base}
    for k, t in enumerate(DEGREES[1:]):
        work = np.array([base.work_s[v] * (factors[v][k] if k == 0 else factors[v][1] ** 2) / t + 1e-3 * t
                         for v in range(len(base.work_s))])
        shrink = np.array([0.5 if factors[v][k] < 0.6 else 1.0 for v in range(len(base.work_s))])
        out[t] = replace(base, work_s=work, param_bytes=base.param_bytes * shrink, act_bytes=base.act_bytes * shrink)
    return out


def _brute_force_s(problem: Problem, models: dict[int, StageModel], units: int) -> float:
    """min over every contiguous partition whose stages all compute and every degree per stage within
    ``units`` of the bottleneck, each stage timed and its memory checked in its degree's model."""
    s, r, mb = problem.settings.stages, problem.settings.replicas, problem.micro_batch_candidates[0]
    assert s is not None and r is not None
    cap, flight = stage_capacities_bytes(problem, s), in_flight(problem, s, mb)
    best = float("inf")
    for stage_of in _contiguous_partitions(problem.graph, s):
        times = {t: partition_times_s(m, stage_of, s, r) for t, m in models.items()}
        fits = {t: partition_memory_bytes(m, stage_of, s, r, flight) <= cap for t, m in models.items()}
        for degrees in itertools.product(DEGREES, repeat=s):
            if sum(degrees) <= units and all(fits[t][k] for k, t in enumerate(degrees)):
                best = min(best, max(float(times[t][k]) for k, t in enumerate(degrees)))
    return best


@settings(max_examples=examples(40), deadline=None)
@given(problem=partition_problems(max_ops=6, max_stages=3, idle_ops=True), data=st.data())
def test_mixed_dp_equals_brute_force_over_chains_and_degrees(problem: Problem, data: st.DataObject) -> None:
    s, r, mb = problem.settings.stages, problem.settings.replicas, problem.micro_batch_candidates[0]
    assert s is not None and r is not None
    assume(s >= 2)
    factors = data.draw(st.lists(st.tuples(st.floats(0.3, 1.5), st.floats(0.3, 1.5)), min_size=problem.graph.n_ops,
                                 max_size=problem.graph.n_ops))
    units = data.draw(st.integers(s, 4 * s))
    models = _degree_models(problem, factors)
    ideals = enumerate_ideals(problem.graph, 10**6)
    assert ideals is not None
    pairs = {t: build_pairs(ideals, m, ideal_sums(ideals, m.work_s), r, float("inf"), 10**9) for t, m in models.items()}
    assert all(p is not None for p in pairs.values())
    cap, flight = stage_capacities_bytes(problem, s), in_flight(problem, s, mb)
    found = run_mixed_dp(pairs, ideals.count, ideal_sums(ideals, least_work_s(models)), s, r, units,  # type: ignore[arg-type]
                         float("inf"), cap, flight)
    expected = _brute_force_s(problem, models, units)
    if found is None:
        assert not np.isfinite(expected)
        return
    assert found.bottleneck_s == pytest.approx(expected, rel=1e-9)
    assert len(found.degrees) == s and sum(found.degrees) <= units and len(found.chain) == s + 1
    stage_of = np.asarray(ideals.members(np.array(found.chain)).shape[0] - 1
                          - ideals.members(np.array(found.chain)).sum(axis=0), dtype=np.int64)
    again = max(float(partition_times_s(models[t], stage_of, s, r)[k]) for k, t in enumerate(found.degrees))
    assert again == pytest.approx(found.bottleneck_s, rel=1e-9)  # the chain and degrees read back have the value
    shared = shared_pairs(ideals, models, r * expected, 10**9, float("inf"))
    assert shared is not None
    capped = {t: shared.pairs(m, t, r, expected, True) for t, m in models.items()}
    for t, p in capped.items():  # the shared build gives build_pairs' pairs under the same cap
        alone = build_pairs(ideals, models[t], ideal_sums(ideals, models[t].work_s), r, expected, 10**9)
        assert alone is not None
        for name in ("prev", "heads", "starts", "time_s", "computes", "fixed_bytes", "kept_bytes"):
            assert np.array_equal(getattr(p, name), getattr(alone, name)), name
    again_capped = run_mixed_dp(capped, ideals.count, ideal_sums(ideals, least_work_s(models)), s, r, units, expected,
                                cap, flight)
    assert again_capped is not None and again_capped.bottleneck_s == pytest.approx(expected, rel=1e-9)


def _six_gpus(**kw: object) -> Problem:
    settings = ProblemSettings(micro_batches=(4,), schedule="1f1b", **kw)  # type: ignore[arg-type]
    return Problem(megatron_gpt(8), hosts(6, 1), "throughput", settings)


def test_stages_of_two_degrees_beat_every_single_degree_on_six_gpus() -> None:
    """tests/solvers/baselines/test_pipedream_tp.py's case: micro-batches of 4 rows on six GPUs of one host.
    One degree gives 3 x 2 at t = 1 (37.5 ms) or 3 stages of t = 2 (42.9 ms); 2 replicas of a t = 2 stage
    then 2 replicas of a t = 1 stage use all six: 34.5 ms, pipedream's figure."""
    events: list[ProgressEvent] = []
    plan = solve(_six_gpus(), "exact", time_limit_s=30, progress=events.append)
    assert [(len(s.devices) // s.tp, s.tp) for s in plan.stages] == [(2, 2), (2, 1)]
    streamed = [e.plan for e in events if e.plan is not None]
    assert streamed and [s.tp for s in streamed[-1].stages] == [2, 1]  # the mixed incumbent is streamed
    assert plan.stats["tp"] == [2, 1] and plan.stats["partition"] == "dp"
    assert 1e3 * plan.metrics["objective_s"] == pytest.approx(34.55, abs=0.01)
    pipedream = solve(_six_gpus(), "pipedream", time_limit_s=30)
    assert plan.metrics["objective_s"] <= pipedream.metrics["objective_s"] * (1 + 1e-9)
    for single in (_six_gpus(max_tp=1), _six_gpus(tp=2), _six_gpus(tp=4)):
        other = solve(single, "exact", time_limit_s=30)
        assert len({s.tp for s in other.stages}) == 1 and "mixed_configs" not in other.stats
        assert plan.metrics["objective_s"] < 0.95 * other.metrics["objective_s"]
    # the DP's bound is a relaxation of the simulated stage; the plan does not reach it (ring latency)
    assert plan.stats["bottleneck_lower_bound_s"] <= plan.stats["simulated_bottleneck_s"]
    assert not plan.stats["bottleneck_optimal"] and plan.status == "feasible"
    _check_runnable(plan, _six_gpus())


def _check_runnable(plan: Plan, problem: Problem) -> None:
    """The launcher's rule (every stage computes), a valid plan and the simulator's metrics again."""
    assert runnable_notes(problem.graph, plan) == []
    resolve_plan(problem, plan)
    devices = [d for s in plan.stages for d in s.devices]
    assert len(devices) == len(set(devices)) <= problem.topology.n_devices
    for stage in plan.stages:  # each replica's group of one host
        for k in range(len(stage.devices) // stage.tp):
            group = stage.devices[k * stage.tp:(k + 1) * stage.tp]
            assert len({problem.topology.devices[problem.topology.index[d]].node for d in group}) == 1
    assert simulate(problem, plan).metrics["objective_s"] == pytest.approx(plan.metrics["objective_s"], rel=1e-12)


def test_one_degree_runs_no_mixed_search() -> None:
    plan = solve(_six_gpus(max_tp=1), "exact", time_limit_s=30)
    assert not any(k.startswith("mixed") for k in plan.stats)


def test_time_limit_holds_with_the_mixed_search() -> None:
    topo = generate_topology("hierarchical", nodes=4, gpus_per_node=8, device="H100", intra_bandwidth_GBps=300.0,
                             inter_bandwidth_GBps=25.0)
    problem = Problem(megatron_gpt(24), topo, settings=ProblemSettings(micro_batches=(16,), max_tp=8, schedule="1f1b"))
    started = time.perf_counter()
    plan = solve(problem, "exact", time_limit_s=2.0)
    assert time.perf_counter() - started <= 3.0 and plan.solve_time_s is not None and plan.solve_time_s <= 3.0
    assert plan.stages and plan.status in ("feasible", "unknown")


def test_infeasible_with_degrees_per_stage_still_says_why() -> None:
    """Devices of 10 MB: no stage of the GPT fits at any degree, mixed or not."""
    small = Topology.from_links("small", [replace(d, memory_bytes=1e7) for d in hosts(6, 1).devices],
                                [Link(f"h0g{i}", f"h0g{j}", 300e9, 1e-6) for i in range(6) for j in range(i + 1, 6)])
    settings = ProblemSettings(micro_batches=(4,), schedule="1f1b")
    plan = solve(Problem(megatron_gpt(8), small, "throughput", settings), "exact", time_limit_s=30)
    assert plan.status == "infeasible" and not plan.stages
    assert plan.stats["mixed_configs"] == 4 and not plan.stats["mixed_over_budget"]  # the mixed DP ran, found none
    assert plan.notes[0].startswith("no contiguous partition into the searched (S, R) both fits the devices' memory")
    assert any(note.startswith("memory: any plan") and "no plan can fit" in note for note in plan.notes)


def test_degree_per_stage_on_the_relaxation_without_light_ops() -> None:
    """Twelve zero-work index ops blow the ideals past the budget: the mixed DP runs on the relaxation's
    ideals (memory cannot bind) and its chains are lifted onto the whole graph; nothing is over budget."""
    light = mlp_with_light_ops()
    settings = ProblemSettings(micro_batches=(2,), optimizer_bytes_per_param_byte=2)
    plan = solve(Problem(light, one_host(6, 1e9, 1e12), "throughput", settings), "exact", {"max_ideals": 100},
                 time_limit_s=30)
    assert plan.stats["relaxed_ops"] == 13 and plan.stats["mixed_configs"] >= 1
    assert plan.stats["mixed_dp_pairs"] > 0 and plan.stats["mixed_over_budget"] == []
    assert runnable_notes(light, plan) == []


def test_mixed_chains_lifted_from_the_relaxation_stay_contiguous_and_bounded() -> None:
    """The mixed DP without a cap on the relaxation's ideals: every chain lifted onto the whole graph keeps
    its edges forward and every stage computing, and its bound is at most the placed plan's simulated
    bottleneck (the model is a relaxation of every group)."""
    g = mlp_graph()
    light = OpGraph.build("mlp-light", [*g.nodes, *(Node(f"c{i}", "aten.arange.default", 0.0) for i in range(12))],
                          [*g.edges, *(Edge(f"c{i}", "head", 8.0) for i in range(12))],
                          profiled_batch_size=g.profiled_batch_size)
    problem = Problem(light, one_host(6, 1e9, 1e12), "throughput",
                      ProblemSettings(micro_batches=(2,), optimizer_bytes_per_param_byte=2, schedule="1f1b"))
    base = stage_model(problem)
    space = ideal_space(problem, 100, base, Budget(30.0))
    assert space.ideals is not None and space.kept is not None
    models = {t: any_group_stage_model(problem, space.model, t, space.kept) for t in DEGREES}
    whole = least_work_s({t: any_group_stage_model(problem, base, t) for t in DEGREES})
    mspace = MixedSpace(light, space.ideals, models, dict.fromkeys(DEGREES, False), space.kept, False, whole)
    seen = 0
    for n_stages, replicas in ((2, 1), (3, 1), (2, 2)):
        found = mixed_partitions(problem, mspace, n_stages, replicas, 6 // replicas, (2,), float("inf"),
                                 stage_capacities_bytes(problem, n_stages), 10**9, float("inf"), PairCache())
        assert not isinstance(found, str)
        for part in found[0]:
            seen += 1
            assert (part.stage_of[light.edge_src] <= part.stage_of[light.edge_dst]).all()
            placed = allocate_mixed_groups(problem.topology, part.degrees, replicas)
            assert placed is not None
            plan = plan_on_devices(problem, part.stage_of, [[d for grp in groups for d in grp] for groups in placed],
                                   part.degrees, part.micro_batches)
            assert runnable_notes(light, plan) == []
            assert part.bound_s <= simulate(problem, plan).metrics["bottleneck_stage_s"] * (1 + 1e-9)
    assert seen == 3


def test_a_chain_the_hosts_cannot_hold_is_skipped_and_named() -> None:
    """Two hosts of five GPUs: the mixed DP's best chain of 4 stages of 1 replica, degrees 2, 2, 2, 4, uses all ten
    devices, but after the group of 4 one host has 1 device left and three groups of 2 need a second host with
    2 free each: the topology cannot hold it, the stats name it, and a single-degree plan comes back."""
    problem = Problem(megatron_gpt(8), hosts(5, 2), "throughput", ProblemSettings(micro_batches=(4,), schedule="1f1b"))
    plan = solve(problem, "exact", time_limit_s=30)
    assert plan.stats["mixed_unplaced"] == ["4x1 tp [2, 2, 2, 4]"]
    assert allocate_mixed_groups(problem.topology, [2, 2, 2, 4], 1) is None
    assert plan.stages and len({s.tp for s in plan.stages}) == 1
    _check_runnable(plan, problem)
