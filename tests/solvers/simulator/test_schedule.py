"""The per-stage task orders of the pipeline schedules."""

from __future__ import annotations

import pytest

from solvers.model.errors import InvalidPlan
from solvers.model.settings import SCHEDULES
from solvers.simulator.schedule import BACKWARD, FORWARD, stage_task_order


def test_gpipe_runs_every_forward_then_every_backward() -> None:
    assert stage_task_order("gpipe", 2, 0, 2) == [(FORWARD, 0), (FORWARD, 1), (BACKWARD, 0), (BACKWARD, 1)]


def test_1f1b_warms_up_then_alternates() -> None:
    assert stage_task_order("1f1b", 3, 0, 3) == [(FORWARD, 0), (FORWARD, 1), (FORWARD, 2), (BACKWARD, 0),
                                                 (BACKWARD, 1), (BACKWARD, 2)]
    assert stage_task_order("1f1b", 3, 2, 2) == [(FORWARD, 0), (BACKWARD, 0), (FORWARD, 1), (BACKWARD, 1)]


def test_an_unknown_schedule_is_an_invalid_plan_naming_the_valid_ones() -> None:
    with pytest.raises(InvalidPlan) as info:
        stage_task_order("interleaved", 2, 0, 4)
    assert info.value.field == "schedule" and "'interleaved'" in info.value.message
    assert all(name in info.value.message for name in SCHEDULES)
