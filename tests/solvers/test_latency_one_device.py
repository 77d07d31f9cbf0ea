"""A latency plan puts each op on one device, so what a latency solver proves holds for every plan
the problem admits (docs/python.md, docs/formats.md "Validation against a problem").

The simulator used to accept a latency stage of several devices as replicas splitting the batch:
a plan no solver made and the launcher could not run, which beat the bounds and ``optimal``
statuses the one-device-per-op models prove.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solvers import solve
from solvers.model.errors import InvalidPlan
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.simulator import simulate
from tests.strategies import HUGE_MEMORY_BYTES, examples, latency_cases


def _chain_on_two_devices(pass_: str = "forward") -> Problem:
    """Three 1 s ops in a chain, a batch of 2 rows, two equal devices: the best plan runs the chain
    on one device in 3 s; two replicas splitting the batch would have scored 1.5 s."""
    nodes = [Node(f"op{i}", "x", 1.0, 2.0, param_bytes=1e3, act_bytes=1e3) for i in range(3)]
    edges = [Edge("op0", "op1", 1e6), Edge("op1", "op2", 1e6)]
    graph = OpGraph.build("chain", nodes, edges, profiled_batch_size=2)
    devices = [Device(f"d{i}", "GPU", "h0", HUGE_MEMORY_BYTES) for i in range(2)]
    topology = Topology.from_links("pair", devices, [Link("d0", "d1", 1e9, 1e-5)])
    return Problem(graph, topology, "latency", ProblemSettings(pass_=pass_))  # type: ignore[arg-type]


def _best_one_device_plan_s(problem: Problem) -> float:
    """Brute force over every placement of the ops on single devices, each simulated."""
    ids, devices = problem.graph.ids, [d.id for d in problem.topology.devices]
    best = float("inf")
    for owner in itertools.product(range(len(devices)), repeat=len(ids)):
        stages = tuple(Stage(tuple(op for op, o in zip(ids, owner, strict=True) if o == d), (devices[d],))
                       for d in sorted(set(owner)))
        best = min(best, float(simulate(problem, Plan(stages)).metrics["objective_s"]))
    return best


@pytest.mark.parametrize("pass_", ["forward", "training"])
def test_replicated_stage_is_refused_and_the_proof_covers_every_admitted_plan(pass_: str) -> None:
    problem = _chain_on_two_devices(pass_)
    replicated = Plan((Stage(tuple(problem.graph.ids), ("d0", "d1")),))
    with pytest.raises(InvalidPlan) as info:
        simulate(problem, replicated)
    assert info.value.field == "stages[0].devices"
    assert "stage 0 runs on 2 devices ('d0', 'd1') as replicas" in info.value.message
    best_s = _best_one_device_plan_s(problem)
    assert best_s == pytest.approx(3.0 if pass_ == "forward" else 9.0)
    for solver in ("moirai", "auto"):
        plan = solve(problem, solver, time_limit_s=30)
        assert plan.status == "optimal", (solver, plan.notes)
        assert plan.metrics is not None and plan.metrics["objective_s"] == pytest.approx(best_s, rel=1e-9)
        assert plan.lower_bound_s is not None and plan.lower_bound_s <= best_s * (1 + 1e-9), solver
    # the simulator's own bound is the chain on its fastest device: every admitted plan's time
    assert simulate(problem, plan).metrics["lower_bound_s"] == pytest.approx(best_s, rel=1e-9)


def _widened(plan: Plan, stage: int, device: str) -> tuple[Plan, int]:
    """``plan`` with ``device`` added to stage ``stage`` (the ops of the stage that ran on it move
    along), and the new position of that stage."""
    donor = next((s for s, st_ in enumerate(plan.stages) if device in st_.devices), None)
    ops = plan.stages[stage].ops + (plan.stages[donor].ops if donor is not None else ())
    grown = Stage(ops, (*plan.stages[stage].devices, device))
    stages = [grown if s == stage else st_ for s, st_ in enumerate(plan.stages) if s != donor]
    return plan.with_(stages=tuple(stages)), stages.index(grown)


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=latency_cases(max_ops=6, max_devices=3), data=st.data())
def test_reported_bounds_hold_for_every_admitted_plan_and_groups_are_refused(
        case: tuple[Problem, Plan], data: st.DataObject) -> None:
    problem, plan = case
    objective_s = float(simulate(problem, plan).metrics["objective_s"])
    solved = solve(problem, "moirai", {"solve_time_limit_s": 1.0}, time_limit_s=3.0)
    if solved.lower_bound_s is not None:
        assert solved.lower_bound_s <= objective_s * (1 + 1e-9) + 1e-12
    assert solved.metrics is not None and solved.metrics["lower_bound_s"] <= objective_s * (1 + 1e-9) + 1e-12
    if problem.topology.n_devices < 2:
        return
    stage = data.draw(st.integers(0, len(plan.stages) - 1), label="stage")
    others = [d.id for d in problem.topology.devices if d.id not in plan.stages[stage].devices]
    wide, at = _widened(plan, stage, data.draw(st.sampled_from(others), label="device"))
    with pytest.raises(InvalidPlan) as info:
        simulate(problem, wide)
    assert info.value.field == f"stages[{at}].devices" and "a latency plan places each op on one device" in (
        info.value.message)
