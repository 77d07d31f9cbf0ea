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
from solvers.generate import generate_topology
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.runnable import computing_ops, idle_stages
from solvers.simulator import simulate
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.solvers import contract_fixtures as fx
from tests.strategies import dag_graphs, examples, partition_problems


def _contiguous_partitions(g: OpGraph, n_stages: int) -> list[np.ndarray]:
    """Every op -> stage map whose edges never go back and whose stages all hold an op that computes
    (with one stage: are non-empty)."""
    out = []
    computes = computing_ops(g) if n_stages > 1 else np.ones(g.n_ops, dtype=bool)
    for labels in itertools.product(range(n_stages), repeat=g.n_ops):
        stage_of = np.array(labels, dtype=np.int64)
        if len(set(stage_of[computes].tolist())) == n_stages and (stage_of[g.edge_src] <= stage_of[g.edge_dst]).all():
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
    _check_against_brute_force(problem)


@settings(max_examples=examples(60), deadline=None)
@given(partition_problems(idle_ops=True))
def test_dp_equals_brute_force_over_partitions_whose_every_stage_computes(problem: Problem) -> None:
    """With inputs and constants in the graph, the bound is over the partitions the DP may return: those
    whose every stage holds an op that computes, and the plan is one of them."""
    plan = _check_against_brute_force(problem)
    assert idle_stages(problem.graph, plan) == []


def _check_against_brute_force(problem: Problem) -> Plan:
    expected = _brute_force_bottleneck_s(problem)
    plan = solve(problem, "exact")
    if not np.isfinite(expected):
        assert plan.status == "infeasible"
        return plan
    assert plan.status in ("feasible", "optimal")
    assert plan.stats["exact"] is True
    assert plan.stats["bottleneck_lower_bound_s"] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    resolve_plan(problem, plan)
    assert plan.claimed_objective_s == pytest.approx(simulate(problem, plan).metrics["objective_s"], rel=1e-9)
    # the DP's stage time never exceeds the simulator's: its optimum bounds the plan's bottleneck
    assert plan.stats["simulated_bottleneck_s"] >= expected * (1 - 1e-9)
    return plan


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


def _mask_late_graph() -> OpGraph:
    """A model input, a constant (a mask built from shapes) read only by the last op, an embedding and a
    head: the stage of least bottleneck holds the constant alone (tests/solvers/parmesan's graph)."""
    nodes = [Node("x", "input", 0.0), Node("mask", "aten.ones.default", 1e-3, constant=True),
             Node("embed", "aten.embedding.default", 1e-3, 1e-3, param_bytes=1e9),
             Node("head", "aten.linear.default", 1e-3, 1e-3, param_bytes=1e9)]
    edges = [Edge("x", "embed", 64.0), Edge("mask", "head", 64.0), Edge("embed", "head", 1e9)]
    return OpGraph.build("mask-late", nodes, edges, 4)


def _mask_late_problem(stages: int) -> Problem:
    return Problem(_mask_late_graph(), generate_topology("hierarchical", nodes=1, gpus_per_node=4),
                   settings=ProblemSettings(micro_batches=(2,), stages=stages, replicas=1, schedule="1f1b"))


def test_no_stage_holds_only_inputs_and_constants() -> None:
    """The DP's best bottleneck put the constant alone in stage 0 and the plan came back infeasible
    (solvers.runnable); a stage without compute is not a candidate, and the proof is over the rest."""
    problem = _mask_late_problem(2)
    plan = solve(problem, "exact")
    assert plan.status == "optimal", plan.notes
    assert idle_stages(problem.graph, plan) == []
    assert plan.stats["bottleneck_optimal"] is True
    assert any("whose every stage computes" in n for n in plan.notes)
    assert plan.stats["bottleneck_lower_bound_s"] == pytest.approx(_brute_force_bottleneck_s(problem), rel=1e-9)


@pytest.mark.parametrize("stages", [3, 4])
def test_more_stages_than_ops_that_compute_is_infeasible_and_says_why(stages: int) -> None:
    plan = solve(_mask_late_problem(stages), "exact")
    assert plan.status == "infeasible" and not plan.stages
    assert plan.stats["idle_stage_shapes"] == [f"{stages}x1"]
    assert f"the graph has 2 ops that compute (not inputs or constants), fewer than the stages of {stages}x1" \
        in plan.notes[0]


