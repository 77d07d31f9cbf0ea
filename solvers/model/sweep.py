"""Sweeps: one problem's settings varied along a few axes, one member per combination (docs/api.md).

A comparison with ``sweep = {"micro_batches": [4, 8, 16], "schedule": ["gpipe", "1f1b"], "tp": [1, 2]}``
runs every solver once per combination of the axes' values (here 3 × 2 × 2): each member's settings
are the comparison's settings with one value per axis put in, and are checked as a solve's would
be, an error naming the swept value (``sweep.tp[1]``) when that value is what makes them wrong.  An axis is one entry of
:data:`SWEEP_AXES` (the setting it sets and how a value goes in), so a new setting is one more
axis.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from solvers.model.errors import InvalidInput
from solvers.model.settings import Count, Schedule, TensorParallelDegree

MAX_SWEEP_VALUES = 16  # values of one axis
MAX_SWEEP_MEMBERS = 64  # solvers × combinations of one comparison

# axis -> how one of its values goes into the settings (a single micro-batch count is a one-candidate list)
SWEEP_AXES: dict[str, Callable[[Any], Any]] = {
    "micro_batches": lambda value: [value],
    "schedule": lambda value: value,
    "tp": lambda value: value,
}


class Sweep(BaseModel):
    """The values of each swept setting (an axis left out is not swept)."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="Sweep")

    micro_batches: list[Count] | None = Field(
        None, min_length=1, max_length=MAX_SWEEP_VALUES, json_schema_extra={"uniqueItems": True},
        description="Micro-batch counts: one member per count (its settings.micro_batches is [count]).")
    schedule: list[Schedule] | None = Field(
        None, min_length=1, max_length=MAX_SWEEP_VALUES, json_schema_extra={"uniqueItems": True},
        description="Pipeline schedules: one member per schedule.")
    tp: list[TensorParallelDegree] | None = Field(
        None, min_length=1, max_length=MAX_SWEEP_VALUES, json_schema_extra={"uniqueItems": True},
        description="Tensor-parallel degrees, powers of two: one member per degree (its settings.tp is the "
                    "degree; above 1 only with the gpipe, 1f1b or auto schedule).")

    def axes(self) -> dict[str, list[Any]]:
        """The swept axes in :data:`SWEEP_AXES` order, each with its values."""
        return {name: list(values) for name in SWEEP_AXES if (values := getattr(self, name)) is not None}


def combinations(sweep: Sweep | None) -> list[dict[str, Any]]:
    """Every combination of the axes' values (``[{}]`` without a sweep); duplicates are refused
    with an error naming the axis."""
    axes = sweep.axes() if sweep is not None else {}
    for name, values in axes.items():
        if len({repr(v) for v in values}) != len(values):
            raise InvalidInput(f"sweep.{name}: a value is listed twice", field=f"sweep.{name}")
    names = list(axes)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(axes[n] for n in names))]


def check_members(n_solvers: int, combos: Sequence[Mapping[str, Any]]) -> None:
    """Refuse more than :data:`MAX_SWEEP_MEMBERS` members (solvers × combinations), naming ``sweep``."""
    if n_solvers * len(combos) > MAX_SWEEP_MEMBERS:
        raise InvalidInput(f"sweep: {n_solvers} solver(s) × {len(combos)} combination(s) = "
                           f"{n_solvers * len(combos)} members, more than {MAX_SWEEP_MEMBERS}; sweep fewer values",
                           field="sweep")


def member_settings(settings: Mapping[str, Any], combo: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with the combination's values put in (JSON names, as ``ProblemSettings.to_dict``)."""
    return {**settings, **{name: SWEEP_AXES[name](value) for name, value in combo.items()}}


def member_error(exc: InvalidInput, combo: Mapping[str, Any], sweep: Sweep | None) -> InvalidInput:
    """``exc``, raised checking the settings of the member ``combo``, renamed to the swept value that
    caused it: an error naming ``settings.<axis>`` of a swept axis names ``sweep.<axis>[i]``, ``i`` the
    value's position; where the setting it names is not swept, a swept ``tp`` is named when the error
    is about tensor parallelism (``settings.tp``), else ``exc`` is returned as it is."""
    axes = sweep.axes() if sweep is not None else {}
    field = exc.field or ""
    setting = field.removeprefix("settings.").split(".")[0].split("[")[0] if field.startswith("settings.") else ""
    if setting not in combo and setting == "tp" and "schedule" in combo:
        setting = "schedule"  # a fixed tp refused under a swept schedule: the schedule is the swept cause
    if setting not in combo:
        return exc
    i = [repr(v) for v in axes[setting]].index(repr(combo[setting]))
    named = f"sweep.{setting}[{i}]"
    detail = exc.message.removeprefix(f"{field}: ") if exc.message.startswith(f"{field}: ") else exc.message
    others = ", ".join(f"{k} {v}" for k, v in combo.items() if k != setting)
    where = f" (with {others})" if others else ""
    renamed = type(exc)(f"{named}: {combo[setting]!r}{where}: {detail}", field=named, ref=exc.ref)
    return renamed


def swept_values(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A member's value of every axis, read back from its settings (a one-candidate
    ``micro_batches`` is that count; several candidates are not one swept value: ``None``)."""
    out: dict[str, Any] = {}
    for name in SWEEP_AXES:
        value = settings.get(name)
        if name == "micro_batches":
            value = value[0] if isinstance(value, list | tuple) and len(value) == 1 else None
        out[name] = value
    return out
