"""The action-list simulator: equal to the stage-level engine for GPipe/1F1B, closed forms for the others."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings

from solvers.cost.memory import plan_memory_bytes
from solvers.model.errors import InvalidPlan, InvalidProblem
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.schedules import PIPELINE_SCHEDULES, Action, PipelineSchedule, build_schedule
from solvers.simulator import simulate
from solvers.simulator.schedule_engine import simulate_plan_schedule, simulate_schedule
from solvers.validity import resolve_plan
from tests.solvers.simulator.cases import chain_graph, line_topology
from tests.strategies import examples, throughput_cases


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(throughput_cases())
def test_gpipe_and_1f1b_equal_the_stage_level_engine(case: tuple[Problem, Plan]) -> None:
    problem, plan = case
    rp = resolve_plan(problem, plan)
    expected = simulate(problem, rp, engine="stage").metrics
    run = simulate_plan_schedule(problem, rp)
    assert run.iteration_s == expected["iteration_s"]
    assert run.bytes_per_channel == expected["bytes_per_channel"]
    assert simulate_plan_schedule(problem, rp.plan.with_(micro_batches=1), allreduce=False).iteration_s == \
        expected["latency_s"]
    assert run.peak_memory_bytes == pytest.approx(plan_memory_bytes(problem, rp), rel=1e-12)
    if all(len(devs) == 1 for devs in rp.stage_devices):  # group time = device time: the same busy seconds
        assert run.bubble_fraction == pytest.approx(expected["bubble_fraction"], rel=1e-9, abs=1e-12)


def _equal_stages(ranks: int, v: int, fwd_s: float, bwd_s: float, param_bytes: float = 1.0,
                  edge_bytes: float = 0.0, bandwidth_Bps: float = 1e9) -> tuple[Problem, list[list[int]], list[list[int]]]:
    """One op per virtual stage, each rank on its own device."""
    graph = chain_graph(ranks * v, fwd_s, bwd_s, edge_bytes=edge_bytes, param_bytes=param_bytes)
    problem = Problem(graph, line_topology(ranks, bandwidth_Bps), "throughput")
    return problem, [[j] for j in range(ranks * v)], [[r] for r in range(ranks)]


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("ranks", "mb"), [(2, 4), (4, 8), (3, 2)])
def test_one_stage_per_rank_closed_form(name: str, ranks: int, mb: int) -> None:
    problem, ops, devs = _equal_stages(ranks, 1, 1.25, 2.5)
    run = simulate_schedule(problem, build_schedule(name, ranks, 1, mb), ops, devs)
    assert run.iteration_s == pytest.approx((mb + ranks - 1) * 3.75, rel=1e-12)
    assert run.bubble_fraction == pytest.approx((ranks - 1) / (mb + ranks - 1), rel=1e-12)


@pytest.mark.parametrize(("ranks", "v", "mb"), [(2, 2, 4), (4, 2, 8), (4, 4, 8), (3, 2, 6)])
def test_interleaved_1f1b_cuts_the_bubble_by_v(ranks: int, v: int, mb: int) -> None:
    """Narayanan et al. (arXiv 2104.04473) Section 2.2: the bubble is ``(R - 1)(f + b)`` per virtual stage,
    ``1/v`` of 1F1B's with stages ``v`` times larger."""
    problem, ops, devs = _equal_stages(ranks, v, 1.0, 2.0)
    run = simulate_schedule(problem, build_schedule("interleaved-1f1b", ranks, v, mb), ops, devs)
    assert run.iteration_s == pytest.approx(v * mb * 3.0 + (ranks - 1) * 3.0, rel=1e-12)
    assert run.busy_s == pytest.approx([v * mb * 3.0] * ranks)


@pytest.mark.parametrize(("ranks", "mb"), [(2, 4), (3, 6), (4, 4), (4, 16)])
def test_zero_bubble_1p_bubble(ranks: int, mb: int) -> None:
    """ZB-H1 (Qi et al., arXiv 2401.10241, Section 3): bubble ``(R - 1)(F + I - W)``; here F = I = W = 1."""
    problem, ops, devs = _equal_stages(ranks, 1, 1.0, 2.0)
    run = simulate_schedule(problem, build_schedule("interleaved-zb", ranks, 1, mb), ops, devs)
    assert run.iteration_s == pytest.approx(mb * 3.0 + (ranks - 1) * 1.0, rel=1e-12)


@pytest.mark.parametrize("name", PIPELINE_SCHEDULES)
def test_every_generated_schedule_runs_to_the_end(name: str) -> None:
    """The generators' lists never deadlock under the data dependencies, and every action runs once."""
    for ranks, v, mb in itertools.product((1, 2, 4), (1, 2), (1, 3, 8)):
        try:
            sch = build_schedule(name, ranks, v, mb)
        except InvalidProblem:
            continue
        problem, ops, devs = _equal_stages(ranks, v, 1.0, 2.0, edge_bytes=1e3)
        run = simulate_schedule(problem, sch, ops, devs)
        assert run.busy_s == pytest.approx([v * mb * 3.0] * ranks)
        assert run.iteration_s >= v * mb * 3.0


