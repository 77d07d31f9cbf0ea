"""The stage-level and op-level engines are independent implementations: they must agree."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.simulator import simulate
from tests.strategies import examples, throughput_cases

_REL = 1e-9


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(throughput_cases())
def test_stage_and_op_engines_agree_on_throughput_plans(case: tuple[Problem, Plan]) -> None:
    problem, plan = case
    stage = simulate(problem, plan, engine="stage").metrics
    op = simulate(problem, plan, engine="op").metrics
    assert stage["engine"] == "stage" and op["engine"] == "op"
    for key in ("iteration_s", "latency_s", "objective_s", "bubble_fraction", "throughput_samples_per_s"):
        if stage[key] is None:  # throughput of a zero-time iteration
            assert op[key] is None
        else:
            assert op[key] == pytest.approx(stage[key], rel=_REL, abs=1e-12), key
    assert op["bytes_per_channel"].keys() == stage["bytes_per_channel"].keys()
    for channel, size in stage["bytes_per_channel"].items():
        assert op["bytes_per_channel"][channel] == pytest.approx(size, rel=_REL)
    for key in ("stage_times_s", "busy_s", "peak_memory_bytes", "lower_bound_s", "micro_batches", "schedule"):
        assert op[key] == stage[key], key


@settings(max_examples=examples(60), deadline=None)
@given(throughput_cases())
def test_timelines_agree(case: tuple[Problem, Plan]) -> None:
    problem, plan = case
    stage = simulate(problem, plan, engine="stage", timeline=True).timeline
    op = simulate(problem, plan, engine="op", timeline=True).timeline
    assert stage is not None and op is not None
    key = lambda e: (e.resource, e.task, round(e.start_s, 9))  # noqa: E731
    assert sorted(map(key, stage)) == sorted(map(key, op))


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(throughput_cases(max_ops=40, max_devices=8))
def test_engines_agree_on_larger_plans(case: tuple[Problem, Plan]) -> None:
    problem, plan = case
    plan = plan.with_(micro_batches=plan.micro_batches + 3)
    stage = simulate(problem, plan, engine="stage").metrics
    op = simulate(problem, plan, engine="op").metrics
    assert op["iteration_s"] == pytest.approx(stage["iteration_s"], rel=_REL)
    assert op["latency_s"] == pytest.approx(stage["latency_s"], rel=_REL)
