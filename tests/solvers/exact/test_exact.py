"""The ``exact`` solver against brute force over every contiguous partition, and its honesty."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from hypothesis import example, given, settings

from solvers import registry
from solvers.exact.ideals import enumerate_ideals
from solvers.exact.relax import lift
from solvers.exact.stage_model import (
    in_flight,
    partition_memory_bytes,
    partition_times_s,
    stage_capacities_bytes,
    stage_model,
)
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.simulator import simulate
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.solvers import contract_fixtures as fx
from tests.strategies import dag_graphs, examples, partition_problems


def _contiguous_partitions(g: OpGraph, n_stages: int) -> list[np.ndarray]:
    """Every op -> stage map whose edges never go back and whose stages are all non-empty."""
    out = []
    for labels in itertools.product(range(n_stages), repeat=g.n_ops):
        stage_of = np.array(labels, dtype=np.int64)
        if len(set(labels)) == n_stages and (stage_of[g.edge_src] <= stage_of[g.edge_dst]).all():
            out.append(stage_of)
    return out


def _brute_force_bottleneck_s(problem: Problem) -> float:
    s, r, mb = problem.settings.stages, problem.settings.replicas, problem.micro_batch_candidates[0]
    assert s is not None and r is not None
    model = stage_model(problem)
    cap = stage_capacities_bytes(problem, s)
    best = float("inf")
    for stage_of in _contiguous_partitions(problem.graph, s):
        if (partition_memory_bytes(model, stage_of, s, r, in_flight(problem, s, mb)) <= cap).all():
            best = min(best, float(partition_times_s(model, stage_of, s, r).max()))
    return best


@settings(max_examples=examples(40), deadline=None)
@given(dag_graphs(min_ops=0 + 1, max_ops=9, with_overrides=False))
def test_ideals_are_exactly_the_downward_closed_sets(g: OpGraph) -> None:
    ideals = enumerate_ideals(g, 10**6)
    assert ideals is not None
    members = ideals.members(np.arange(ideals.count))
    found = {tuple(row) for row in members.tolist()}
    closed = set()
    for bits in itertools.product((False, True), repeat=g.n_ops):
        mask = np.array(bits)
        if not (mask[g.edge_dst] & ~mask[g.edge_src]).any():
            closed.add(tuple(bits))
    assert found == closed and len(found) == ideals.count
    assert (np.diff(ideals.size) >= 0).all() and ideals.size[0] == 0 and ideals.size[-1] == g.n_ops
    assert enumerate_ideals(g, ideals.count - 1) is None


def _no_incumbent_case() -> Problem:
    """Found by Hypothesis: even's split does not fit memory, so the DP runs without an incumbent
    (the last stage's pruning multiplied 0 by inf)."""
    nodes = [Node("op1", "x", 0.5, 1.5, 1e6, 1e6), Node("op2", "x", 1.0, 1.0, 4e6, 0.0),
             Node("op3", "x", 1.5, 0.5, 1e6, 1e3), Node("op0", "x", 1.0, 3.0, 1e6, 1e3)]
    edges = [Edge("op0", "op1", 1e3), Edge("op0", "op2", 1e3), Edge("op0", "op3", 0.0), Edge("op1", "op2", 1e6),
             Edge("op2", "op3", 0.0)]
    devices = [Device(f"d{i}", "GPU", f"h{i}", 2e7) for i in range(3)]
    topo = Topology.from_links("t", devices, [Link(a.id, b.id, 1e6, 1e-3) for i, a in enumerate(devices)
                                              for b in devices[i + 1:]])
    return Problem(OpGraph.build("r", nodes, edges), topo, "throughput",
                   ProblemSettings(micro_batches=(1,), schedule="gpipe", stages=3, replicas=1))


@settings(max_examples=examples(60), deadline=None)
@given(partition_problems())
@example(_no_incumbent_case())
def test_dp_equals_brute_force_over_contiguous_partitions(problem: Problem) -> None:
    expected = _brute_force_bottleneck_s(problem)
    plan = solve(problem, "exact")
    if not np.isfinite(expected):
        assert plan.status == "infeasible"
        return
    assert plan.status in ("feasible", "optimal")
    assert plan.stats["exact"] is True
    assert plan.stats["bottleneck_lower_bound_s"] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    resolve_plan(problem, plan)
    assert plan.claimed_objective_s == pytest.approx(simulate(problem, plan).metrics["objective_s"], rel=1e-9)
    # the DP's stage time never exceeds the simulator's: its optimum bounds the plan's bottleneck
    assert plan.stats["simulated_bottleneck_s"] >= expected * (1 - 1e-9)


@settings(max_examples=examples(40), deadline=None)
@given(partition_problems(zero_bytes=True))
def test_compute_only_plan_reaches_the_bound(problem: Problem) -> None:
    plan = solve(problem, "exact")
    if plan.status == "infeasible":
        assert not np.isfinite(_brute_force_bottleneck_s(problem))
        return
    assert plan.stats["bottleneck_optimal"] is True
    assert plan.metrics is not None
    assert plan.metrics["bottleneck_stage_s"] == pytest.approx(plan.stats["bottleneck_lower_bound_s"], rel=1e-9)
    # proven: optimal, for the objective the plan names when the simulator's own bound is not met
    assert plan.status == "optimal"
    if plan.stats.get("optimal_objective") is not None:
        assert plan.stats["optimal_objective"] == "bottleneck_stage_s"
        assert plan.stats["optimal_bound_s"] == plan.stats["bottleneck_lower_bound_s"]
        assert any("optimal for the bottleneck stage time" in n for n in plan.notes)


def test_ideal_budget_exceeded_is_unknown_with_even_split() -> None:
    # two stages: one stage needs no DP (the whole graph is its only partition)
    problem = fx.throughput_problem().with_settings(stages=2, schedule="1f1b")  # the solver's own plan and claim
    plan = solve(problem, "exact", {"max_ideals": 3})
    assert plan.status == "unknown"
    assert plan.stats["exact"] is False and plan.stats["ideals"] is None
    assert plan.stats["partition"] == "even" and plan.stats["bottleneck_optimal"] is False
    assert plan.notes and "ideals: more than 3 in the whole graph" in plan.notes[0]
    resolve_plan(problem, plan)
    even = solve(problem, "even")
    assert plan.claimed_objective_s is not None and even.claimed_objective_s is not None
    assert plan.claimed_objective_s <= even.claimed_objective_s * (1 + 1e-9)


def test_pair_budget_exceeded_is_unknown() -> None:
    plan = solve(fx.throughput_problem().with_settings(stages=2), "exact", {"max_pairs": 1})
    assert plan.status == "unknown" and plan.stats["configs_over_budget"]


def test_registered_for_throughput_only() -> None:
    cls = registry.get_solver_class("exact")
    assert cls.objectives == ("throughput",)
    assert "exact" in registry.names()


def _chains_problem(n_chains: int, length: int, light_s: float, heavy: int = 0, stages: int = 3,
                    heavy_bytes: float = 0.0) -> Problem:
    """``heavy`` ops of 1 s in a chain (edges of ``heavy_bytes``), beside ``n_chains`` separate
    chains of ``length`` ops of ``light_s`` each (edges of zero bytes); unbounded memory,
    ``stages`` identical devices."""
    nodes = [Node(f"h{i}", "x", 1.0 + 0.1 * (i % 3), 1.0, 0.0, 0.0) for i in range(heavy)]
    edges = [Edge(f"h{i}", f"h{i + 1}", heavy_bytes * (1 + i % 4)) for i in range(heavy - 1)]
    for c in range(n_chains):
        nodes += [Node(f"c{c}.{k}", "x", light_s, 0.0, 0.0, 0.0) for k in range(length)]
        edges += [Edge(f"c{c}.{k}", f"c{c}.{k + 1}", 0.0) for k in range(length - 1)]
    devices = [Device(f"d{i}", "GPU", f"h{i}", 1e18) for i in range(stages)]
    topo = Topology.from_links("t", devices, [Link(a.id, b.id, 1e10, 0.0) for i, a in enumerate(devices)
                                              for b in devices[i + 1:]])
    return Problem(OpGraph.build("chains", nodes, edges), topo, "throughput",
                   ProblemSettings(micro_batches=(1,), schedule="1f1b", stages=stages, replicas=1))


def test_time_limit_holds_while_the_ideals_are_enumerated() -> None:
    # 12 separate chains of 6 ops: 7^12 ideals, far past what 0.3 s enumerates
    problem = _chains_problem(12, 6, 1.0)
    started = time.monotonic()
    plan = solve(problem, "exact", {"max_ideals": 10**9}, time_limit_s=0.3)
    assert time.monotonic() - started <= 0.3 + 1.0
    assert plan.status == "unknown" and plan.stats["partition"] == "even"
    assert any("time: the 0.3 s limit ran out while enumerating the ideals" in n for n in plan.notes)
    resolve_plan(problem, plan)


@pytest.mark.parametrize("heavy_bytes", [0.0, 2e9])
def test_relaxation_without_detached_light_ops_proves_the_optimum(heavy_bytes: float) -> None:
    # 4 separate chains of 3 light ops multiply the 13 ideals of the heavy chain by 4^4
    problem = _chains_problem(4, 3, 1e-9, heavy=12, heavy_bytes=heavy_bytes)
    whole = solve(problem, "exact", {"max_ideals": 10**6})
    assert whole.stats["relaxed_ops"] is None and whole.stats["ideals"] == 13 * 4**4
    plan = solve(problem, "exact", {"max_ideals": 1000})
    assert plan.stats["relaxed_ops"] == 12 and plan.stats["ideals"] == 13
    assert plan.status == "optimal" and plan.stats["bottleneck_optimal"] is True
    assert plan.stats["bottleneck_lower_bound_s"] == pytest.approx(whole.stats["bottleneck_lower_bound_s"], rel=1e-12)
    assert plan.metrics is not None and whole.metrics is not None
    assert plan.metrics["bottleneck_stage_s"] == pytest.approx(whole.metrics["bottleneck_stage_s"], rel=1e-12)
    assert "relaxation without the 12 detached ops" in plan.notes[0]
    resolve_plan(problem, plan)


def test_lift_keeps_every_edge_forward() -> None:
    g = OpGraph.build("g", [Node(n, "x", 1.0, 0.0, 0.0, 0.0) for n in "abcde"],
                      [Edge("a", "b", 0.0), Edge("b", "c", 0.0), Edge("a", "d", 0.0), Edge("d", "e", 0.0)])
    kept = np.array([0, 2, 3], dtype=np.int64)  # a, c, d; b and e removed
    stage_of = lift(g, kept, np.array([0, 2, 1], dtype=np.int64), np.array([1.0, 0.5, 1.0, 1.0, 0.5]))
    assert (stage_of[g.edge_src] <= stage_of[g.edge_dst]).all()
    assert stage_of[1] in (0, 1, 2) and stage_of[4] >= 1


def test_one_stage_is_proven_without_the_dp() -> None:
    problem = fx.throughput_problem().with_settings(stages=1, schedule="1f1b")  # the proof covers 1F1B
    plan = solve(problem, "exact", {"max_ideals": 3})
    assert plan.stats["partition"] == "dp" and plan.stats["bottleneck_optimal"] is True
    assert plan.status == "optimal"
