"""Sweeps: one problem's settings varied along a few axes, one member per combination (docs/api.md).

A comparison with ``sweep = {"micro_batches": [4, 8, 16], "schedule": ["gpipe", "1f1b"]}`` runs
every solver once per combination of the axes' values (here 3 × 2): each member's settings are
the comparison's settings with one value per axis put in.  An axis is one entry of
:data:`SWEEP_AXES` (the setting it sets and how a value goes in), so a new setting is one more
axis.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from solvers.model.errors import InvalidInput
from solvers.model.settings import Count, Schedule

MAX_SWEEP_VALUES = 16  # values of one axis
MAX_SWEEP_MEMBERS = 64  # solvers × combinations of one comparison

# axis -> how one of its values goes into the settings (a single micro-batch count is a one-candidate list)
SWEEP_AXES: dict[str, Callable[[Any], Any]] = {
    "micro_batches": lambda value: [value],
    "schedule": lambda value: value,
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
