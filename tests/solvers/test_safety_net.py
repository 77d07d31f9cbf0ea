"""Parmesan's safety net is composed above the families: the registry's ``parmesan`` runs the
baselines, a bare ``ParmesanSolver`` runs none."""

from __future__ import annotations

from solvers.base import Budget, no_progress
from solvers.parmesan.solver import ParmesanOptions, ParmesanSolver
from solvers.registry import get_solver_class
from solvers.safety_net import ParmesanWithSafetyNet, parmesan_baselines
from tests.solvers.parmesan.strategies import compute_only_problem, random_dag


def test_the_registry_serves_parmesan_with_its_safety_net() -> None:
    assert get_solver_class("parmesan") is ParmesanWithSafetyNet
    assert ParmesanWithSafetyNet.name == ParmesanSolver.name == "parmesan"


def test_the_baselines_are_even_and_both_pipedreams_unless_ops_are_pinned() -> None:
    problem = compute_only_problem(random_dag(3, 12), n_devices=4, n_stages=2)
    assert [name for name, _, _ in parmesan_baselines(problem)] == ["even", "pipedream-placer", "pipedream-pipedream"]
    pinned = problem.with_settings(pinned={problem.graph.nodes[0].id: 0})
    assert [name for name, _, _ in parmesan_baselines(pinned)] == ["even"]


def test_a_bare_parmesan_solver_has_an_empty_safety_net() -> None:
    problem = compute_only_problem(random_dag(3, 12), n_devices=4, n_stages=2)
    plan = ParmesanSolver().solve(problem, ParmesanOptions(), Budget(20), no_progress)
    assert plan.stats["partition_source"] == "parmesan"
    assert set(plan.stats["guard_objectives_s"]) == {"parmesan"}
