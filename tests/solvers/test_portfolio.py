"""``auto``: every applicable solver within the budget; best simulated plan, best bound, summary."""

from __future__ import annotations

import time

import pytest

from solvers import registry
from solvers.model.errors import SolverFailure
from solvers.portfolio import FINISH_CPU_S_PER_OP, _choose, finish_reserve_s, portfolio_names
from solvers.simulator import simulate
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.solvers import contract_fixtures as fx


def test_portfolio_grows_with_the_registry() -> None:
    problem = fx.latency_problem("forward")
    names = portfolio_names(problem)
    expected = [n for n in registry.names() if n != "auto" and "latency" in registry.get_solver_class(n).objectives]
    assert names == expected and {"celeritas", "heft", "m-sct"} <= set(names)
    assert portfolio_names(problem, ("HEFT", "m-etf")) == ["heft", "m-etf"]


@pytest.mark.parametrize("pass_", ["forward", "training"])
def test_auto_returns_the_best_plan_of_the_portfolio(pass_: str) -> None:
    problem = fx.latency_problem(pass_)
    plan = solve(problem, "auto", {"solvers": ["celeritas", "heft", "m-etf", "m-topo"]}, time_limit_s=20.0)
    resolve_plan(problem, plan)
    simulated = simulate(problem, plan).metrics["objective_s"]
    assert plan.claimed_objective_s == pytest.approx(simulated, rel=1e-9)
    rows = plan.stats["portfolio"]
    assert [r["name"] for r in rows] == ["celeritas", "heft", "m-etf", "m-topo"]
    assert all(r["error"] is None and r["status"] == "feasible" for r in rows)
    assert simulated == pytest.approx(min(r["objective_s"] for r in rows), rel=1e-12)
    assert plan.stats["chosen"] in {r["name"] for r in rows}
    assert plan.lower_bound_s is not None and plan.lower_bound_s <= simulated


def test_auto_answers_throughput_and_honours_a_short_limit() -> None:
    problem = fx.larger_problem("throughput", 30)
    started = time.monotonic()
    plan = solve(problem, "auto", time_limit_s=2.0)
    assert time.monotonic() - started < 3.5
    assert plan.solve_time_s is not None and plan.solve_time_s <= 3.0
    if plan.stages:
        resolve_plan(problem, plan)
    assert {r["name"] for r in plan.stats["portfolio"]} == set(portfolio_names(problem))


def test_choose_reports_errors_and_infeasible() -> None:
    problem = fx.infeasible_problem("latency")
    infeasible = solve(problem, "heft").to_document()
    plan = _choose(problem, ["heft", "x"], {"heft": ("ok", infeasible, 0.1), "x": ("error", "SolverFailure: boom", 0.2)})
    assert plan.status == "infeasible"
    assert plan.stats["portfolio"][1]["error"] == "SolverFailure: boom"
    with pytest.raises(SolverFailure, match="boom"):
        _choose(problem, ["x"], {"x": ("error", "SolverFailure: boom", 0.2)})


def test_a_bound_that_meets_the_objective_proves_optimality() -> None:
    problem = fx.latency_problem("forward")
    good = solve(problem, "heft").to_document()
    objective = good["metrics"]["objective_s"]
    proved = {**good, "lower_bound_s": objective, "solver": "y"}
    plan = _choose(problem, ["heft", "y"], {"heft": ("ok", good, 0.1), "y": ("ok", proved, 0.1)})
    assert plan.status == "optimal" and plan.lower_bound_s == objective


def test_an_optimal_for_another_metric_is_not_the_portfolios() -> None:
    problem = fx.throughput_problem()
    doc = solve(problem, "even").to_document()
    other = {**doc, "status": "optimal", "lower_bound_s": None,
             "stats": {"optimal_objective": "bottleneck_stage_s",
                       "optimal_bound_s": doc["metrics"]["bottleneck_stage_s"]}}
    plan = _choose(problem, ["exact"], {"exact": ("ok", other, 0.1)})
    assert plan.status == "feasible"


def test_sequential_mode_inside_a_daemon_process() -> None:
    """A daemonic process may not fork: the members then run in-process, one after the other."""
    from solvers.base import no_progress
    from solvers.portfolio import AutoSolver

    problem = fx.latency_problem("forward")
    deadline = time.monotonic() + 10.0
    results = AutoSolver._sequential(problem, ["heft", "m-topo"], deadline, no_progress)
    assert [results[n][0] for n in ("heft", "m-topo")] == ["ok", "ok"]
    plan = _choose(problem, ["heft", "m-topo"], results)
    assert plan.stats["chosen"] in ("heft", "m-topo")
    late = AutoSolver._sequential(problem, ["heft"], time.monotonic(), no_progress)
    assert late["heft"][:2] == ("error", "not started: no time left")


def test_auto_includes_exact_and_breaks_objective_ties_by_the_bottleneck() -> None:
    """Compute-only, one micro-batch: every split has the same iteration time; the oracle's
    bottleneck stage is the smallest, so ``auto`` keeps a plan with that bottleneck."""
    from tests.solvers.parmesan.strategies import compute_only_problem, random_dag

    problem = compute_only_problem(random_dag(1, 8, 0.6), n_devices=3, n_stages=3)  # even: 1.3 % behind
    assert "exact" in portfolio_names(problem)
    plan = solve(problem, "auto", {"solvers": ["even", "exact"]}, time_limit_s=20.0)
    exact = solve(problem, "exact")
    assert plan.metrics is not None and exact.metrics is not None
    even = solve(problem, "even")
    assert even.metrics is not None and even.metrics["objective_s"] == pytest.approx(exact.metrics["objective_s"])
    assert even.metrics["bottleneck_stage_s"] > exact.metrics["bottleneck_stage_s"] * 1.01
    assert plan.metrics["bottleneck_stage_s"] == pytest.approx(exact.metrics["bottleneck_stage_s"], rel=1e-12)
    assert plan.stats["chosen"] == "exact"


