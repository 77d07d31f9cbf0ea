"""Large graphs under a short limit: ``moirai`` (its warm start and instance building) and ``m-sct``
(its favourite-child program and m-ETF) end within the limit plus a second with a valid plan, or
refuse with the reason when the limit leaves no time for any (docs/benchmarks.md "Scaling")."""

from __future__ import annotations

import time
from functools import cache

import pytest

from solvers.generate import generate_graph, generate_topology
from solvers.model.problem import Problem, ProblemSettings
from solvers.moirai.gcof import identity_grouping
from solvers.moirai.instance import OutOfTime, build_instance
from solvers.moirai.warmstart import list_schedule
from solvers.simulator import simulate
from solvers.solving import solve
from solvers.validity import resolve_plan

LIMIT_S = 2.0
GRACE_S = 1.0
LAYERS = 833  # 12 ops per layer and 7 around them: 10,003 ops


@cache
def large_problem() -> Problem:
    """A forward pass of 10k ops on 4 x 8 H100: the warm start of ``moirai`` alone takes several
    times ``LIMIT_S`` to run to its end, so the limit cuts it."""
    graph = generate_graph("transformer", layers=LAYERS, hidden=256, heads=4, seq_len=128, micro_batch=1, vocab=8192)
    topology = generate_topology("hierarchical", nodes=4, gpus_per_node=8)
    return Problem(graph, topology, "latency", ProblemSettings(pass_="forward"))


@pytest.mark.parametrize("solver", ["moirai", "m-sct"])
def test_a_large_graph_is_planned_within_the_limit(solver: str) -> None:
    problem = large_problem()
    started = time.monotonic()
    plan = solve(problem, solver, time_limit_s=LIMIT_S)
    elapsed = time.monotonic() - started
    assert elapsed <= LIMIT_S + GRACE_S, f"{solver}: {elapsed:.2f} s for a {LIMIT_S} s limit"
    assert plan.status in ("optimal", "feasible") and plan.stages, plan.notes
    resolve_plan(problem, plan)
    assert plan.claimed_objective_s == pytest.approx(simulate(problem, plan).metrics["latency_s"], rel=1e-12)


def test_moirai_names_the_warm_start_steps_the_limit_left_out() -> None:
    plan = solve(large_problem(), "moirai", time_limit_s=LIMIT_S)
    skipped = plan.stats["warm_start_skipped"]
    assert skipped and all(isinstance(step, str) for step in skipped)
    assert not set(skipped) & set(plan.stats["warm_start"])  # a step left out has no makespan


def test_m_sct_stops_m_etf_before_the_limit_with_time_to_finish() -> None:
    plan = solve(large_problem(), "m-sct", time_limit_s=LIMIT_S)
    assert plan.stats["timed_out"] is True
    assert plan.stats["end_reserve_s"] > 0


def test_moirai_refuses_with_the_reason_when_the_limit_leaves_no_time() -> None:
    started = time.monotonic()
    plan = solve(large_problem(), "moirai", time_limit_s=0.05)
    assert time.monotonic() - started <= 0.05 + GRACE_S
    assert plan.status == "infeasible" and not plan.stages
    assert any("time limit" in note for note in plan.notes), plan.notes


def test_building_the_instance_stops_at_a_passed_deadline() -> None:
    problem = large_problem()
    with pytest.raises(OutOfTime, match="building the instance"):
        build_instance(problem, identity_grouping(problem.graph), deadline=time.monotonic() - 1.0)


def test_the_list_schedule_stops_at_a_passed_deadline() -> None:
    problem = large_problem()
    inst = build_instance(problem, identity_grouping(problem.graph))
    with pytest.raises(OutOfTime, match="list schedule"):
        list_schedule(inst, deadline=time.monotonic() - 1.0)