def test_ops_without_parameters_have_no_weight_gradient() -> None:
    problem, ops, devs = _equal_stages(2, 1, 1.0, 2.0, param_bytes=0.0)
    run = simulate_schedule(problem, build_schedule("interleaved-zb", 2, 1, 4), ops, devs, timeline=True)
    assert run.timeline is not None
    weights = [e for e in run.timeline if "W" in e.task and not e.task.startswith("0")]
    assert weights and all(e.end_s == e.start_s for e in weights)
    assert {e.end_s - e.start_s for e in run.timeline if "I" in e.task and not e.task.startswith("0")} == {2.0}


def test_recomputation_lengthens_the_input_gradient_only() -> None:
    problem, ops, devs = _equal_stages(2, 1, 1.0, 2.0)
    run = simulate_schedule(problem, build_schedule("interleaved-zb", 2, 1, 2), ops, devs, recompute=[False, True],
                            timeline=True)
    assert run.timeline is not None
    spans = {e.task: e.end_s - e.start_s for e in run.timeline}
    assert (spans["1I0"], spans["1W0"]) == (2.0, 1.0)


@pytest.mark.parametrize("recompute", [False, True])
def test_the_first_stage_runs_its_backward_whole_at_w(recompute: bool) -> None:
    """As torch's ``PipelineStage`` does: the first stage has no input gradient, so its ``I`` does nothing and
    its ``W`` the whole backward (with its recomputed forward), at no split cost."""
    problem, ops, devs = _equal_stages(2, 1, 1.0, 2.0)
    run = simulate_schedule(problem, build_schedule("interleaved-zb", 2, 1, 2), ops, devs,
                            recompute=[recompute, False], timeline=True)
    assert run.timeline is not None
    spans = {e.task: e.end_s - e.start_s for e in run.timeline}
    assert (spans["0I0"], spans["0W0"]) == (0.0, 3.0 if recompute else 2.0)
    assert run.busy_s[0] == pytest.approx(2 * (3.0 + (1.0 if recompute else 0.0)))


def test_messages_cross_channels_only_between_ranks() -> None:
    problem, ops, devs = _equal_stages(1, 2, 1.0, 2.0, edge_bytes=1e9)
    run = simulate_schedule(problem, build_schedule("looped-bfs", 1, 2, 3), ops, devs)
    assert run.iteration_s == pytest.approx(2 * 3 * 3.0) and run.bytes_per_channel == {}
    problem, ops, devs = _equal_stages(2, 2, 1.0, 2.0, edge_bytes=1e6, bandwidth_Bps=1e9)
    run = simulate_schedule(problem, build_schedule("interleaved-1f1b", 2, 2, 4), ops, devs)
    # stage pairs (0,1), (1,2), (2,3) each cross ranks: 3 messages a direction per micro-batch (forward or gradient)
    assert run.bytes_per_channel == {"d0->d1": pytest.approx(3 * 4 * 1e6), "d1->d0": pytest.approx(3 * 4 * 1e6)}
    assert run.iteration_s > 4 * 2 * 3.0 + 3.0


def test_an_action_before_its_input_deadlocks_naming_it() -> None:
    problem, ops, devs = _equal_stages(2, 1, 1.0, 2.0)
    bad = PipelineSchedule("custom", 2, 1, 1, (0, 1), ((Action("F", 0, 0), Action("B", 0, 0)),
                                                       (Action("B", 1, 0), Action("F", 1, 0))))
    with pytest.raises(InvalidPlan) as info:
        simulate_schedule(problem, bad, ops, devs)
    assert info.value.field == "schedule" and "rank 1: 1B0" in info.value.message


@pytest.mark.parametrize(("stage_ops", "rank_devices", "field", "text"), [
    ([[0], [1], [2]], [[0], [1]], "stages", "runs 4 virtual stages"),
    ([[0], [1], [2], [3]], [[0]], "devices", "runs on 2 ranks"),
    ([[0], [1], [2], [3]], [[0], [0]], "devices", "own non-empty device group"),
    ([[0, 1], [1], [2], [3]], [[0], [1]], "stages", "'op1' is in virtual stages 0 and 1"),
    ([[0], [], [2], [3]], [[0], [1]], "stages", "'op1' is in no virtual stage"),
    ([[1], [0], [2], [3]], [[0], [1]], "stages", "sends to the earlier stage"),
])
def test_stages_that_do_not_fit_the_schedule_are_refused(stage_ops: list[list[int]], rank_devices: list[list[int]],
                                                         field: str, text: str) -> None:
    problem, _, _ = _equal_stages(2, 2, 1.0, 2.0)
    with pytest.raises(InvalidPlan) as info:
        simulate_schedule(problem, build_schedule("interleaved-1f1b", 2, 2, 2), stage_ops, rank_devices)
    assert info.value.field == field and text in info.value.message


def test_a_plan_runs_only_one_stage_per_rank_schedules() -> None:
    problem = Problem(chain_graph(2), line_topology(2), "throughput", ProblemSettings(micro_batches=(2,)))
    plan = Plan((Stage(("op0",), ("d0",)), Stage(("op1",), ("d1",))), micro_batches=2)
    with pytest.raises(InvalidPlan) as info:
        simulate_plan_schedule(problem, plan, build_schedule("looped-bfs", 1, 2, 2))
    assert info.value.field == "schedule"
    assert simulate_plan_schedule(problem, plan, build_schedule("interleaved-zb", 2, 1, 2)).iteration_s > 0
