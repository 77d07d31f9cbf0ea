"""The solver contract (DESIGN §6, §10), run against every registered solver.

valid plan, honest status, claimed objective equal to the simulator's, time limit honoured,
deterministic for a seed, infeasible fixtures reported as ``infeasible``, and no throughput
solver behind ``even``'s trivial split on the same problem.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import orjson
import pytest

from solvers import registry
from solvers.model.plan import Plan, plan_from_document
from solvers.model.problem import Problem
from solvers.simulator import simulate
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.solvers import contract_fixtures as fx

# Solvers that run other solvers need more time than the rest for the same checks.
TIME_LIMIT_S = {"auto": 20.0}
GRACE_S = 1.0


def _cases() -> list[tuple[str, str]]:
    out = []
    for name in registry.names():
        for objective in registry.get_solver_class(name).objectives:
            out.append((name, objective))
    return out


CASES = _cases()


def _problems(objective: str) -> list[Problem]:
    if objective == "throughput":
        return [fx.throughput_problem()]
    return [fx.latency_problem("forward"), fx.latency_problem("training")]


@pytest.mark.parametrize(("solver", "objective"), CASES)
def test_plan_is_valid_and_claim_matches_simulator(solver: str, objective: str) -> None:
    for problem in _problems(objective):
        plan = solve(problem, solver, time_limit_s=TIME_LIMIT_S.get(solver, 10.0))
        assert plan.status in ("optimal", "feasible", "unknown"), plan.notes
        resolve_plan(problem, plan)  # raises if invalid
        simulated = simulate(problem, plan).metrics["objective_s"]
        assert plan.claimed_objective_s == pytest.approx(simulated, rel=1e-6)
        assert plan.metrics is not None and plan.metrics["objective_s"] == pytest.approx(simulated, rel=1e-9)
        if plan.lower_bound_s is not None:
            assert plan.lower_bound_s <= simulated * (1 + 1e-6)
        if plan.status == "optimal":
            assert plan.stats is not None
            named = plan.stats.get("optimal_objective")
            if named is not None:  # optimal for another metric than the objective: its bound is met
                bound = plan.stats["optimal_bound_s"]
                assert bound <= plan.metrics[named] * (1 + 1e-6)
                assert plan.metrics[named] <= bound * (1 + 1e-6)
        assert plan.solver == registry.get_solver_class(solver).name
        assert plan.solve_time_s is not None and plan.solve_time_s >= 0


@pytest.mark.parametrize(("solver", "objective"), CASES)
def test_deterministic_for_a_seed(solver: str, objective: str) -> None:
    problem = _problems(objective)[0]
    a = solve(problem, solver, time_limit_s=TIME_LIMIT_S.get(solver, 10.0))
    b = solve(problem, solver, time_limit_s=TIME_LIMIT_S.get(solver, 10.0))
    if solver == "auto":
        # a member cut short by its share of the budget may differ between runs; every member
        # that finished both times must find the same objective (whether it also proved it within
        # its share depends on the machine's load: `optimal` once and `feasible` once is allowed),
        # and when all finished, the choice must agree
        finished = [_finished_members(a), _finished_members(b)]
        for name in finished[0].keys() & finished[1].keys():
            assert finished[0][name][1] == finished[1][name][1], name
        if finished[0].keys() != finished[1].keys():
            return
    assert [s.to_dict() for s in a.stages] == [s.to_dict() for s in b.stages]
    assert a.claimed_objective_s == b.claimed_objective_s


def _finished_members(plan: Plan) -> dict[str, object]:
    """``auto``'s members that returned a plan: name -> (status, simulated objective)."""
    return {row["name"]: (row["status"], row["objective_s"]) for row in plan.stats["portfolio"] if not row["error"]}


@pytest.mark.parametrize(("solver", "objective"), CASES)
def test_infeasible_memory_is_a_status(solver: str, objective: str) -> None:
    problem = fx.infeasible_problem(objective)
    plan = solve(problem, solver, time_limit_s=TIME_LIMIT_S.get(solver, 10.0))
    assert plan.status == "infeasible"
    assert plan.metrics is None


@pytest.mark.parametrize(("solver", "objective"), CASES)
def test_time_limit_is_honoured(solver: str, objective: str) -> None:
    problem = fx.larger_problem(objective)
    limit_s = 2.0
    started = time.monotonic()
    plan = solve(problem, solver, time_limit_s=limit_s)
    elapsed = time.monotonic() - started
    # the limit covers the solve; finishing (simulation of the result) adds little
    assert plan.solve_time_s is not None and plan.solve_time_s <= limit_s + GRACE_S
    assert elapsed <= limit_s + 2 * GRACE_S
    assert plan.status in ("optimal", "feasible", "unknown", "infeasible")
    if plan.stages:
        resolve_plan(problem, plan)


