"""A plan with a tensor-parallel stage is refused by the launcher before any bundle is built."""

from __future__ import annotations

import pytest

from launcher.placement import device_slots
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan, Stage


def test_tensor_parallel_stage_is_refused_naming_it() -> None:
    plan = Plan((Stage(("a",), ("gpu0",)), Stage(("b",), ("gpu1", "gpu2"), tp=2)))
    with pytest.raises(InvalidPlan) as info:
        device_slots(plan, None)
    assert info.value.field == "stages[1].tp" and "tp=2" in str(info.value)
    assert [s.device for s in device_slots(Plan((Stage(("a",), ("gpu0", "gpu1")),)), None)] == ["gpu0", "gpu1"]
