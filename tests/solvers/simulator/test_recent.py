"""One simulation of the plan ``solve`` returns: the solver's own is reused (solvers.simulator.recent)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

import solvers.simulator as simulator_module
from solvers.generate import generate_graph, generate_topology
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.simulator import simulate
from solvers.solving import solve


def _problem() -> Problem:
    graph = generate_graph("random_dag", n_ops=300, width=6, edge_prob=0.2, max_skip=2, bytes_max=1e7, seed=3)
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=4)
    return Problem(graph, topology, "latency", ProblemSettings(pass_="training"))


def _count_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    runs = [0]
    real = simulator_module._simulate

    def counted(*args: Any) -> Any:
        runs[0] += 1
        return real(*args)

    monkeypatch.setattr(simulator_module, "_simulate", counted)
    return runs


def test_solve_simulates_the_returned_plan_once(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = _problem()
    simulator_module._RECENT.clear()
    runs = _count_runs(monkeypatch)
    plan = solve(problem, "celeritas", {"adaptive": False, "finalists": 1, "list_schedulers": False,
                                        "placement_order": "cpd-topo"})
    assert runs[0] == 1  # the finalist's claim; finish_plan reuses it
    assert plan.metrics is not None and plan.metrics["objective_s"] == plan.claimed_objective_s


def test_plan_and_metrics_as_without_reuse(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = _problem()
    simulator_module._RECENT.clear()
    reused = solve(problem, "celeritas")
    monkeypatch.setattr(simulator_module._RECENT, "get", lambda problem, key: None)
    fresh = solve(problem, "celeritas")
    assert reused.stages == fresh.stages and reused.order == fresh.order
    assert reused.claimed_objective_s == fresh.claimed_objective_s
    assert reused.metrics == fresh.metrics == simulate(problem, fresh, timeline=True).metrics


def test_only_the_same_plan_on_the_same_problem_is_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = _problem()
    ids = problem.graph.ids
    one = Plan((Stage(tuple(ids), ("gpu0",)),))
    other = Plan((Stage(tuple(ids), ("gpu1",)),))
    simulator_module._RECENT.clear()
    runs = _count_runs(monkeypatch)
    first = simulate(problem, one)
    again = simulate(problem, one.with_(solver="x", notes=("n",), stats={"a": 1}, status="feasible"))
    assert runs[0] == 1 and again.metrics == first.metrics
    again.metrics["objective_s"] = -1.0  # a caller's copy: the remembered result is untouched
    assert simulate(problem, one).metrics == first.metrics and runs[0] == 1
    simulate(problem, other)
    assert runs[0] == 2
    simulate(Problem(problem.graph, problem.topology, "latency", problem.settings), one)
    assert runs[0] == 2  # another problem object, the same graph, topology and settings: reused
    simulate(problem.with_settings(schedule="1f1b", max_tp=1), one)
    assert runs[0] == 2  # settings the simulator does not read (solve's GPipe / 1F1B copy): reused
    simulate(problem.with_settings(optimizer_bytes_per_param_byte=1.0), one)
    assert runs[0] == 3  # another setting: simulated afresh
    simulate(Problem(_problem().graph, problem.topology, "latency", problem.settings), one)
    assert runs[0] == 4  # another graph object (an equal one): simulated afresh
    simulate(problem, one, timeline=True)
    assert runs[0] == 5  # a timeline is never remembered


def test_a_dropped_problem_drops_its_results() -> None:
    problem = _problem()
    simulator_module._RECENT.clear()
    simulate(problem, Plan((Stage(tuple(problem.graph.ids), ("gpu0",)),)))
    assert len(simulator_module._RECENT) == 1
    del problem
    gc.collect()
    assert len(simulator_module._RECENT) == 0


def test_the_key_holds_every_field_the_simulator_reads() -> None:
    from solvers.simulator.recent import plan_key

    base = Plan((Stage(("a", "b"), ("gpu0", "gpu1")),), micro_batches=4)
    changed = [base.with_(stages=(Stage(("a", "b"), ("gpu0", "gpu1"), tp=2),)), base.with_(sequence_parallel=True),
               base.with_(micro_batches=8), base.with_(schedule="gpipe"), base.with_(recompute=True),
               base.with_(order={"gpu0": ("b", "a")})]
    keys = [plan_key(p) for p in [base, *changed]]  # compared by equality (an order is a dict)
    assert all(a != b for i, a in enumerate(keys) for b in keys[i + 1:])
    assert plan_key(base) == plan_key(base.with_(solver="x", notes=("n",), stats={"k": 1}))