def test_the_fallback_split_gives_every_stage_work() -> None:
    """Past the ideal budget each (S, R) falls back to even's split.  Its plain cut here takes the input and the
    mask off alone (the split of its heaviest chunk); even's split is then the one over units that each end
    with an op that computes (:func:`solvers.partition.even.runnable_split`), for the fallback and the DP's
    warm start alike, so the answer stays a runnable plan."""
    nodes = [Node("x", "input", 0.0), Node("mask", "aten.ones.default", 0.0, constant=True),
             Node("h1", "aten.linear.default", 5.0, 5.0), Node("h2", "aten.linear.default", 2.5, 2.5),
             Node("h3", "aten.linear.default", 1e-3, 1e-3)]
    edges = [Edge("x", "h1", 64.0), Edge("h1", "h2", 64.0), Edge("h2", "h3", 64.0), Edge("mask", "h3", 64.0)]
    problem = Problem(OpGraph.build("mask-late", nodes, edges, 4),
                      generate_topology("hierarchical", nodes=1, gpus_per_node=4),
                      settings=ProblemSettings(micro_batches=(2,), stages=3, replicas=1, schedule="1f1b"))
    even = solve(problem, "even")
    assert idle_stages(problem.graph, even) == [] and even.status == "feasible"
    plan = solve(problem, "exact", {"max_ideals": 2})
    assert plan.status == "unknown" and plan.stats["partition"] == "even", plan.notes
    assert len(plan.stages) == 3 and idle_stages(problem.graph, plan) == []
    resolve_plan(problem, plan)
    assert solve(problem, "exact").status == "optimal"  # the DP finds the runnable split


def test_relaxation_keeps_every_stage_computing_and_its_bound_honest() -> None:
    """Constant chains (position ids) beside a heavy chain: the relaxation drops them, the DP's stages
    each hold a heavy op, and the bound equals the whole graph's DP over the same candidates."""
    problem = _chains_problem(4, 3, 1e-9, heavy=6, stages=3)
    constants = [Node(n.id, n.op, n.fwd_s, n.bwd_s, constant=n.id.startswith("c")) for n in problem.graph.nodes]
    graph = OpGraph.build("chains", constants, list(problem.graph.edges))
    problem = Problem(graph, problem.topology, "throughput", problem.settings)
    whole = solve(problem, "exact", {"max_ideals": 10**6})
    plan = solve(problem, "exact", {"max_ideals": 100})
    assert whole.stats["relaxed_ops"] is None and plan.stats["relaxed_ops"] == 12
    assert idle_stages(graph, plan) == [] and idle_stages(graph, whole) == []
    assert plan.stats["bottleneck_lower_bound_s"] == pytest.approx(whole.stats["bottleneck_lower_bound_s"], rel=1e-12)
    assert plan.status == "optimal" and plan.stats["bottleneck_optimal"] is True


def test_default_time_limit_applies_when_none_is_given() -> None:
    """Without a limit from the call or the problem, exact ran unbounded (110 s on a tiny BERT); its
    default (auto's, 60 s) holds, and when it runs out the best plan so far comes back as ``unknown``."""
    assert registry.get_solver_class("exact").options_type().default_time_limit_s == 60.0  # type: ignore[attr-defined]
    problem = _chains_problem(12, 6, 1.0)  # 7^12 ideals: the enumeration alone outlasts the limit
    assert problem.settings.time_limit_s is None
    started = time.monotonic()
    plan = solve(problem, "exact", {"max_ideals": 10**9, "default_time_limit_s": 0.3})
    assert time.monotonic() - started <= 0.3 + 1.0
    assert plan.status == "unknown" and plan.stats["partition"] == "even" and plan.stats["exact"] is False
    assert any("time: the 0.3 s limit ran out while enumerating the ideals" in n for n in plan.notes)
    resolve_plan(problem, plan)
    # a limit from the call or the problem wins over the default
    given = solve(problem, "exact", {"max_ideals": 10**9, "default_time_limit_s": 1000.0}, time_limit_s=0.3)
    assert any("time: the 0.3 s limit ran out" in n for n in given.notes)


def test_time_running_out_in_the_pairs_keeps_the_best_plan_and_no_proof() -> None:
    """The limit runs out while the DP's pairs are built: that (S, R) is answered by even's split,
    the plan is valid, and the status is ``unknown`` with the reason, never ``optimal``."""
    problem = _chains_problem(3, 5, 0.01, heavy=20, stages=4)
    full = solve(problem, "exact", {"max_ideals": 10**6}, time_limit_s=60)
    assert full.status == "optimal" and full.stats["exact"] is True
    plan = solve(problem, "exact", {"max_ideals": 10**6}, time_limit_s=full.stats["ideals_time_s"] + 1e-3)
    assert plan.status == "unknown" and plan.stats["exact"] is False
    assert any(n.startswith("time: the ") for n in plan.notes)
    resolve_plan(problem, plan)
