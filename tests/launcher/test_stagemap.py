"""Which rank group runs which stage, and what torch's multi-stage schedule classes refuse (no torch needed)."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.stagemap import is_multi_stage, pipeline_ranks, rank_groups, schedule_refusal
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan, plan_from_document


def plan(schedule: str, groups: list[list[str]], v: int, micro_batches: int, order: list[int] | None = None) -> Plan:
    """``len(groups) * v`` one-op stages; stage j on ``groups[order[j]]`` (default: the schedule's own mapping)."""
    from solvers.model.schedules import stage_ranks

    n = len(groups) * v
    where = order or list(stage_ranks(schedule, len(groups), v))
    doc: dict[str, Any] = {"format": "placer.plan/v1", "solver": "user", "status": "feasible",
                           "stages": [{"ops": [f"op{j}"], "devices": groups[where[j]]} for j in range(n)],
                           "micro_batches": micro_batches, "schedule": schedule, "virtual_stages": v}
    return plan_from_document(doc)


def test_rank_groups_round_robin_and_v() -> None:
    assert rank_groups(plan("interleaved-1f1b", [["a"], ["b"]], 2, 4)) == [0, 1, 0, 1]
    assert rank_groups(plan("zbv", [["a"], ["b"]], 2, 4)) == [0, 1, 1, 0]
    assert rank_groups(plan("dualpipev", [["a"], ["b"], ["c"]], 2, 6)) == [0, 1, 2, 2, 1, 0]
    assert is_multi_stage("looped-bfs") and not is_multi_stage("1f1b") and not is_multi_stage("gpipe")


def test_a_plan_torch_runs_passes() -> None:
    for name in ("interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv", "dualpipev"):
        p = plan(name, [["a", "b"], ["c", "d"]], 2, 4)
        schedule_refusal(p, ["a", "b", "c", "d"])
        assert pipeline_ranks(p, {"a": 0, "b": 1, "c": 2, "d": 3}) == [[0, 2], [1, 3]]


@pytest.mark.parametrize(("make", "message"), [
    (lambda: plan("interleaved-zb", [["a"], ["b"]], 2, 5),
     "micro-batches a multiple of max(1, micro_batches // ranks) = 2, got 5"),
    (lambda: plan("dualpipev", [["a"], ["b"]], 2, 3), "at least 2 x ranks = 4 micro-batches, got 3"),
    (lambda: plan("zbv", [["a"], ["b"]], 3, 4, order=[0, 1, 0, 1, 0, 1]), "runs exactly 2 stages per rank, got 3"),
    (lambda: plan("dualpipev", [["a"], ["b"]], 1, 4), "runs exactly 2 stages per rank, got 1"),
    (lambda: plan("looped-bfs", [["a"], ["b", "c"]], 2, 4), "every stage needs the same replica count, got [1, 2]"),
    (lambda: plan("interleaved-1f1b", [["a"], ["b"]], 2, 4, order=[0, 1, 1, 0]),
     "stage 2 runs on the devices of stage 0 (['a']), got ['b']"),
])
def test_what_torch_cannot_run_is_refused(make: Any, message: str) -> None:
    with pytest.raises(InvalidPlan) as err:
        schedule_refusal(make(), ["a", "b", "c"])
    assert message in str(err.value)


def test_a_single_stage_schedule_with_virtual_stages_is_refused() -> None:
    doc = {"format": "placer.plan/v1", "solver": "user", "status": "feasible", "micro_batches": 2,
           "schedule": "1f1b", "virtual_stages": 2,
           "stages": [{"ops": ["x"], "devices": ["a"]}, {"ops": ["y"], "devices": ["a"]}]}
    with pytest.raises(InvalidPlan, match="schedule '1f1b' runs one stage per rank, got 2"):
        schedule_refusal(plan_from_document(doc), ["a"])


def test_ranks_out_of_group_order_are_refused() -> None:
    p = plan("interleaved-1f1b", [["a"], ["b"]], 2, 4)
    with pytest.raises(InvalidPlan, match=r"devices \['a', 'b'\] with global ranks \[1, 0\]"):
        schedule_refusal(p, ["b", "a"])
