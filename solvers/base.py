"""The solver interface: options, budgets, progress, and the ``Solver`` protocol (docs/python.md).

A solver receives a :class:`~solvers.model.problem.Problem`, its typed options, a
:class:`Budget` and a progress callback, and returns a :class:`~solvers.model.plan.Plan`
whose ``status`` says honestly what it knows (``optimal`` only with a proof).  Solvers read
no environment variables or globals; the same seed gives the same plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, ValidationError

from solvers.model.errors import InvalidOptions
from solvers.model.plan import Plan
from solvers.model.problem import Problem


class SolverOptions(BaseModel):
    """Base of every solver's options: frozen, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


OptionsT = TypeVar("OptionsT", bound=SolverOptions)


def parse_options(options_type: type[OptionsT], raw: Mapping[str, Any] | None, solver: str) -> OptionsT:
    """Validate raw options; the error names the solver and the offending key."""
    try:
        return options_type.model_validate(dict(raw or {}))
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "options"
        if err["type"] == "extra_forbidden":
            allowed = ", ".join(sorted(options_type.model_fields)) or "none"
            msg = f"options.{key}: unknown option for solver {solver!r} (allowed: {allowed})"
        else:
            msg = f"options.{key}: {err['msg']} (solver {solver!r})"
        raise InvalidOptions(msg, field=f"options.{key}", ref=solver) from None


@dataclass
class Budget:
    """Wall-clock budget of one solve. ``time_limit_s=None`` means unlimited.

    ``stated_s``: the limit the call stated, where this budget is a share of it (:meth:`sub`): what a
    message names (:meth:`stated_limit_s`), so that a note says "the 60 s limit", not the share's 39.9 s.
    """

    time_limit_s: float | None = None
    started_at: float = 0.0
    stated_s: float | None = None

    def __post_init__(self) -> None:
        if not self.started_at:
            self.started_at = time.monotonic()

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started_at

    def remaining_s(self) -> float:
        if self.time_limit_s is None:
            return float("inf")
        return max(0.0, self.time_limit_s - self.elapsed_s())

    def expired(self) -> bool:
        return self.remaining_s() <= 0.0

    def stated_limit_s(self) -> float | None:
        """The limit as the call stated it (this budget's own where it is no share of another)."""
        return self.stated_s if self.stated_s is not None else self.time_limit_s

    def sub(self, fraction: float) -> Budget:
        """A budget for a sub-step: ``fraction`` of what remains, counted from now."""
        if self.time_limit_s is None:
            return Budget(None)
        return Budget(self.remaining_s() * fraction, stated_s=self.stated_limit_s())


@dataclass(frozen=True)
class ProgressEvent:
    """One progress report: fraction done, best objective so far, best bound so far.

    ``plan``: the improved incumbent itself, when the solver has one to hand (anytime solvers
    attach it each time their incumbent improves): a plan not yet finished or simulated, whose
    ``incumbent_s`` is the solver's own measure.  ``auto`` streams these from its members to the
    parent, which scores them with the simulator (:mod:`solvers.portfolio`); ``to_dict`` leaves
    it out.
    """

    fraction: float
    incumbent_s: float | None = None
    bound_s: float | None = None
    message: str = ""
    plan: Plan | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"fraction": self.fraction, "incumbent_s": self.incumbent_s, "bound_s": self.bound_s,
                "message": self.message}


ProgressCallback = Callable[[ProgressEvent], None]


def no_progress(_: ProgressEvent) -> None:
    """A progress callback that ignores every event."""


@runtime_checkable
class Solver(Protocol):
    """What every back-end implements."""

    name: ClassVar[str]
    summary: ClassVar[str]
    objectives: ClassVar[tuple[str, ...]]
    options_type: ClassVar[type[SolverOptions]]
    version: ClassVar[str]

    def solve(self, problem: Problem, options: Any, budget: Budget, progress: ProgressCallback) -> Plan:
        """Place ``problem``; return the best plan found within ``budget``."""
        ...
