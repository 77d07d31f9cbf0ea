"""Sweeps as a model: the tensor-parallel axis's values, the members' settings and the error that names
the swept value making a member's settings wrong."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from solvers.model.errors import InvalidInput, InvalidProblem
from solvers.model.settings import settings_from_dict
from solvers.model.sweep import Sweep, combinations, member_error, member_settings, swept_values


def _member_error(settings: dict[str, object], sweep: Sweep) -> InvalidInput:
    """The error of the first member whose settings are refused (renamed by :func:`member_error`)."""
    for combo in combinations(sweep):
        try:
            settings_from_dict(member_settings(settings, combo))
        except InvalidInput as exc:
            return member_error(exc, combo, sweep)
    raise AssertionError("every member's settings were accepted")


def test_a_tp_sweep_fixes_each_members_degree() -> None:
    sweep = Sweep.model_validate({"tp": [1, 2, 4], "schedule": ["gpipe", "1f1b"]})
    combos = combinations(sweep)
    assert len(combos) == 6 and sweep.axes() == {"schedule": ["gpipe", "1f1b"], "tp": [1, 2, 4]}
    settings = [settings_from_dict(member_settings({"micro_batches": [4]}, c)) for c in combos]
    assert sorted((s.tp, s.schedule) for s in settings) == sorted(
        (t, k) for t in (1, 2, 4) for k in ("gpipe", "1f1b"))
    assert swept_values(settings[-1].to_dict()) == {"micro_batches": 4, "schedule": "1f1b", "tp": 4}


@pytest.mark.parametrize(("values", "loc", "why"), [
    ([1, 3], ("tp", 1), "power of two"),
    ([0], ("tp", 0), "greater than or equal to 1"),
    ([], ("tp",), "at least 1"),
    ([1 << 15], ("tp", 0), "less than or equal"),
    (list(range(17)), ("tp",), "at most 16"),
])
def test_a_tp_value_that_is_no_degree_is_refused(values: list[int], loc: tuple[object, ...], why: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Sweep.model_validate({"tp": values})
    err = caught.value.errors()[0]
    assert err["loc"] == loc and why in str(err["msg"])


def test_a_degree_listed_twice_names_the_axis() -> None:
    with pytest.raises(InvalidInput) as caught:
        combinations(Sweep.model_validate({"tp": [2, 2]}))
    assert caught.value.field == "sweep.tp"


def test_a_degree_the_schedule_refuses_names_its_position() -> None:
    exc = _member_error({"schedule": "zbv"}, Sweep.model_validate({"tp": [1, 4]}))
    assert isinstance(exc, InvalidProblem) and exc.field == "sweep.tp[1]"
    assert exc.message.startswith("sweep.tp[1]: 4: tensor-parallel stages (tp 4) run under gpipe or 1f1b only")


def test_both_swept_the_degree_is_named_with_the_schedule() -> None:
    exc = _member_error({}, Sweep.model_validate({"schedule": ["1f1b", "zbv"], "tp": [1, 2]}))
    assert exc.field == "sweep.tp[1]" and exc.message.startswith("sweep.tp[1]: 2 (with schedule zbv): ")


def test_a_fixed_degree_refused_by_a_swept_schedule_names_the_schedule() -> None:
    exc = _member_error({"tp": 2}, Sweep.model_validate({"schedule": ["gpipe", "dualpipev"]}))
    assert exc.field == "sweep.schedule[1]" and "run under gpipe or 1f1b only" in exc.message


def test_an_error_about_an_unswept_setting_is_left_as_it_is() -> None:
    exc = InvalidProblem("settings.stages: 9 stages exceed the 4 devices of the topology", field="settings.stages")
    sweep = Sweep.model_validate({"tp": [1, 2]})
    assert member_error(exc, {"tp": 2}, sweep) is exc
