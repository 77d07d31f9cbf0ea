"""Parmesan's safety net and MOIRAI's warm start are composed above the families: the registry's
``parmesan`` runs the baselines, a bare ``ParmesanSolver`` runs none; the registry's ``moirai``
warm-starts from the list schedulers, a bare ``MoiraiSolver`` from its own schedules only."""

from __future__ import annotations

from solvers.base import Budget, no_progress
from solvers.celeritas.solver import CeleritasSolver
from solvers.composed.celeritas import CeleritasWithListSchedulers
from solvers.composed.moirai import MoiraiWithWarmStart
from solvers.composed.parmesan import ParmesanWithSafetyNet, parmesan_baselines
from solvers.moirai.options import MoiraiOptions
from solvers.moirai.solver import MoiraiSolver
from solvers.parmesan.solver import ParmesanOptions, ParmesanSolver
from solvers.registry import get_solver_class
from tests.solvers.moirai.tiny import tiny_problem
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
    assert set(plan.stats["guard_keys_s"]) == {"parmesan"}


def test_the_registry_serves_moirai_with_its_warm_start() -> None:
    assert get_solver_class("moirai") is MoiraiWithWarmStart
    assert MoiraiWithWarmStart.name == MoiraiSolver.name == "moirai"
    assert [h.name for h in MoiraiWithWarmStart().warm_start] == ["heft", "cpop", "m-etf", "m-sct", "m-topo",
                                                                  "celeritas"]
    # the list schedulers as registered; Celeritas bare, without the list schedulers the warm start runs itself
    assert all(get_solver_class(h.name) is h.solver for h in MoiraiWithWarmStart().warm_start if h.name != "celeritas")
    celeritas = next(h.solver for h in MoiraiWithWarmStart().warm_start if h.name == "celeritas")
    assert celeritas is CeleritasSolver and get_solver_class("celeritas") is CeleritasWithListSchedulers
    assert CeleritasSolver().list_schedulers == ()
    assert [name for name, _ in CeleritasWithListSchedulers().list_schedulers] == ["heft", "cpop", "m-etf", "m-sct",
                                                                                     "m-topo"]


def test_a_bare_moirai_solver_warm_starts_from_its_own_schedules_only() -> None:
    problem = tiny_problem(0, n_ops=5, n_dev=2)
    plan = MoiraiSolver().solve(problem, MoiraiOptions(solve_time_limit_s=1.0), Budget(5), no_progress)
    assert set(plan.stats["warm_start"]) <= {"list schedule", "single device 0", "single device 1"}
    assert "list schedule" in plan.stats["warm_start"]
