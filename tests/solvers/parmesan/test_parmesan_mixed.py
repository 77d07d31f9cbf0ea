"""``parmesan`` with a tensor-parallel degree per stage: the DP's device dimension, the consecutive groups."""

from __future__ import annotations

import time

import pytest

from bench.bench_tp_search import megatron_gpt
from solvers import generate_topology, solve
from solvers.base import Budget
from solvers.model.plan import Plan
from solvers.model.problem import Problem, ProblemSettings
from solvers.parmesan.solver import ParmesanOptions, ParmesanSolver
from solvers.runnable import idle_stages, runnable_notes
from solvers.simulator import simulate
from solvers.validity import resolve_plan
from tests.solvers.partition.test_tp_search import hosts

OWN = {"baseline_guard": False}  # Parmesan's own flow, without the safety net's baselines


def _six_gpus(**settings: object) -> Problem:
    """Six GPUs of one host, micro-batches of 4 rows (tests/solvers/baselines/test_pipedream_tp.py)."""
    return Problem(megatron_gpt(8), hosts(6, 1), "throughput",
                   ProblemSettings(micro_batches=(4,), schedule="1f1b", **settings))  # type: ignore[arg-type]


def test_stages_of_different_degrees_beat_every_single_degree_plan() -> None:
    """One degree gives 3 groups of 2 (3 replicas do not split 4 rows) or 6 single devices; the DP with a
    degree per stage puts 2 replicas of a stage at degree 1 before 2 replicas of a stage at degree 2."""
    mixed = solve(_six_gpus(), "parmesan", OWN, time_limit_s=30)
    assert mixed.stats["mode"] == "tp per stage" and len({s.tp for s in mixed.stages}) == 2
    assert mixed.stats["tp"] == [s.tp for s in mixed.stages] and mixed.stats["partition_source"] == "parmesan"
    assert sum(len(s.devices) for s in mixed.stages) == 6
    singles = [solve(_six_gpus(**kw), "parmesan", OWN, time_limit_s=30)
               for kw in ({"max_tp": 1}, {"tp": 2}, {"tp": 4})]
    for single in singles:
        assert len({s.tp for s in single.stages}) == 1
        assert mixed.metrics["objective_s"] < 0.95 * single.metrics["objective_s"]
    # the registered solver (with its safety net) returns a plan at least as fast
    served = solve(_six_gpus(), "parmesan", time_limit_s=30)
    assert served.metrics["objective_s"] <= mixed.metrics["objective_s"] * (1 + 1e-12)


def test_the_mixed_plan_runs_and_its_claim_is_the_simulators() -> None:
    problem = _six_gpus()
    plan = solve(problem, "parmesan", OWN, time_limit_s=30)
    assert plan.stats["mode"] == "tp per stage" and plan.status == "feasible"
    resolve_plan(problem, plan)  # valid: devices, degrees, replica rows, memory
    assert not idle_stages(problem.graph, plan) and not runnable_notes(problem.graph, plan)
    assert plan.claimed_objective_s == pytest.approx(simulate(problem, plan).metrics["objective_s"], rel=1e-12)
    for stage in plan.stages:  # each replica's group of tp devices sits on one host
        assert len(stage.devices) % stage.tp == 0


def _mixed_searched(problem: Problem) -> bool:
    return ParmesanSolver._solve_mixed(problem, ParmesanOptions(), Budget(None), {}) is not None


def test_the_mixed_search_runs_only_over_several_unpinned_free_degrees() -> None:
    assert _mixed_searched(_six_gpus())
    assert not _mixed_searched(_six_gpus(max_tp=1))  # degree 1 only: no change
    assert not _mixed_searched(_six_gpus(tp=2))  # a fixed degree
    first = megatron_gpt(8).nodes[0].id
    assert not _mixed_searched(_six_gpus(pinned={first: 0}))
    plan = solve(_six_gpus(max_tp=1), "parmesan", OWN, time_limit_s=30)
    assert "mode" not in plan.stats and all(s.tp == 1 for s in plan.stages)


def test_the_time_limit_holds_with_the_mixed_search() -> None:
    """A 24-layer GPT on 4 x 8 GPUs, degrees 1-8: the whole solve within its limit + 1 s (after a first,
    untimed solve has loaded the modules imported on first use, as in tests/solvers/test_contract.py)."""
    topo = generate_topology("hierarchical", nodes=4, gpus_per_node=8, device="H100", intra_bandwidth_GBps=300.0,
                             inter_bandwidth_GBps=25.0)
    problem = Problem(megatron_gpt(24), topo, settings=ProblemSettings(micro_batches=(16,)))
    limit_s = 2.0
    solve(problem, "parmesan", time_limit_s=limit_s)
    started = time.monotonic()
    plan: Plan = solve(problem, "parmesan", time_limit_s=limit_s)
    assert time.monotonic() - started <= limit_s + 1.0
    assert plan.stages and plan.status in ("feasible", "optimal")