@pytest.mark.parametrize(("objective", "fallback"), [("throughput", "even"), ("latency", "single")])
def test_auto_falls_back_to_a_linear_baseline_when_no_member_answers_in_time(objective: str, fallback: str) -> None:
    """A budget too short for any member to start (the margin kept for choosing eats it all):
    the objective's linear-time baseline answers instead of an error."""
    problem = fx.throughput_problem() if objective == "throughput" else fx.latency_problem()
    plan = solve(problem, "auto", time_limit_s=0.36)
    assert plan.stats["chosen"] == fallback
    assert any("fallback" in note for note in plan.notes)
    resolve_plan(problem, plan)
    assert plan.claimed_objective_s == pytest.approx(simulate(problem, plan).metrics["objective_s"])
    errors = {row["name"]: row["error"] for row in plan.stats["portfolio"]}
    assert errors[fallback] is None and all(errors[n] for n in errors if n != fallback)


def test_choose_ranks_per_sample_and_keeps_each_bound_to_its_micro_batch_count() -> None:
    problem = fx.throughput_problem().with_settings(micro_batches=(1, 8))
    few = solve(problem.with_settings(micro_batches=(1,)), "even").to_document()
    many = solve(problem.with_settings(micro_batches=(8,)), "even").to_document()
    assert few["metrics"]["iteration_s"] < many["metrics"]["iteration_s"]
    assert many["metrics"]["time_per_sample_s"] < few["metrics"]["time_per_sample_s"]
    # a bound for one micro-batch is no bound for eight; and with two candidates a plan that meets
    # its own bound is not proven optimal for the problem
    few = {**few, "lower_bound_s": few["metrics"]["iteration_s"]}
    many = {**many, "lower_bound_s": many["metrics"]["iteration_s"]}
    plan = _choose(problem, ["a", "b"], {"a": ("ok", few, 0.1), "b": ("ok", many, 0.1)})
    assert plan.stats["chosen"] == "b" and plan.micro_batches == 8
    assert plan.lower_bound_s == many["lower_bound_s"] and plan.status == "feasible"
    assert [r["key_s"] for r in plan.stats["portfolio"]] == [few["metrics"]["time_per_sample_s"],
                                                             many["metrics"]["time_per_sample_s"]]


def test_the_finish_reserve_grows_with_the_ops_and_the_load_and_leaves_the_members_half() -> None:
    idle = finish_reserve_s(200_000, 60.0, load=0.5, cpus=2)
    assert idle == pytest.approx(200_000 * FINISH_CPU_S_PER_OP)
    assert finish_reserve_s(1_000, 60.0, load=0.5, cpus=2) == pytest.approx(idle / 200)
    assert finish_reserve_s(200_000, 60.0, load=8.0, cpus=2) == pytest.approx(4 * idle)
    assert finish_reserve_s(200_000, 60.0, load=30.0, cpus=2) == 30.0  # half the limit at most


def test_auto_records_the_reserve_it_kept_back() -> None:
    problem = fx.throughput_problem()
    plan = solve(problem, "auto", {"solvers": ["even"]}, time_limit_s=5)
    assert 0.0 < plan.stats["finish_reserve_s"] <= 2.5


def test_a_members_unknown_is_a_feasible_plan_of_the_portfolio() -> None:
    """exact answers ``unknown`` past its ideal budget (even's split, no proof); when auto keeps
    that plan, it is a simulated, runnable plan like any other member's ``feasible`` one."""
    problem = fx.throughput_problem()
    doc = solve(problem, "even").to_document()
    unproven = {**doc, "status": "unknown", "lower_bound_s": None, "solver": "exact"}
    plan = _choose(problem, ["exact"], {"exact": ("ok", unproven, 0.1)})
    assert plan.status == "feasible"
    assert plan.stats["portfolio"][0]["status"] == "unknown"  # the member's own answer stays in its row


def test_auto_prefers_a_feasible_plan_to_a_faster_infeasible_one() -> None:
    """A tiny BERT on two CPUs: parmesan's plan put only constants in a stage (infeasible: the
    runtime cannot run it) and simulated a hair faster than even's feasible one; auto kept it."""
    problem = fx.throughput_problem()
    doc = solve(problem, "even").to_document()
    fast = {**doc, "status": "infeasible", "solver": "parmesan",
            "metrics": {**doc["metrics"], **{k: v * 0.9 for k, v in doc["metrics"].items()
                                             if k in ("objective_s", "iteration_s", "time_per_sample_s")}}}
    plan = _choose(problem, ["even", "parmesan"], {"even": ("ok", doc, 0.1), "parmesan": ("ok", fast, 0.1)})
    assert plan.stats["chosen"] == "even" and plan.status != "infeasible"
    only = _choose(problem, ["parmesan"], {"parmesan": ("ok", fast, 0.1)})
    assert only.stats["chosen"] == "parmesan" and only.status == "infeasible"  # nothing better: still reported