@pytest.fixture
def cpu_hog() -> Iterator[None]:
    """A process busy-looping on a core beside the test for its whole length."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


# Cases skipped beside the hog while their solver overruns there, (solver, objective) -> why; none at present
# (moirai's latency warm start, once skipped here, now watches the deadline: docs/moirai.md).
OVERRUNS_UNDER_LOAD: dict[tuple[str, str], str] = {}


def _hog_cases() -> list[object]:
    return [pytest.param(name, objective, marks=[pytest.mark.skip(reason=OVERRUNS_UNDER_LOAD[(name, objective)])])
            if (name, objective) in OVERRUNS_UNDER_LOAD else pytest.param(name, objective) for name, objective in CASES]


@pytest.mark.slow
@pytest.mark.parametrize(("solver", "objective"), _hog_cases())
def test_time_limit_is_honoured_beside_a_cpu_hog(solver: str, objective: str, cpu_hog: None) -> None:
    """The whole ``solve`` call, finishing included, ends within its limit + 1 s with a core taken (issue 33).

    A first, untimed solve loads the modules the solver imports lazily (a MILP back-end, networkx):
    loading them is paid once per process, before a service's first request, and under this load it
    alone can take seconds.
    """
    problem = fx.larger_problem(objective)
    limit_s = 2.0
    solve(problem, solver, time_limit_s=limit_s)
    started = time.monotonic()
    plan = solve(problem, solver, time_limit_s=limit_s)
    elapsed = time.monotonic() - started
    assert elapsed <= limit_s + GRACE_S, (f"{solver} ({objective}): {elapsed:.2f} s for a {limit_s} s limit, "
                                          f"{plan.solve_time_s} s in the solver")
    assert plan.status in ("optimal", "feasible", "unknown", "infeasible")


def _degenerate_problems(objective: str) -> list[Problem]:
    one_device = fx.one_device_problem(objective)
    return [fx.one_stage_problem(), one_device] if objective == "throughput" else [one_device]


@pytest.mark.parametrize(("solver", "objective"), CASES)
def test_document_is_json_on_one_stage_and_one_device(solver: str, objective: str) -> None:
    """No stat, metric or number of a plan is NaN or infinite (a one-stage plan's ratio was once inf)."""
    for problem in _degenerate_problems(objective):
        plan = solve(problem, solver, time_limit_s=TIME_LIMIT_S.get(solver, 10.0))
        doc = plan.to_document()
        text = json.dumps(doc, allow_nan=False)
        assert orjson.loads(orjson.dumps(doc)) == json.loads(text)
        assert plan_from_document(json.loads(text)).to_document() == doc
        if plan.stages:
            resolve_plan(problem, plan)


THROUGHPUT_SOLVERS = [name for name, objective in CASES if objective == "throughput"]
EVEN_PROBLEMS = {"diamonds": fx.throughput_problem, "one-stage": fx.one_stage_problem,
                 "one-device": lambda: fx.one_device_problem("throughput"),
                 "larger": lambda: fx.larger_problem("throughput"), "demo": fx.demo_problem}
# Known shortfalls, each with its figure: the test fails as soon as one is fixed, so it is removed.
BEHIND_EVEN: dict[tuple[str, str], str] = {}


def _even_cases() -> list[object]:
    out: list[object] = []
    for solver in THROUGHPUT_SOLVERS:
        for name in EVEN_PROBLEMS:
            reason = BEHIND_EVEN.get((solver, name))
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            out.append(pytest.param(solver, name, id=f"{solver}-{name}", marks=marks))
    return out


@pytest.mark.parametrize(("solver", "problem_name"), _even_cases())
def test_throughput_solver_is_no_worse_than_even(solver: str, problem_name: str) -> None:
    """Every throughput solver's simulated objective is at most ``even``'s on the same problem."""
    problem = EVEN_PROBLEMS[problem_name]()
    even = solve(problem, "even")
    plan = solve(problem, solver, time_limit_s=TIME_LIMIT_S.get(solver, 10.0))
    assert even.metrics is not None and plan.metrics is not None, plan.notes
    assert plan.metrics["objective_s"] <= even.metrics["objective_s"] * (1 + 1e-9)
