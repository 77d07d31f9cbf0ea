"""A stage keeps the tensors it receives: one rule (solvers.cost.memory.kept_bytes) in every solver and engine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from solvers.cost.memory import kept_bytes, plan_memory_bytes, stage_device_bytes
from solvers.exact.solver import stage_of_plan
from solvers.exact.stage_model import in_flight, partition_memory_bytes, stage_model
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.simulator import simulate
from solvers.simulator.schedule_engine import simulate_plan_schedule
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.strategies import examples, throughput_cases

ACT = 1e6  # bytes each op saves for backward
EDGE = 2e6  # bytes of every tensor passed along the chain


def _chain(n_ops: int = 8) -> OpGraph:
    nodes = [Node(f"op{i}", "aten.mm", 1.0, 2.0, act_bytes=ACT) for i in range(n_ops)]
    return OpGraph.build("chain", nodes, [Edge(f"op{i}", f"op{i + 1}", EDGE) for i in range(n_ops - 1)])


def _devices(n: int, memory_bytes: float) -> Topology:
    devices = [Device(f"d{i}", "GPU", "h0", memory_bytes) for i in range(n)]
    return Topology.from_links("line", devices, [Link(f"d{i}", f"d{i + 1}", 1e15, 0.0) for i in range(n - 1)])


def test_the_rule_on_scalars_and_arrays() -> None:
    assert kept_bytes(5.0, 2.0, False) == 7.0
    assert kept_bytes(5.0, 2.0, True) == 2.0
    np.testing.assert_array_equal(kept_bytes(np.array([1.0, 4.0]), np.array([0.0, 3.0]), False), [1.0, 7.0])
    assert stage_device_bytes(10.0, 7.0, 1.0, 3, 2, 3.0) == 40.0 + (21.0 + 1.0) / 2


@pytest.mark.parametrize("engine", ["stage", "op", "schedule"])
def test_every_engine_counts_a_stages_received_inputs(engine: str) -> None:
    """Stage 1 of a 5 | 3 split receives one tensor of EDGE bytes per micro-batch and keeps it."""
    problem = Problem(_chain(), _devices(2, 1e12), "throughput", ProblemSettings(micro_batches=(3,), schedule="1f1b"))
    plan = Plan((Stage(tuple(f"op{i}" for i in range(5)), ("d0",)), Stage(tuple(f"op{i}" for i in range(5, 8)), ("d1",))),
                micro_batches=3, schedule="1f1b", recompute=False)
    expected = {"d0": 2 * 5 * ACT, "d1": 1 * (3 * ACT + EDGE)}  # 1F1B: stage 0 keeps 2 micro-batches, stage 1 one
    if engine == "schedule":
        peaks = simulate_plan_schedule(problem, resolve_plan(problem, plan)).peak_memory_bytes
        assert peaks == pytest.approx(list(expected.values()), rel=1e-12)
    else:
        assert simulate(problem, plan, engine=engine).metrics["peak_memory_bytes"] == pytest.approx(expected, rel=1e-12)
    recomputed = plan.with_(recompute=True)
    assert plan_memory_bytes(problem, resolve_plan(problem, recomputed)) == pytest.approx([0.0, EDGE], abs=1e-6)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(throughput_cases())
def test_exacts_stage_model_equals_the_memory_model(case: tuple[Problem, Plan]) -> None:
    problem, plan = case
    plan = plan.with_(recompute=problem.settings.recomputes)
    rp = resolve_plan(problem, plan)
    n = rp.n_stages
    for replicas in {rp.replicas(s) for s in range(n)}:
        if any(rp.replicas(s) != replicas for s in range(n)):
            continue  # the exact solver's stages all have the same replica count
        got = partition_memory_bytes(stage_model(problem), stage_of_plan(problem, plan), n, replicas,
                                     in_flight(problem, n, plan.micro_batches))
        assert got == pytest.approx(plan_memory_bytes(problem, rp), rel=1e-9, abs=1e-6)


def _binding_problem() -> Problem:
    """Devices of 5 ops' activations, one micro-batch, two stages: the time-balanced 4 | 4 split fits
    only when a stage's received tensor (EDGE = 2 ops' activations) is forgotten; 5 | 3 is the only
    split that fits."""
    settings_ = ProblemSettings(micro_batches=(1,), schedule="1f1b", stages=2, replicas=1, recompute=False,
                                memory_headroom=0.0)
    return Problem(_chain(), _devices(2, 5 * ACT), "throughput", settings_)


def test_even_balances_time_only_and_says_its_split_does_not_fit() -> None:
    plan = solve(_binding_problem(), "even", time_limit_s=20)
    assert plan.status == "infeasible"
    assert "no even split fits the devices' memory" in plan.notes


@pytest.mark.parametrize("solver", ["parmesan", "rannc", "pipedream", "exact"])
def test_each_solver_keeps_received_inputs_when_memory_binds(solver: str) -> None:
    """The searching solvers find the one split that fits (:func:`_binding_problem`)."""
    problem = _binding_problem()
    plan = solve(problem, solver, time_limit_s=20)
    assert plan.status in ("feasible", "optimal"), (solver, plan.status, plan.notes)
    assert [len(s.ops) for s in plan.stages] == [5, 3], solver
    peaks = simulate(problem, plan).metrics["peak_memory_bytes"]
    assert max(peaks.values()) <= 5 * ACT
